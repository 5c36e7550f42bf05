"""What ``import sluicegate`` costs over ``import trio``, in fresh interpreters.

Each repeat starts one interpreter for each import, in turn, so both see the
same machine load; the table gives the minimum and the median of each and
the difference. The target (docs/performance.md): at most 15 ms over trio.

    python bench/imports.py [--repeats N] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

TARGET_MS = 15.0


def once(module: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--quick", action="store_true", help="5 repeats: a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 5
    times: dict[str, list[float]] = {"trio": [], "sluicegate": []}
    for _ in range(args.repeats):
        for module, seen in times.items():
            seen.append(once(module))
    low = {module: min(seen) for module, seen in times.items()}
    middle = {module: statistics.median(seen) for module, seen in times.items()}
    print(f"{'import':<12} {'min ms':>8} {'median ms':>10}")
    for module in times:
        print(f"{module:<12} {low[module]:8.1f} {middle[module]:10.1f}")
    extra = middle["sluicegate"] - middle["trio"]
    verdict = "met" if extra <= TARGET_MS else "MISSED"
    print(
        f"sluicegate over trio: {low['sluicegate'] - low['trio']:.1f} ms (min), "
        f"{extra:.1f} ms (median); target <= {TARGET_MS:.0f} ms: {verdict}"
    )


if __name__ == "__main__":
    main()
