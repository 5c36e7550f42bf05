"""Profile one benchmark case under cProfile and print where the time goes.

    python bench/profile_runner.py run_stream          # or open_stream, baseline, ...
    python bench/profile_runner.py open_stream -n 50000 --sort tottime --top 25

cProfile roughly doubles the cost of every Python call, so read the output
for call counts and for the split between sluicegate and trio, not for
absolute speed; ``bench/run.py`` gives the real numbers.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys

import trio

from run import WINDOW, make_cases, noop, saturated

ALIASES = {
    "baseline": "baseline (nursery + CapacityLimiter)",
    "run_stream": "run_stream",
    "run_stream_sync": "run_stream, sync source (range)",
    "open_stream": "open_stream(ordered=True)",
    "open_stream_unordered": "open_stream(ordered=False)",
    "aiometer": "aiometer.amap",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("case", choices=sorted(ALIASES))
    parser.add_argument("-n", type=int, default=50_000, help="items (default 50,000)")
    parser.add_argument("--saturated", action="store_true", help="100 checkpoints per run")
    parser.add_argument("--sort", default="tottime", help="pstats sort key")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)

    case = make_cases(saturated if args.saturated else noop)[ALIASES[args.case]]
    trio.run(case, 1000)  # warm-up outside the profile
    profiler = cProfile.Profile()
    profiler.enable()
    trio.run(case, args.n)
    profiler.disable()
    print(f"{ALIASES[args.case]}, {args.n:,} items, window {WINDOW}")
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
