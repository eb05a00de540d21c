"""``python -m tests.soak --minutes N [--seed S]``: run the fault soak, print the verdict.

Exit 0 when nothing was lost, doubled or left stuck, and every event got its 200
in the end; 1 otherwise, listing the keys.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.real_processes import BIN
from tests.soak.checker import Verdict, check, unfinished_counts
from tests.soak.cluster import Cluster
from tests.soak.faults import KINDS, Faults
from tests.soak.fleet import Fleet
from tests.soak.processes import LEASE_SECONDS, Provider, environment
from tests.soak.traffic import Stripe
from tests.tcp_proxy import TcpProxy, through_proxy

DELIVERIES_PER_SECOND = 5.0  # Stripe's pace, on average (a 2-core machine runs everything)
REDELIVERY_SECONDS = 120.0  # after the faults: every event without a 200 is sent until it has one
DRAIN_SECONDS = 4 * LEASE_SECONDS + 60.0  # leases of killed workers expire, retries come due


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    parser.add_argument(
        "--minutes", type=float, default=2.0, help="how long faults and traffic run"
    )
    parser.add_argument("--seed", type=int, default=None, help="the random schedule (default: new)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    run_dir = Path(tempfile.mkdtemp(prefix=f"receipts-soak-{seed}-"))
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[{time.monotonic() - started:7.1f} s] {message}", flush=True)

    say(f"soak: seed {seed}, {args.minutes:g} minutes, logs and answers in {run_dir}")
    with _soak_world(run_dir, say) as (cluster, proxy, provider, fleet):
        rng = random.Random(seed)
        stripe = Stripe(fleet.web.url, random.Random(rng.random()), run_dir / "answers.jsonl",
                        started)  # fmt: skip
        faults = Faults(random.Random(rng.random()), cluster, proxy, provider, fleet, say)
        faults.start()
        traffic_rng = random.Random(rng.random())
        end = time.monotonic() + args.minutes * 60
        while time.monotonic() < end:
            stripe.step()
            time.sleep(traffic_rng.expovariate(DELIVERIES_PER_SECOND))
        say("time is up: the fault under way ends, then no more; the processes come back")
        faults.stop()
        fleet.all_up()
        unanswered = stripe.redeliver_unanswered(within=REDELIVERY_SECONDS)
        stripe.close()
        say(f"every event redelivered until answered ({len(unanswered)} never were); draining")
        left = _drain(cluster.url, say)
        say(f"drained ({left} rows unfinished); stopping the processes")
        exits = fleet.stop()
        verdict = check(cluster.url, stripe.answers, provider.client.deliveries())
        _report(say, faults, fleet, stripe, exits, verdict, unanswered)
    holds = verdict.holds and not unanswered
    print(f"{verdict.summary()}{'' if holds else ' (FAILED)'}", flush=True)
    return 0 if holds else 1


@contextlib.contextmanager
def _soak_world(
    run_dir: Path, say: Callable[[str], None]
) -> Iterator[tuple[Cluster, TcpProxy, Provider, Fleet]]:
    """A migrated cluster behind a proxy, the fake provider, and the processes; all
    stopped (and the cluster deleted) however the soak ends."""
    log_dir = run_dir / "logs"
    log_dir.mkdir()
    with contextlib.ExitStack() as stack:
        cluster = Cluster(run_dir / "pgdata")
        stack.callback(cluster.close)
        proxy = TcpProxy("127.0.0.1", cluster.port)
        stack.callback(proxy.close)
        database_url = through_proxy(cluster.url, proxy)
        provider = Provider(log_dir / "provider.log")
        stack.callback(provider.stop)
        environ = environment(database_url, provider.url)
        subprocess.run(
            [str(BIN / "receipts"), "migrate"], env=environ, check=True, capture_output=True
        )
        fleet = Fleet(environ, log_dir)
        stack.callback(fleet.stop)
        fleet.start()
        say(f"postgres :{cluster.port} behind proxy :{proxy.port}, gunicorn {fleet.web.url}, "
            f"provider {provider.url}")  # fmt: skip
        yield cluster, proxy, provider, fleet


def _drain(database_url: str, say: Callable[[str], None]) -> int:
    """Wait until no row is pending or processing (at most DRAIN_SECONDS); how many are."""
    deadline = time.monotonic() + DRAIN_SECONDS
    left = unfinished_counts(database_url)
    while left and time.monotonic() < deadline:
        time.sleep(2)
        left = unfinished_counts(database_url)
    return left


def _report(
    say: Callable[[str], None],
    faults: Faults,
    fleet: Fleet,
    stripe: Stripe,
    exits: dict[str, int | None],
    verdict: Verdict,
    unanswered: list[str],
) -> None:
    print("\n--- soak report", flush=True)
    print("faults:", ", ".join(f"{kind} {faults.by_kind[kind]}" for kind in KINDS))
    for name, count in sorted(faults.counts.items()):
        print(f"  {name}: {count}")
    print(f"events: {len(stripe.deliveries)} made for "
          f"{len({d.invoice_id for d in stripe.deliveries})} invoices; "
          f"{sum(stripe.sent.values())} deliveries sent ({_counts(stripe.sent)})")  # fmt: skip
    print(f"answers by status: {_counts(Counter(a.status for a in stripe.answers))}"
          "  (0: no HTTP answer)")  # fmt: skip
    print(f"200 answers by outcome: "
          f"{_counts(Counter(a.outcome for a in stripe.answers if a.status == 200))}")  # fmt: skip
    unexpected = [a for a in stripe.answers if a.status not in (0, 200, 503)]
    for answer in unexpected[:20]:
        print(f"unexpected answer: {answer}")
    print(f"rows by status: {_counts(verdict.rows_by_status)}")
    if verdict.reviews:
        print(f"review reasons: {_counts(verdict.reviews)}")
    print(f"attempts by outcome: {_counts(verdict.attempts_by_outcome)}")
    print(f"provider deliveries: {verdict.deliveries}")
    print(f"cron runs by exit code: {_counts(fleet.cron_exits)}")
    print(f"process exits at the end: {exits}")
    if fleet.unexpected_exits:
        print(f"processes that exited on their own: {fleet.unexpected_exits}")
    for title, problems in (("LOST", verdict.lost), ("DOUBLE", verdict.doubles),
                            ("STUCK", verdict.stuck)):  # fmt: skip
        for key, what in sorted(problems.items()):
            print(f"{title} {key}: {what}")
    for event_id in unanswered:
        print(f"UNANSWERED {event_id}: no 200 after every redelivery")
    sys.stdout.flush()


def _counts(counter: Counter[str] | Counter[int] | Counter[str | None]) -> str:
    return ", ".join(f"{key}={n}" for key, n in sorted(counter.items(), key=lambda kv: str(kv[0])))


if __name__ == "__main__":
    sys.exit(main())
