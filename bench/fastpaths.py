"""Each fast path of the runner against the runner with that fast path switched off.

    python bench/fastpaths.py                # 1 ms items and 100-checkpoint items
    python bench/fastpaths.py --noop         # no-op items as well (for the bars)

A fast path is a second branch that does the same thing quicker, and it
stays only if switching it off costs at least 5% on real work: 1 ms items
or 100-checkpoint items (docs/performance.md, "Fast paths"). Each variant
below is the runner's own source with one fast path replaced by the plain
way of doing the same thing, compiled as a module of its own beside the real
one; the cases take turns repeat by repeat, as in ``bench/run.py``. A
replacement that no longer matches the source stops the script, so a
variant cannot silently measure the unchanged runner.

Each row shows the median CPU time per item (steadier than wall time on a
shared machine) and the wall-clock rate, and the last column says how much
slower the variant is than the runner as it is: the fast path's gain.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import types
from collections.abc import Awaitable, Callable
from typing import Any

import sluicegate
import sluicegate._runner
from run import WINDOW, agen, noop, saturated, sleeping, time_case

# name -> what the variant replaces in sluicegate/_runner.py, as (old, new) pairs.
# Empty now: the three fast paths measured on 2026-12-06 (trio's private
# cancel status, the inline copy of _ran, _Waiters) gained less than 5% on
# real work and are gone (docs/performance.md, "Fast paths", keeps the
# table). A fast path added later gets its variant here.
VARIANTS: dict[str, list[tuple[str, str]]] = {}


def build(name: str, replacements: list[tuple[str, str]]) -> types.ModuleType:
    """The runner with ``replacements`` made to its source, as a fresh module."""
    base = sluicegate._runner
    source = inspect.getsource(base)
    for old, new in replacements:
        if old not in source:
            raise SystemExit(f"variant {name!r}: {old.strip()[:60]!r}... is not in _runner.py")
        source = source.replace(old, new)
    module = types.ModuleType(f"sluicegate._runner_without_{name.replace(' ', '_')}")
    module.__package__ = "sluicegate"
    module.__file__ = base.__file__
    sys.modules[module.__name__] = module
    exec(compile(source, f"<_runner.py without {name}>", "exec"), module.__dict__)
    return module


Case = Callable[[int], Awaitable[None]]


def cases(runner: Any, run: Callable[[int], Awaitable[int]]) -> dict[str, Case]:
    """The fronts each variant is measured on: an int window and a Window object."""

    async def run_stream(n: int, window: Any = WINDOW) -> None:
        assert len(await runner.run_stream(agen(n), run, window=window)) == n

    async def open_stream(n: int, window: Any = WINDOW) -> None:
        count = 0
        async with runner.open_stream(agen(n), run, window=window) as results:
            async for _ in results:
                count += 1
        assert count == n

    async def run_stream_window(n: int) -> None:
        await run_stream(n, sluicegate.Window(WINDOW))

    async def open_stream_window(n: int) -> None:
        await open_stream(n, sluicegate.Window(WINDOW))

    return {
        "run_stream": run_stream,
        "open_stream(ordered=True)": open_stream,
        "run_stream, Window(64)": run_stream_window,
        "open_stream, Window(64)": open_stream_window,
    }


def measure(
    label: str, run: Callable[[int], Awaitable[int]], n: int, repeats: int, runners: dict[str, Any]
) -> None:
    todo = {
        (front, variant): case
        for variant, runner in runners.items()
        for front, case in cases(runner, run).items()
    }
    for case in todo.values():
        time_case(case, min(n, 500))  # warm-up
    wall: dict[tuple[str, str], list[float]] = {key: [] for key in todo}
    cpu: dict[tuple[str, str], list[float]] = {key: [] for key in todo}
    keys = list(todo)
    for rep in range(repeats):
        shift = rep % len(keys)
        for key in keys[shift:] + keys[:shift]:
            w, c = time_case(todo[key], n)
            wall[key].append(w)
            cpu[key].append(c)
    print(f"\n{label}, {n:,} items, median of {repeats}")
    print(f"  {'front':<28} {'runner':<34} {'cpu us':>8} {'items/s':>9} {'cost (cpu)':>10}")
    for front in cases(sluicegate, run):
        mine = statistics.median(cpu[front, "as it is"])
        for variant in runners:
            c = statistics.median(cpu[front, variant])
            rate = n / statistics.median(wall[front, variant])
            gain = "" if variant == "as it is" else f"{(c / mine - 1) * 100:+.1f}%"
            print(f"  {front:<28} {variant:<34} {c / n * 1e6:>8.2f} {rate:>9,.0f} {gain:>10}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--noop", action="store_true", help="no-op items too")
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke test")
    args = parser.parse_args(argv)
    runners: dict[str, Any] = {"as it is": sluicegate}
    for name, replacements in VARIANTS.items():
        runners[f"without {name}"] = build(name, replacements)
    if len(runners) == 1:
        print("no fast path to switch off: VARIANTS is empty")
    scale = 10 if args.quick else 1
    measure("1 ms items (await trio.sleep(0.001))", sleeping, 6_400 // scale, args.repeats, runners)
    measure("100-checkpoint items", saturated, 3_000 // scale, args.repeats, runners)
    if args.noop:
        measure("no-op items", noop, 50_000 // scale, args.repeats, runners)
    return 0


if __name__ == "__main__":
    sys.exit(main())
