"""``sluicegate demo``: a live feed run through a window, with live progress.

Items arrive over time from an async generator (a stand-in for a queue or a
database feed), each takes a different time to process, and ``open_stream``
keeps at most ``--window`` of them in flight. Everything is seeded, so two
runs with the same flags behave the same.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import AsyncIterator
from typing import Any, Literal

import attrs
import trio
from rich.console import Console
from rich.live import Live
from rich.table import Table

from ._runner import open_stream

Display = Literal["rich", "plain", "none"]


@attrs.frozen
class Job:
    """One item of the demo feed."""

    number: int
    work_s: float


@attrs.define
class DemoProgress:
    """What the demo has seen so far; the display reads it."""

    total: int
    window: int
    arrived: int = 0
    started: int = 0
    finished: int = 0
    peak_in_flight: int = 0
    busy_s: float = 0.0
    started_at: float = 0.0

    @property
    def in_flight(self) -> int:
        return self.started - self.finished

    def elapsed(self) -> float:
        return trio.current_time() - self.started_at


async def feed(count: int, rng: random.Random, tally: DemoProgress) -> AsyncIterator[Job]:
    """Yield ``count`` jobs, each after a short random wait, like a live queue."""
    for number in range(count):
        await trio.sleep(rng.uniform(0.0, 0.12))
        tally.arrived += 1
        yield Job(number, rng.uniform(0.05, 0.9))


def summary_table(tally: DemoProgress, title: str = "sluicegate demo") -> Table:
    """The progress (and, at the end, summary) table."""
    elapsed = tally.elapsed()
    table = Table(title=title, show_header=False, min_width=44)
    table.add_column("what", style="bold")
    table.add_column("value", justify="right")
    table.add_row("finished", f"{tally.finished} / {tally.total}")
    table.add_row("in flight", f"{tally.in_flight} (window {tally.window})")
    table.add_row("peak in flight", str(tally.peak_in_flight))
    table.add_row("elapsed", f"{elapsed:.2f} s")
    rate = tally.finished / elapsed if elapsed > 0 else 0.0
    table.add_row("throughput", f"{rate:.1f} items/s")
    if elapsed > 0:
        table.add_row("speed-up over one at a time", f"{tally.busy_s / elapsed:.1f}x")
    return table


async def run_demo(
    *, items: int = 40, window: int = 8, seed: int = 0, display: Display = "rich"
) -> DemoProgress:
    """Run the demo and return its final tally.

    Args:
        items: How many jobs the feed produces.
        window: The most jobs processed at once.
        seed: Seed for arrival gaps and job durations.
        display: ``rich`` (live table), ``plain`` (a line per job) or ``none``.
    """
    rng = random.Random(seed)
    tally = DemoProgress(total=items, window=window, started_at=trio.current_time())

    async def process(job: Job) -> float:
        tally.started += 1
        tally.peak_in_flight = max(tally.peak_in_flight, tally.in_flight)
        await trio.sleep(job.work_s)
        tally.finished += 1
        tally.busy_s += job.work_s
        return job.work_s

    console = Console(stderr=False)
    live: Live | None = None
    if display == "rich":
        live = Live(summary_table(tally), console=console, refresh_per_second=8)
        live.start()
    try:
        source = feed(items, rng, tally)
        # Completion order, so each job is shown the moment it is done.
        async with open_stream(source, process, window=window, ordered=False) as results:
            async for done in results:
                if live is not None:
                    live.update(summary_table(tally))
                elif display == "plain":
                    print(
                        f"job {done.index:3d} done in {done.value:.2f} s "
                        f"({tally.finished}/{items}, {tally.in_flight} in flight)"
                    )
    finally:
        if live is not None:
            live.update(summary_table(tally, title="sluicegate demo: done"))
            live.stop()
    if display == "plain":
        console.print(summary_table(tally, title="sluicegate demo: done"))
    return tally


def register(commands: Any) -> None:
    """Add the ``demo`` subcommand."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "demo",
        help="run a live feed through a window and watch it",
        description="Run a seeded live feed through open_stream with a window, "
        "with live progress and a final summary.",
    )
    parser.add_argument("--items", type=int, default=40, help="jobs in the feed (default 40)")
    parser.add_argument("--window", type=int, default=8, help="jobs in flight at most (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--display",
        choices=["rich", "plain", "none"],
        default=None,
        help="rich on a terminal, plain otherwise",
    )
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    if args.items < 0:
        print("sluicegate demo: --items must be >= 0", file=sys.stderr)
        return 2
    if args.window < 1:
        print("sluicegate demo: --window must be >= 1", file=sys.stderr)
        return 2
    display: Display = args.display or ("rich" if sys.stdout.isatty() else "plain")
    trio.run(
        lambda: run_demo(items=args.items, window=args.window, seed=args.seed, display=display)
    )
    return 0
