-- wrk script: POST pre-signed Stripe events, each one once per run.
-- Arguments: DATA_FILE THREADS. DATA_FILE holds, per event, a line
-- "signature<TAB>length" followed by exactly `length` bytes of body.
-- Thread k sends events k, k+THREADS, k+2*THREADS, ...; if it runs out it
-- starts over (then deliveries are no longer unique) and reports WRAPPED.

local counter = 0
local threads = {}

function setup(thread)
  thread:set("id", counter)
  table.insert(threads, thread)
  counter = counter + 1
end

function init(args)
  local path, nthreads = args[1], tonumber(args[2])
  requests_list = {}
  position = 0
  wrapped = false
  local file = assert(io.open(path, "rb"))
  local n = 0
  while true do
    local header = file:read("*l")
    if not header then break end
    local signature, length = header:match("^(.-)\t(%d+)$")
    local body = file:read(tonumber(length))
    if n % nthreads == id then
      requests_list[#requests_list + 1] = wrk.format("POST", nil, {
        ["Stripe-Signature"] = signature,
        ["Content-Type"] = "application/json",
      }, body)
    end
    n = n + 1
  end
  file:close()
end

function request()
  position = position + 1
  if position > #requests_list then
    position = 1
    wrapped = true
  end
  return requests_list[position]
end

function done(summary, latency, requests)
  for _, thread in ipairs(threads) do
    if thread:get("wrapped") then
      io.write("WRAPPED\n")
      return
    end
  end
end
