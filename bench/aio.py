"""What the asyncio front costs: ``sluicegate.aio.run_stream`` against asyncio's own loops.

Every case runs in this one process, each repeat in a fresh ``asyncio.run``,
the cases taking turns repeat by repeat (as ``bench/run.py`` does), and each
row reports the median of the repeats. Rows and targets (issue 28):

* no-op items (each run: ``await asyncio.sleep(0)``), window 64, 50,000
  items: ``sluicegate.aio.run_stream`` costs at most 3.5x the CPU per item
  of asyncio's ``TaskGroup`` + ``Semaphore`` loop, and at least 2x less than
  ``aiometer.amap`` on asyncio;
* real work (each run: ``await asyncio.sleep(0.001)``): at most 2.5x the
  ``TaskGroup`` loop's CPU per item.

The rows without a target say what the rest costs: an asyncio async
generator as the source (each pull is a trip between the loops), ``open_stream``
(each result the consumer asks for is one), and the same stream on trio.

And a whole evaluation on asyncio (issue 28): ``sluicegate eval --loop asyncio
-c auto --retries 50`` of an environment whose 200 rollouts call a local
aiohttp server (tests/upstream_429.py) with aiohttp, an asyncio-only client;
the server serves C requests at once and answers 429 above. Target, for each
C: 200/200 rollouts ok, and the window settles (its last size) within 2x C.

    python bench/aio.py            # about a minute
    python bench/aio.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import io
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

import sluicegate
import sluicegate.aio

TESTS = Path(__file__).resolve().parent.parent / "tests"

WINDOW = 64
SLEEP = 0.001

Case = Callable[[int], Awaitable[None]]


async def noop(item: int) -> int:
    await asyncio.sleep(0)
    return item


async def sleeping(item: int) -> int:
    await asyncio.sleep(SLEEP)
    return item


async def agen(n: int) -> AsyncIterator[int]:
    """An asyncio async generator: each pull of it runs on asyncio."""
    for i in range(n):
        yield i


async def taskgroup(n: int, run: Callable[[int], Awaitable[Any]]) -> list[Any]:
    """The loop asyncio code starts with: a task per item, a Semaphore for the window.

    A place is taken before each item is taken, so it has sluicegate's
    back-pressure, and the results are kept in order, as ``run_stream`` keeps them.
    """
    limit = asyncio.Semaphore(WINDOW)
    results: list[Any] = []

    async def one(index: int, item: int) -> None:
        try:
            results[index] = await run(item)
        finally:
            limit.release()

    async with asyncio.TaskGroup() as group:
        for index, item in enumerate(range(n)):
            await limit.acquire()
            results.append(None)
            group.create_task(one(index, item))
    return results


def make_cases(run: Callable[[int], Awaitable[Any]]) -> dict[str, Case]:
    async def c_taskgroup(n: int) -> None:
        assert len(await taskgroup(n, run)) == n

    async def c_aio(n: int) -> None:
        assert len(await sluicegate.aio.run_stream(range(n), run, window=WINDOW)) == n

    async def c_aio_agen(n: int) -> None:
        assert len(await sluicegate.aio.run_stream(agen(n), run, window=WINDOW)) == n

    async def c_aio_open(n: int) -> None:
        count = 0
        async with sluicegate.aio.open_stream(range(n), run, window=WINDOW) as results:
            async for _ in results:
                count += 1
        assert count == n

    async def c_aiometer(n: int) -> None:
        import aiometer

        count = 0
        async with aiometer.amap(run, range(n), max_at_once=WINDOW) as results:
            async for _ in results:
                count += 1
        assert count == n

    return {
        "TaskGroup + Semaphore": c_taskgroup,
        "aio.run_stream": c_aio,
        "aio.run_stream, asyncio async generator": c_aio_agen,
        "aio.open_stream(ordered=True)": c_aio_open,
        "aiometer.amap on asyncio": c_aiometer,
    }


def on_trio(seconds: float) -> Case:
    """The same stream on trio (``sluicegate.run_stream``), for reference; run in ``trio.run``."""

    async def run(item: int) -> int:
        await trio.sleep(seconds)
        return item

    async def case(n: int) -> None:
        assert len(await sluicegate.run_stream(range(n), run, window=WINDOW)) == n

    return case


def time_case(name: str, case: Case, n: int) -> tuple[float, float]:
    """Wall-clock and CPU seconds of one run of ``case`` over ``n`` items, in a fresh loop."""

    async def main() -> tuple[float, float]:
        cpu = time.process_time()
        start = time.perf_counter()
        await case(n)
        return time.perf_counter() - start, time.process_time() - cpu

    gc.collect()
    if name.startswith("run_stream on trio"):
        return trio.run(main)
    return asyncio.run(main())


def measure(cases: dict[str, Case], n: int, repeats: int) -> dict[str, tuple[float, float]]:
    """The median wall and CPU seconds per item of each case, the cases taking turns."""
    names = list(cases)
    walls: dict[str, list[float]] = {name: [] for name in names}
    cpus: dict[str, list[float]] = {name: [] for name in names}
    for name in names:  # warm-up
        time_case(name, cases[name], min(n, 2000))
    for rep in range(repeats):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            wall, cpu = time_case(name, cases[name], n)
            walls[name].append(wall / n)
            cpus[name].append(cpu / n)
    return {name: (statistics.median(walls[name]), statistics.median(cpus[name])) for name in names}


def table(title: str, rows: dict[str, tuple[float, float]], targets: dict[str, str]) -> None:
    base_wall, base_cpu = rows["TaskGroup + Semaphore"]
    aiometer = rows.get("aiometer.amap on asyncio")
    print(f"\n{title}")
    header = (
        f"  {'case':<42} {'us/item':>8} {'cpu us':>7} {'cpu vs TG':>9} {'wall vs TG':>10}"
        f" {'aiometer/this':>13}  target"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for name, (wall, cpu) in rows.items():
        versus = f"{aiometer[1] / cpu:.2f}x" if aiometer is not None else "-"
        print(
            f"  {name:<42} {wall * 1e6:>8.2f} {cpu * 1e6:>7.2f} {cpu / base_cpu:>8.2f}x"
            f" {wall / base_wall:>9.2f}x {versus:>13}  {targets.get(name, '')}"
        )


def overloaded_eval(capacity: int) -> tuple[int, int, int, int, float]:
    """One ``sluicegate eval --loop asyncio -c auto`` against a server of ``capacity``.

    Returns:
        The rollouts ok, the window's last and largest sizes, the 429s the
        server answered, and the seconds it took.
    """
    sys.path.insert(0, str(TESTS))
    from sluicegate.cli import main as command
    from upstream_429 import running_overloaded

    with (
        tempfile.TemporaryDirectory() as scratch,
        running_overloaded(capacity, latency=0.05) as (url, upstream),
    ):
        out = Path(scratch) / "out"
        os.environ["EVAL_UPSTREAM"] = url
        start = time.perf_counter()
        with contextlib.redirect_stderr(io.StringIO()):
            command([
                "eval", f"{TESTS / 'eval_envs' / 'overloaded.py'}:env", "--loop", "asyncio",
                "-c", "auto", "--retries", "50", "-o", str(out), "--display", "none",
            ])  # fmt: skip
        seconds = time.perf_counter() - start
        rows = (out / "results.jsonl").read_text().splitlines()
        ok = sum(json.loads(row)["status"] == "ok" for row in rows)
        sizes = [8] + [
            change["size"] for change in json.loads((out / "run.json").read_text())["window"]
        ]
        return ok, sizes[-1], max(sizes), upstream.refused, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per case (>= 1)")
    args = parser.parse_args(argv)
    n_noop, n_sleep = (2_000, 640) if args.quick else (50_000, 6_400)
    repeats = max(1, args.repeats)
    load = os.getloadavg()
    print(
        f"sluicegate {sluicegate.__version__} asyncio front: Python "
        f"{sys.version.split()[0]}, trio {trio.__version__}, {os.cpu_count()} CPUs, "
        f"load {load[0]:.2f}{', QUICK' if args.quick else ''}; window {WINDOW}, "
        f"median of {repeats}; cpu us: CPU time per item, steadier under load"
    )
    missed: list[str] = []

    noop_cases = {**make_cases(noop), "run_stream on trio (reference)": on_trio(0)}
    rows = measure(noop_cases, n_noop, repeats)
    base, ours, peer = (
        rows["TaskGroup + Semaphore"][1],
        rows["aio.run_stream"][1],
        rows["aiometer.amap on asyncio"][1],
    )
    if ours > 3.5 * base:
        missed.append("no-op: aio.run_stream <= 3.5x TaskGroup")
    if peer < 2 * ours:
        missed.append("no-op: aiometer >= 2x aio.run_stream")
    table(
        f"no-op items (each run: await asyncio.sleep(0)), {n_noop:,} items",
        rows,
        {"aio.run_stream": "cpu <= 3.5x TG, aiometer/this >= 2x"},
    )

    sleep_cases = {
        name: case
        for name, case in make_cases(sleeping).items()
        if name in ("TaskGroup + Semaphore", "aio.run_stream", "aiometer.amap on asyncio")
    }
    sleep_cases["run_stream on trio (reference)"] = on_trio(SLEEP)
    rows = measure(sleep_cases, n_sleep, repeats)
    if rows["aio.run_stream"][1] > 2.5 * rows["TaskGroup + Semaphore"][1]:
        missed.append("real work: aio.run_stream <= 2.5x TaskGroup")
    table(
        f"real work (each run: await asyncio.sleep({SLEEP})), {n_sleep:,} items",
        rows,
        {"aio.run_stream": "cpu <= 2.5x TG"},
    )

    print(
        "\nsluicegate eval --loop asyncio -c auto --retries 50: 200 rollouts, each a GET through"
        " aiohttp\nto a local aiohttp server of capacity C (429 above it), 50 ms a request"
    )
    header = f"  {'C':>4} {'ok':>7} {'settled':>8} {'x C':>5} {'largest':>8} {'429s':>6} {'s':>6}"
    print(header + "  target")
    print("  " + "-" * (len(header) + 6))
    for capacity in (4, 16) if args.quick else (4, 16, 64):
        ok, settled, largest, refused, seconds = overloaded_eval(capacity)
        if ok < 200 or settled > 2 * capacity:
            missed.append(f"eval -c auto, C={capacity}: 200/200 and settled <= 2x C")
        print(
            f"  {capacity:>4} {ok:>3}/200 {settled:>8} {settled / capacity:>5.2f} {largest:>8}"
            f" {refused:>6} {seconds:>6.1f}  200/200, settled <= 2x C"
        )
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
    print("MISSED: " + ", ".join(missed) if missed else "all targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
