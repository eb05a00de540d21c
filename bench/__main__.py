"""Every benchmark in one go, then one table of the performance goals.

Run by hand (not part of the tests)::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m bench [--quick] [--only ingest drain ...] [--render] [--pacing]

Runs ingest, drain, latency (payment to inbox), growth, memory, scale-out and
the month-end burst in that order, each printing what ``python -m bench.<name>`` prints, then the
goal table: goal, measured, met or missed. ``--quick`` shortens every run (for
trying the harness; its figures are not the goals' figures); ``--only``
selects benchmarks. The machine (nproc, CPU model, load averages) is printed
at the start and at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import burst, drain, growth, ingest, latency, memory, scaleout
from bench.common import machine, machine_header
from bench.goals import Goal, table


@dataclass(frozen=True)
class Bench:
    run: Callable[[bool], Any]  # quick -> the benchmark's figures
    goals: Callable[[Any], list[Goal]]
    unrun: list[Goal]  # the same goals, not measured


def run_parsed(module: Any, full: list[str], quick: list[str]) -> Callable[[bool], Any]:
    def run(short: bool) -> Any:
        argv = quick if short else full
        print(f"$ python -m {module.__name__} {' '.join(argv)}".rstrip(), flush=True)
        return module.measure(module.parser().parse_args(argv))

    return run


def run_drain(short: bool) -> drain.DrainFigures:
    rows, max_seconds = (3000, 8.0) if short else (20000, 20.0)
    print(f"$ python -m bench.drain figures: rows={rows} max-seconds={max_seconds}", flush=True)
    return drain.figures(rows, max_seconds)


INGEST_GOALS = ingest.IngestFigures().goals()
DRAIN_GOALS = [
    Goal("worker", "0 ms provider: >= 2.5x the one-row-per-transaction baseline"),
    Goal("worker", "0 ms provider: <= 0.6 ms CPU per sent row (email rendered before)"),
    Goal("worker", "0 ms provider: <= 0.6 ms CPU per sent row, rendered at the first claim"),
    Goal("worker", "50 ms provider: >= 0.9x the latency bound at the default concurrency"),
]
LATENCY_GOALS = [
    Goal("payment to inbox", f"p99 <= {latency.GOAL_P99_MS:g} ms at {latency.GOAL_RATE}/s"),
    Goal("payment to inbox", "knee (p99 > 250 ms) >= 1.5x today's 200/s, i.e. >= 300/s"),
    Goal(
        "payment to inbox",
        "cron mode (`receipts worker` from the platform's scheduler)",
        "up to the cron interval (Heroku Scheduler 10 min, Render 1 min) plus the drain",
        shown="reported, not run",
    ),
]
MEMORY_GOALS = [
    Goal("memory", f"peak RSS per web worker <= {memory.GOAL_MB:g} MB"),
    Goal("memory", f"peak RSS per worker process <= {memory.GOAL_MB:g} MB"),
]
SCALEOUT_GOALS = [
    Goal("scale-out", "throughput grows with processes until the cores are the limit"),
    Goal("scale-out", "no double send (every key exactly once at the provider)"),
]
BURST_MINUTES = 10
BURST_REQUESTS = 1000
BURST_GOALS = [
    Goal("burst", f"100,000 receipts at a 5 requests/s limit drained in <= {BURST_MINUTES} min"),
    Goal("burst", f"<= {BURST_REQUESTS:,} provider requests (batches)"),
    Goal("burst", "0 doubles, 0 receipts left unsent"),
    Goal("burst", "the app's stand-in (1 request/s, same team) sees 0 429s"),
    Goal("burst", "single sends at the same limit, beside it", shown="reported, not run"),
]
GROWTH_GOAL = "drain and ingest with {history} sent rows within 10% of an empty table"
GROWTH_GOALS = [Goal("growth", GROWTH_GOAL.format(history="1,000,000"))]


def drain_goals(figures: drain.DrainFigures) -> list[Goal]:
    fast, base, slow = figures.fast, figures.baseline, figures.slow
    versus = fast.rate / base.rate if base.rate else 0.0
    cpu = fast.cpu_seconds * 1000 / max(1, fast.sent)
    first = figures.first_claim
    first_cpu = first.cpu_seconds * 1000 / max(1, first.sent)
    bound = figures.concurrency / figures.latency
    return [
        Goal(
            "worker",
            DRAIN_GOALS[0].goal,
            f"{versus:.2f}x ({fast.rate:.0f} vs {base.rate:.0f} rows/s)",
            versus >= 2.5,
        ),
        Goal("worker", DRAIN_GOALS[1].goal, f"{cpu:.2f} ms", cpu <= 0.6),
        Goal(
            "worker",
            DRAIN_GOALS[2].goal,
            f"{first_cpu:.2f} ms ({first.rate:.0f} rows/s, {first.rate / base.rate:.2f}x baseline)"
            if base.rate
            else f"{first_cpu:.2f} ms",
            first_cpu <= 0.6,
        ),
        Goal(
            "worker",
            DRAIN_GOALS[3].goal,
            f"{slow.rate / bound:.2f} ({slow.rate:.0f} of {bound:.0f} rows/s, "
            f"concurrency {figures.concurrency})",
            slow.rate >= 0.9 * bound,
        ),
    ]


def latency_goals(figures: latency.LatencyFigures) -> list[Goal]:
    at_goal = figures.at(latency.GOAL_RATE)
    p99 = LATENCY_GOALS[0]
    if at_goal is not None:
        p99 = Goal(
            p99.area,
            p99.goal,
            f"{at_goal.p99_ms:.1f} ms (p50 {at_goal.percentile(50):.1f} ms)",
            at_goal.p99_ms <= latency.GOAL_P99_MS,
        )
    highest = max((f.rate for f in figures.rates), default=0)
    knee = figures.knee
    measurable = knee is not None or highest >= 300
    met = (knee is None or knee >= 300) if measurable else None
    knee_goal = Goal("payment to inbox", LATENCY_GOALS[1].goal, figures.knee_text(), met)
    return [p99, knee_goal, *LATENCY_GOALS[2:]]


def memory_goals(figures: memory.MemoryFigures) -> list[Goal]:
    web = ", ".join(f"{mb:.0f} MB" for mb in figures.web_peak_mb) or "n/a"
    return [
        Goal("memory", MEMORY_GOALS[0].goal, web, 0 < figures.web_max_mb <= memory.GOAL_MB),
        Goal(
            "memory",
            MEMORY_GOALS[1].goal,
            f"{figures.worker_peak_mb:.0f} MB",
            0 < figures.worker_peak_mb <= memory.GOAL_MB,
        ),
    ]


def scaleout_goals(figures: scaleout.ScaleFigures) -> list[Goal]:
    return [
        Goal("scale-out", SCALEOUT_GOALS[0].goal, figures.summary(), figures.grows()),
        Goal(
            "scale-out",
            SCALEOUT_GOALS[1].goal,
            f"{figures.double_sends} keys sent more than once",
            figures.double_sends == 0,
        ),
    ]


def growth_goals(figures: growth.GrowthFigures) -> list[Goal]:
    changes = figures.changes()
    measured = f"drain {changes['drain']:+.0%}, ingest {changes['ingest']:+.0%}"
    met = all(abs(change) <= 0.10 for change in changes.values())
    history = figures.grown.label.split()[0]
    return [Goal("growth", GROWTH_GOAL.format(history=f"{int(history):,}"), measured, met)]


def burst_goals(figures: burst.BurstFigures) -> list[Goal]:
    batched = figures.batched
    minutes = batched.seconds / 60
    scale = 100_000 / batched.rows  # a --quick run drains fewer rows
    single = figures.single
    return [
        Goal(
            "burst",
            BURST_GOALS[0].goal,
            f"{batched.sent:,} of {batched.rows:,} in {minutes:.1f} min",
            batched.unsent == 0 and minutes * scale <= BURST_MINUTES,
        ),
        Goal(
            "burst",
            BURST_GOALS[1].goal,
            f"{batched.receipt_requests:,} ({batched.receipt_429s} answered 429)",
            batched.receipt_requests * scale <= BURST_REQUESTS,
        ),
        Goal(
            "burst",
            BURST_GOALS[2].goal,
            f"{batched.doubles} doubles, {batched.unsent} unsent",
            batched.doubles == 0 and batched.unsent == 0,
        ),
        Goal(
            "burst",
            BURST_GOALS[3].goal,
            f"{batched.app_429s} of {batched.app_requests}",
            batched.app_429s == 0,
        ),
        Goal(
            "burst",
            BURST_GOALS[4].goal,
            "not run"
            if single is None
            else f"{single.sent:,} in {single.seconds:.0f} s, {single.receipt_requests:,} "
            f"requests: all {single.rows:,} would take {single.projected_hours():.1f} h",
            shown="reported",
        ),
    ]


BENCHES: dict[str, Bench] = {
    "ingest": Bench(
        run_parsed(ingest, [], ["--seconds", "3", "--connections", "16"]),
        lambda figures: figures.goals(),
        INGEST_GOALS,
    ),
    "drain": Bench(run_drain, drain_goals, DRAIN_GOALS),
    "latency": Bench(
        run_parsed(latency, [], ["--seconds", "8", "--rates", "50", "150", "300"]),
        latency_goals,
        LATENCY_GOALS,
    ),
    "growth": Bench(
        run_parsed(growth, [], ["--history", "100000", "--pending", "1000", "--seconds", "3"]),
        growth_goals,
        GROWTH_GOALS,
    ),
    "memory": Bench(
        run_parsed(memory, [], ["--seconds", "3", "--rows", "1000"]), memory_goals, MEMORY_GOALS
    ),
    "scaleout": Bench(run_parsed(scaleout, [], ["--rows", "1000"]), scaleout_goals, SCALEOUT_GOALS),
    "burst": Bench(
        run_parsed(burst, [], ["--rows", "5000", "--single-minutes", "0.25"]),
        burst_goals,
        BURST_GOALS,
    ),
}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs, to try the harness")
    parser.add_argument("--only", nargs="+", choices=list(BENCHES), default=list(BENCHES))
    parser.add_argument("--render", action="store_true", help="also run bench.render")
    parser.add_argument("--pacing", action="store_true", help="also run bench.pacing")
    args = parser.parse_args()
    print(f"$ python -m bench {' '.join(sys.argv[1:])}".rstrip())
    print(f"start {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}: {machine_header()}")
    print(f"machine: {machine()}", flush=True)
    goals: list[Goal] = []
    for name in BENCHES:
        bench = BENCHES[name]
        if name not in args.only:
            goals += bench.unrun
            continue
        print(f"\n=== {name} ===", flush=True)
        goals += run_one(name, bench, args.quick)
    for name, wanted in (("render", args.render), ("pacing", args.pacing)):
        if wanted:
            print(f"\n=== {name} ===", flush=True)
            run_main(name)
    print(f"\nend {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}: {machine_header()}")
    if args.quick:
        print("--quick: short runs, not the goals' figures")
    print("\n" + table(goals))
    return 0


def run_one(name: str, bench: Bench, quick: bool) -> list[Goal]:
    started = time.monotonic()
    try:
        figures = bench.run(quick)
    except Exception:
        traceback.print_exc()
        return [Goal(g.area, g.goal, f"{name} failed (see above)", False) for g in bench.unrun]
    finally:
        print(f"({name}: {time.monotonic() - started:.0f} s)", flush=True)
    return bench.goals(figures)


def run_main(name: str) -> None:
    module = {"render": "bench.render", "pacing": "bench.pacing"}[name]
    print(f"$ python -m {module}", flush=True)
    saved = sys.argv
    sys.argv = [module]
    try:
        __import__(module, fromlist=["main"]).main()
    except Exception:
        traceback.print_exc()
    finally:
        sys.argv = saved


if __name__ == "__main__":
    sys.exit(main())
