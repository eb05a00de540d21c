"""A TCP proxy a test can cut: the fault lab's way to break a connection from outside.

It sits between a process and PostgreSQL (or any server). The test can:

* ``cut()`` every open connection at once (a reset, as when a database
  restarts or a network path dies), and ``refuse(True)`` new ones meanwhile;
* ``silence(True)``: accept new connections and never answer them (a server
  that hangs, or packets lost on the way), until ``silence(False)`` resets them;
* ``stall(True)``: open connections stay open and their bytes are taken (the
  kernel ACKs them) but never forwarded either way: a hung server or pooler,
  or a middlebox that still ACKs, which no reset ever ends;
* ``on_client_bytes(pattern, action)`` / ``on_server_bytes(pattern, action)``:
  run ``action`` the moment ``pattern`` passes in that direction, *before* the
  chunk holding it is forwarded. The action decides what happens next: return
  ``"forward"`` to pass the chunk on, ``"cut"`` to reset that connection
  instead. Each watch fires once;
* ``on_answer_to(request, answer, action)``: the same, for the answer to a
  request, on the connection that sent the request only.

Watching PostgreSQL's wire protocol for the ReadyForQuery message that
answers a statement run outside a transaction pins a crash to "the commit is
durable but the client has not heard of it yet". The connection must not use TLS
(``sslmode=disable``) for the bytes to be readable.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

Verdict = Literal["forward", "cut"]
Action = Callable[[], Verdict]

_CHUNK = 65536


@dataclass
class _Watch:
    pattern: bytes
    action: Action
    fired: threading.Event = field(default_factory=threading.Event)
    connection: socket.socket | None = None  # only bytes of this connection match
    then: _Watch | None = None  # armed on the same connection, other direction, once fired


class TcpProxy:
    """Listens on 127.0.0.1:``port`` and forwards to ``target``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._pumps: list[threading.Thread] = []
        self._refusing = False
        self._silent: list[socket.socket] | None = None  # held, unanswered, while silent
        self._stalled = False  # open connections' bytes are dropped, not forwarded
        self._closed = False
        self._watches: dict[str, list[_Watch]] = {"client": [], "server": []}
        self.connections_accepted = 0
        self.connections_refused = 0  # reset at once by refuse(True)
        threading.Thread(target=self._accept_loop, daemon=True, name="proxy-accept").start()

    # --- control -----------------------------------------------------------

    def cut(self) -> int:
        """Reset every open connection; return how many were cut.

        Returns once the resets are sent: a socket closed while its pump thread
        is still in ``recv()`` sends its RST only when that thread lets go, so
        the pumps are waited for (a client polled right after ``cut()`` must
        already see its connection dead).
        """
        with self._lock:
            victims = list(self._open)
            self._open.clear()
            pumps = [t for t in self._pumps if t is not threading.current_thread()]
        for sock in victims:
            _reset(sock)
        for pump in pumps:
            pump.join(timeout=5)
        return len(victims) // 2

    def refuse(self, refusing: bool) -> None:
        """While refusing, new connections are accepted and reset at once."""
        with self._lock:
            self._refusing = refusing

    def silence(self, silent: bool) -> None:
        """While silent, new connections are accepted and never answered; ending
        the silence resets them."""
        with self._lock:
            held, self._silent = self._silent, ([] if silent else None)
        for sock in held or []:
            _reset(sock)

    def stall(self, stalled: bool) -> None:
        """While stalled, bytes on open connections are read and dropped."""
        with self._lock:
            self._stalled = stalled

    def on_client_bytes(self, pattern: bytes, action: Action) -> threading.Event:
        """Watch bytes going to the server; the returned event is set once it fired."""
        return self._watch("client", pattern, action)

    def on_server_bytes(self, pattern: bytes, action: Action) -> threading.Event:
        """Watch bytes coming back from the server."""
        return self._watch("server", pattern, action)

    def on_answer_to(self, request: bytes, answer: bytes, action: Action) -> threading.Event:
        """Run ``action`` when ``answer`` comes back on the connection that sent
        ``request`` (other connections opening meanwhile do not count)."""
        answer_watch = _Watch(answer, action)
        self._watch("client", request, lambda: "forward", then=answer_watch)
        return answer_watch.fired

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.cut()

    # --- machinery ---------------------------------------------------------

    def _watch(
        self, direction: str, pattern: bytes, action: Action, then: _Watch | None = None
    ) -> threading.Event:
        watch = _Watch(pattern, action, then=then)
        with self._lock:
            self._watches[direction].append(watch)
        return watch.fired

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refusing = self._refusing
                self.connections_accepted += 1
                if self._silent is not None:
                    self._silent.append(client)
                    continue
            if refusing:
                _reset(client)
                with self._lock:
                    self.connections_refused += 1
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
                server.settimeout(None)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._open.update((client, server))
            for source, sink, direction in ((client, server, "client"), (server, client, "server")):
                pump = threading.Thread(
                    target=self._pump, args=(source, sink, client, server, direction), daemon=True
                )
                with self._lock:  # started under the lock: cut() never joins an unstarted one
                    pump.start()
                    self._pumps = [t for t in self._pumps if t.is_alive()] + [pump]

    def _pump(
        self,
        source: socket.socket,
        sink: socket.socket,
        client: socket.socket,
        server: socket.socket,
        direction: str,
    ) -> None:
        tail = b""
        try:
            while True:
                chunk = source.recv(_CHUNK)
                if not chunk:
                    break
                if self._stalled:
                    continue
                verdict = self._check(direction, tail, chunk, client)
                if verdict == "cut":
                    break
                sink.sendall(chunk)
                tail = (tail + chunk)[-64:]
        except OSError:
            pass
        self._drop(client, server)

    def _check(
        self, direction: str, tail: bytes, chunk: bytes, connection: socket.socket
    ) -> Verdict:
        other = "server" if direction == "client" else "client"
        with self._lock:
            due = [
                w
                for w in self._watches[direction]
                if w.connection in (None, connection)
                # an answer is looked for only in bytes that came after its request
                and w.pattern in (chunk if w.connection is not None else tail + chunk)
            ]
            for watch in due:
                self._watches[direction].remove(watch)
                if watch.then is not None:
                    watch.then.connection = connection
                    self._watches[other].append(watch.then)
        verdict: Verdict = "forward"
        for watch in due:
            if watch.action() == "cut":
                verdict = "cut"
            watch.fired.set()
        return verdict

    def _drop(self, client: socket.socket, server: socket.socket) -> None:
        with self._lock:
            self._open.discard(client)
            self._open.discard(server)
        _reset(client)
        _reset(server)


def _reset(sock: socket.socket) -> None:
    """Close with RST (linger 0): the peer sees the connection die, not end."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RD)  # wakes the pump thread blocked in recv()
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sock.close()


def through_proxy(database_url: str, proxy: TcpProxy) -> str:
    """The same database, reached through ``proxy`` without TLS (so bytes are readable)."""
    parts = urlsplit(database_url)
    credentials = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    query = "&".join(filter(None, (parts.query, "sslmode=disable")))
    netloc = f"{credentials}127.0.0.1:{proxy.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def proxy_to(database_url: str) -> TcpProxy:
    """A proxy to the server of ``database_url``; pass it to :func:`through_proxy`."""
    parts = urlsplit(database_url)
    return TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
