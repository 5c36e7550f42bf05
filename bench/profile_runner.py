"""Profile one benchmark case under cProfile, or run it plainly for callgrind.

    python bench/profile_runner.py run_stream          # or open_stream, baseline, ...
    python bench/profile_runner.py open_stream -n 50000 --sort tottime --top 25
    python bench/profile_runner.py serve_journal       # bench/service.py's serve() rows

The ``serve*`` cases are ``bench/service.py``'s rows (no-op items from a
filled memory channel, or an async generator for ``serve_journal_agen``),
each on a fresh journal; ``--sleeping`` gives every case items that sleep
1 ms instead of no-op ones.

cProfile roughly doubles the cost of every Python call, so read the output
for call counts and for the split between sluicegate and trio, not for
absolute speed; ``bench/run.py`` gives the real numbers.

``--plain`` runs the case without cProfile and with trio's scheduling order
fixed, for counting instructions, which the machine's load does not move
(the ``serve*`` cases and ``--sleeping`` then run on a ``MockClock``, so that
the journal's 20 ms group commits and the 1 ms sleeps do not depend on how
slowly valgrind runs them)::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        python bench/profile_runner.py open_stream --plain -n 4000
    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        python bench/profile_runner.py open_stream --plain -n 0

The difference of the two "Collected" counts over 4,000 is the cost per item
(start-up, imports and a 200-item warm-up cancel out). Run it with
``PYTHONHASHSEED=0``; repeated runs then agree within 0.3%.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys

import trio
import trio.testing

from run import WINDOW, make_cases, noop, saturated, sleeping
from service import Journals
from service import make_cases as make_service_cases

ALIASES = {
    "baseline": "baseline (nursery + CapacityLimiter)",
    "run_stream": "run_stream",
    "run_stream_sync": "run_stream, sync source (range)",
    "run_stream_drain": "run_stream, drain=Drain()",
    "run_stream_channel": "run_stream, memory channel source",
    "open_stream": "open_stream(ordered=True)",
    "open_stream_unordered": "open_stream(ordered=False)",
    "run_stream_window": "run_stream, window=Window(64)",
    "open_stream_window": "open_stream(ordered=True), Window(64)",
    "aiometer": "aiometer.amap",
}
SERVE = {
    "serve": "serve(), no journal",
    "serve_journal": "serve(), journal",
    "serve_journal_agen": "serve(), journal, async generator",
    "serve_journal_ack": "serve(), journal, on_outcome",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("case", choices=sorted(ALIASES.keys() | SERVE.keys()))
    parser.add_argument("-n", type=int, default=50_000, help="items (default 50,000)")
    parser.add_argument("--saturated", action="store_true", help="100 checkpoints per run")
    parser.add_argument("--sleeping", action="store_true", help="runs that sleep 1 ms")
    parser.add_argument("--sort", default="tottime", help="pstats sort key")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument(
        "--plain", action="store_true", help="no cProfile, fixed scheduling: for callgrind"
    )
    args = parser.parse_args(argv)

    run = saturated if args.saturated else sleeping if args.sleeping else noop
    journals = Journals()
    try:
        if args.case in SERVE:
            name = SERVE[args.case]
            case = make_service_cases(journals, run, peers=True)[name]
        else:
            name = ALIASES[args.case]
            case = make_cases(run)[name]
        mocked = args.case in SERVE or args.sleeping
        if args.plain:
            # trio reverses each batch of runnable tasks at random; a fixed seed
            # makes two runs of the same code execute the same instructions.
            trio._core._run._r.seed(0)
            for n in (200, args.n):  # a warm-up, paid by the 0-item run as well
                clock = trio.testing.MockClock(autojump_threshold=0) if mocked else None
                trio.run(case, n, clock=clock)
            return 0
        trio.run(case, 1000)  # warm-up outside the profile
        profiler = cProfile.Profile()
        profiler.enable()
        trio.run(case, args.n)
        profiler.disable()
    finally:
        journals.cleanup()
    print(f"{name}, {args.n:,} items, window {WINDOW}")
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
