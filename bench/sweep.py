"""How the window size changes the runner's cost per no-op item, against the baseline.

    python bench/sweep.py            # windows 1, 8, 64, 512; 20,000 items each
    python bench/sweep.py -n 50000 --windows 4 16 256

Prints the median CPU time per item over 5 interleaved repeats (CPU time
because it is steadier than wall time on a shared machine).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import trio

import sluicegate
from run import agen, baseline, noop


def cpu_seconds(case: Callable[[int], Awaitable[None]], n: int) -> float:
    async def main() -> float:
        start = time.process_time()
        await case(n)
        return time.process_time() - start

    gc.collect()
    return trio.run(main)


def cases(window: int) -> dict[str, Callable[[int], Awaitable[None]]]:
    async def base(n: int) -> None:
        await baseline(agen(n), noop, window)

    async def run_stream(n: int) -> None:
        await sluicegate.run_stream(agen(n), noop, window=window)

    async def open_stream(n: int) -> None:
        async with sluicegate.open_stream(agen(n), noop, window=window) as results:
            async for _ in results:
                pass

    return {"baseline": base, "run_stream": run_stream, "open_stream": open_stream}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20_000, help="items per run")
    parser.add_argument("--windows", type=int, nargs="+", default=[1, 8, 64, 512])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    print(f"{args.n:,} no-op items, median CPU us per item of {args.repeats} repeats")
    print(f"  {'window':>6} {'baseline':>9} {'run_stream':>17} {'open_stream':>17}")
    for window in args.windows:
        todo = cases(window)
        for case in todo.values():
            cpu_seconds(case, min(args.n, 1000))  # warm-up
        times: dict[str, list[float]] = {name: [] for name in todo}
        for _ in range(args.repeats):
            for name, case in todo.items():
                times[name].append(cpu_seconds(case, args.n))
        us = {name: statistics.median(t) / args.n * 1e6 for name, t in times.items()}
        base = us["baseline"]
        print(
            f"  {window:>6} {base:>9.2f}"
            f" {us['run_stream']:>9.2f} ({base / us['run_stream']:.1f}x)"
            f" {us['open_stream']:>9.2f} ({base / us['open_stream']:.1f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
