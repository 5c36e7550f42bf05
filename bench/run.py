"""Side-by-side throughput and memory benchmark for sluicegate's runner.

Run it with ``nox -s bench`` or ``python bench/run.py`` (``--quick`` for a
smoke-sized run). Every throughput case runs in this one process, the cases
take turns repeat by repeat so that a burst of load from elsewhere on the
machine hits them alike, and each row reports the median of the repeats. The
memory cases each run in a fresh subprocess so that one case's peak RSS cannot
hide another's.

Rows and targets (issue 2, section 5, issue 4 and issue 11):

* no-op items: each run is ``await trio.sleep(0)``, window 64. ``run_stream``
  must do >= 4.0x the hand-rolled trio baseline and >= 8x ``aiometer.amap``;
  ``open_stream(ordered=True)`` must do >= 2.5x the baseline; a trio memory
  channel as the source, directly or through a ``FeedTaskset``, >= 3.0x. The
  same with a ``Window(64)`` object instead of the int (no target: the goal
  is the int's speed).
* saturated items: each run does 100 checkpoints, so the work, not the
  dispatcher, dominates; the runner must be no slower than the baseline.
* real work: each run sleeps 1 ms, so a row's rate is bounded by 64 / 1 ms;
  what a change to the dispatcher does to real work shows here (a fast path
  stays only if it gains >= 5% on this row or the saturated one).
* memory: 1,000,000 items through ``open_stream`` with results discarded, and
  a 1,000,000-long follow-up chain through a ``SampleSource``; the peak RSS
  growth must stay under 16 MiB.

The exit status is 0 unless ``--check`` is given and a target is missed (the
numbers are noisy on a shared machine, so a miss alone is not an error).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import attrs
import trio

import sluicegate

WINDOW = 64
CHECKPOINTS = 100  # per item in the saturated case
SLEEP = 0.001  # seconds per item in the real-work case
RSS_LIMIT_MIB = 16.0

Case = Callable[[int], Awaitable[None]]


# -- what each run does --------------------------------------------------------


# The issue specifies trio.sleep(0): it is what user code writes, and costs the
# same scheduler round trip as trio.lowlevel.checkpoint().
async def noop(item: int) -> int:
    await trio.sleep(0)  # noqa: ASYNC115
    return item


async def saturated(item: int) -> int:
    for _ in range(CHECKPOINTS):
        await trio.sleep(0)  # noqa: ASYNC115
    return item


async def sleeping(item: int) -> int:
    await trio.sleep(SLEEP)
    return item


async def agen(n: int) -> AsyncIterator[int]:
    """The source for every runner case: a lazily pulled async generator."""
    for i in range(n):
        yield i


# -- the peers ------------------------------------------------------------------


async def baseline(
    source: AsyncIterator[int], run: Callable[[int], Awaitable[Any]], window: int
) -> list[Any]:
    """The naive trio runner: one task per item, a CapacityLimiter for the window.

    A place is taken before each pull (the end-of-stream pull included), so it
    has the same back-pressure as sluicegate, and results are kept in pull
    order like ``run_stream``.
    """
    limiter = trio.CapacityLimiter(window)
    results: list[Any] = []

    async def one(index: int, item: int, token: object) -> None:
        try:
            results[index] = await run(item)
        finally:
            limiter.release_on_behalf_of(token)

    async with trio.open_nursery() as nursery:
        index = 0
        while True:
            token = object()
            await limiter.acquire_on_behalf_of(token)
            try:
                item = await anext(source)
            except StopAsyncIteration:
                limiter.release_on_behalf_of(token)
                break
            results.append(None)
            nursery.start_soon(one, index, item, token)
            index += 1
    return results


def make_cases(run: Callable[[int], Awaitable[Any]]) -> dict[str, Case]:
    """The throughput cases for one kind of run, keyed by row name."""

    async def c_baseline(n: int) -> None:
        out = await baseline(agen(n), run, WINDOW)
        assert len(out) == n

    async def c_run_stream(n: int) -> None:
        out = await sluicegate.run_stream(agen(n), run, window=WINDOW)
        assert len(out) == n

    async def c_run_stream_drain(n: int) -> None:
        out = await sluicegate.run_stream(agen(n), run, window=WINDOW, drain=sluicegate.Drain())
        assert len(out) == n

    async def c_run_stream_channel(n: int) -> None:
        send, receive = trio.open_memory_channel[int](n)
        for i in range(n):
            send.send_nowait(i)
        send.close()
        out = await sluicegate.run_stream(receive, run, window=WINDOW)
        assert len(out) == n

    async def c_run_stream_feed(n: int) -> None:
        send, receive = trio.open_memory_channel[int](n)
        for i in range(n):
            send.send_nowait(i)
        send.close()
        out = await sluicegate.run_stream(
            sluicegate.FeedTaskset(receive).stream(), run, window=WINDOW
        )
        assert len(out) == n

    async def c_run_stream_sync(n: int) -> None:
        out = await sluicegate.run_stream(range(n), run, window=WINDOW)
        assert len(out) == n

    async def c_run_stream_window(n: int) -> None:
        out = await sluicegate.run_stream(agen(n), run, window=sluicegate.Window(WINDOW))
        assert len(out) == n

    def c_open_stream(ordered: bool, window_object: bool = False) -> Case:
        async def case(n: int) -> None:
            count = 0
            window = sluicegate.Window(WINDOW) if window_object else WINDOW
            async with sluicegate.open_stream(
                agen(n), run, window=window, ordered=ordered
            ) as results:
                async for _ in results:
                    count += 1
            assert count == n

        return case

    async def c_aiometer(n: int) -> None:
        import aiometer

        # amap takes a Sequence (it calls len() to size its result channel),
        # so it is the one peer that cannot consume the async generator.
        count = 0
        async with aiometer.amap(run, list(range(n)), max_at_once=WINDOW) as results:
            async for _ in results:
                count += 1
        assert count == n

    return {
        "baseline (nursery + CapacityLimiter)": c_baseline,
        "run_stream": c_run_stream,
        "run_stream, sync source (range)": c_run_stream_sync,
        "run_stream, drain=Drain()": c_run_stream_drain,
        "run_stream, memory channel source": c_run_stream_channel,
        "run_stream, FeedTaskset over a channel": c_run_stream_feed,
        "open_stream(ordered=True)": c_open_stream(True),
        "open_stream(ordered=False)": c_open_stream(False),
        "run_stream, window=Window(64)": c_run_stream_window,
        "open_stream(ordered=True), Window(64)": c_open_stream(True, window_object=True),
        "aiometer.amap": c_aiometer,
    }


# -- measuring ------------------------------------------------------------------


def time_case(case: Case, n: int) -> tuple[float, float]:
    """Wall-clock and CPU seconds one run of ``case`` over ``n`` items takes in trio.run.

    CPU time (this process only) is reported beside wall time because it is
    far less disturbed by other work on a shared machine.
    """

    async def main() -> tuple[float, float]:
        cpu = time.process_time()
        start = time.perf_counter()
        await case(n)
        return time.perf_counter() - start, time.process_time() - cpu

    gc.collect()
    return trio.run(main)


@attrs.define
class Row:
    name: str
    items: int
    times: list[float] = attrs.Factory(list)
    cpu: list[float] = attrs.Factory(list)
    target: str = ""
    ok: bool | None = None  # None: no target on this row
    cpu_ok: bool | None = None  # the same targets judged on CPU time

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def rate(self) -> float:
        return self.items / self.median

    @property
    def cpu_us(self) -> float:
        return statistics.median(self.cpu) / self.items * 1e6

    @property
    def cpu_rate(self) -> float:
        return self.items / statistics.median(self.cpu)

    @property
    def best_rate(self) -> float:
        return self.items / min(self.times)


def measure(cases: dict[str, Case], n: int, repeats: int) -> dict[str, Row]:
    """Median timings, the cases taking turns within each repeat."""
    rows = {name: Row(name, n) for name in cases}
    names = list(cases)
    for case in cases.values():  # warm-up: imports, code objects, allocator pools
        time_case(case, min(n, 2000))
    for rep in range(repeats):
        # Rotate the order so no case always runs right after the same one.
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            wall, cpu = time_case(cases[name], n)
            rows[name].times.append(wall)
            rows[name].cpu.append(cpu)
    return rows


def check(row: Row, peer: Row, goal: float, label: str) -> None:
    """Judge ``row`` against ``goal`` times ``peer``, on wall time and on CPU time.

    The verdict is the wall-clock one (what the targets are written in); the
    CPU-time one is printed beside it because on a busy machine wall time
    mostly measures the other processes.
    """
    mark = f">={goal:g}x {label}"
    row.target = f"{row.target}, {mark}" if row.target else mark
    ok = row.rate / peer.rate >= goal
    cpu_ok = row.cpu_rate / peer.cpu_rate >= goal
    row.ok = ok if row.ok is None else (row.ok and ok)
    row.cpu_ok = cpu_ok if row.cpu_ok is None else (row.cpu_ok and cpu_ok)


# -- memory cases, each in its own process ----------------------------------------


def _peak_kib() -> int:
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _current_kib() -> int:
    """Resident set size now (Linux), or 0 where /proc is missing.

    Printed beside the peaks: growth is measured peak to peak, so memory
    freed after start-up could hide up to (peak before - RSS at start).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


async def _mem_open_stream(n: int) -> int:
    count = 0
    async with sluicegate.open_stream(agen(n), noop, window=WINDOW) as results:
        async for _ in results:
            count += 1
    return count


def _chain_source(n: int) -> Any:
    """A SampleSource whose item i's completion adds item i + 1, up to n items."""

    async def follow_up(item: int, result: object) -> list[int] | None:
        return [item + 1] if item + 1 < n else None

    return sluicegate.SampleSource.from_items([0], on_complete=follow_up)


async def _mem_chain(n: int) -> int:
    count = 0
    async with sluicegate.open_stream(_chain_source(n), noop, window=WINDOW) as results:
        async for _ in results:
            count += 1
    return count


MEMORY_CASES: dict[str, Callable[[int], Awaitable[int]]] = {
    "open_stream": _mem_open_stream,
    "chain": _mem_chain,
}


def memory_child(kind: str, n: int) -> None:
    """Body of a memory subprocess: print peak RSS growth as one JSON line."""
    case = MEMORY_CASES[kind]
    # Warm up first so that imports and trio's own start-up are in the
    # baseline peak, not counted as growth.
    trio.run(case, 1000)
    gc.collect()
    before = _peak_kib()
    current = _current_kib()
    start = time.perf_counter()
    count = trio.run(case, n)
    seconds = time.perf_counter() - start
    after = _peak_kib()
    print(
        json.dumps(
            {
                "count": count,
                "seconds": seconds,
                "before": before,
                "after": after,
                "current": current,
            }
        )
    )


def run_memory_case(kind: str, n: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--memory-child", kind, str(n)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"memory case {kind} failed:\n{proc.stderr.strip()}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def sample_source_status() -> str | None:
    """None when SampleSource.from_items runs a short chain correctly, else why not."""
    if not hasattr(sluicegate.SampleSource, "from_items"):
        return "sluicegate.SampleSource.from_items is not implemented yet"
    try:
        count = trio.run(_mem_chain, 10)
    except Exception as exc:
        return f"a 10-item SampleSource chain failed: {exc!r}"
    if count != 10:
        return f"a 10-item SampleSource chain ran {count} items"
    return None


# -- reporting ------------------------------------------------------------------


def fmt_rate(rate: float) -> str:
    return f"{rate / 1000:,.1f}k"


def print_table(title: str, rows: Iterable[Row], base: Row, aio: Row | None = None) -> None:
    print(f"\n{title}")
    header = (
        f"  {'case':<38} {'items/s':>9} {'best/s':>9} {'us/item':>8} {'cpu us':>7} {'vs base':>8}"
        f" {'vs aiom.':>8} {'cpu vs b':>8}  {'target':<27} result"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for row in rows:
        vs_aio = f"{row.rate / aio.rate:.2f}x" if aio is not None else "-"
        result = ""
        if row.ok is not None:
            result = "PASS" if row.ok else "MISS"
            result += f" (cpu {'PASS' if row.cpu_ok else 'MISS'})"
        print(
            f"  {row.name:<38} {fmt_rate(row.rate):>9} {fmt_rate(row.best_rate):>9}"
            f" {1e6 / row.rate:>8.2f} {row.cpu_us:>7.2f} {row.rate / base.rate:>7.2f}x {vs_aio:>8}"
            f" {row.cpu_rate / base.cpu_rate:>7.2f}x  {row.target:<27} {result}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per case (>= 3)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--no-memory", action="store_true", help="skip the RSS cases")
    parser.add_argument(
        "--items", type=int, default=None, help="no-op items per case (default 100,000)"
    )
    parser.add_argument("--memory-child", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.memory_child:
        memory_child(args.memory_child[0], int(args.memory_child[1]))
        return 0

    if args.quick:
        n_noop, n_sat, n_sleep, n_mem, repeats = 3_000, 320, 640, 10_000, 3
    else:
        n_noop, n_sat, n_sleep, n_mem, repeats = 100_000, 3_000, 6_400, 1_000_000, 3
    if args.items is not None:
        n_noop = max(1_000, args.items)
    if args.repeats is not None:
        repeats = max(3, args.repeats)

    load = os.getloadavg()
    print(
        f"sluicegate {sluicegate.__version__} bench: "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
        f"Python {platform.python_version()}, trio {trio.__version__}, "
        f"{os.cpu_count()} CPUs, load {load[0]:.2f}"
        f"{', QUICK (sizes too small for the targets to mean much)' if args.quick else ''}"
    )
    print(
        f"window {WINDOW}, median of {repeats} repeats (best/s: the fastest repeat);"
        " items/s higher is better; cpu us: CPU time per item, steadier under load"
    )

    missed: list[str] = []

    # No-op items: the dispatcher's own cost per item.
    rows = measure(make_cases(noop), n_noop, repeats)
    base = rows["baseline (nursery + CapacityLimiter)"]
    aio = rows["aiometer.amap"]
    rs = rows["run_stream"]
    check(rs, base, 4.0, "baseline")
    check(rs, aio, 8.0, "aiometer")
    check(rows["open_stream(ordered=True)"], base, 2.5, "baseline")
    check(rows["run_stream, memory channel source"], base, 3.0, "baseline")
    check(rows["run_stream, FeedTaskset over a channel"], base, 3.0, "baseline")
    print_table(
        f"no-op items (each run: await trio.sleep(0)), {n_noop:,} items",
        rows.values(),
        base,
        aio,
    )
    missed += [r.name for r in rows.values() if r.ok is False]

    # Saturated items: the work dominates; the runner must not get in its way.
    sat_cases = make_cases(saturated)
    kept = (
        "baseline (nursery + CapacityLimiter)",
        "run_stream",
        "open_stream(ordered=True)",
        "run_stream, window=Window(64)",
        "open_stream(ordered=True), Window(64)",
    )
    sat_cases = {k: v for k, v in sat_cases.items() if k in kept}
    # Runner and baseline are within a few percent of each other here, so this
    # verdict needs more repeats than the no-op one to rise above the noise.
    srows = measure(sat_cases, n_sat, repeats + 2)
    sbase = srows["baseline (nursery + CapacityLimiter)"]
    for name in ("run_stream", "open_stream(ordered=True)"):
        check(srows[name], sbase, 1.0, "baseline")
    print_table(
        f"saturated items (each run: {CHECKPOINTS} checkpoints), {n_sat:,} items,"
        f" median of {repeats + 2}",
        srows.values(),
        sbase,
    )
    missed += [f"saturated {r.name}" for r in srows.values() if r.ok is False]

    # Real work: each run sleeps 1 ms; the dispatcher's cost is a sliver of it.
    real_cases = {k: v for k, v in make_cases(sleeping).items() if k in kept}
    rrows = measure(real_cases, n_sleep, repeats)
    rbase = rrows["baseline (nursery + CapacityLimiter)"]
    print_table(
        f"real work (each run: await trio.sleep({SLEEP})), {n_sleep:,} items,"
        f" at most {WINDOW / SLEEP / 1000:,.0f}k/s",
        rrows.values(),
        rbase,
    )

    if not args.no_memory:
        print(f"\npeak RSS growth, {n_mem:,} no-op items, window {WINDOW}, fresh process each")
        print(f"  {'case':<52} {'growth MiB':>10} {'items/s':>9}  {'target':<10} result")
        mem_cases = [
            ("open_stream, results discarded", "open_stream", None),
            ("SampleSource follow-up chain via open_stream", "chain", sample_source_status()),
        ]
        for label, kind, skip in mem_cases:
            if skip is not None:
                print(f"  {label:<52} {'-':>10} {'-':>9}  {'< 16 MiB':<10} SKIP ({skip})")
                continue
            out = run_memory_case(kind, n_mem)
            growth = (out["after"] - out["before"]) / 1024
            ok = growth < RSS_LIMIT_MIB and out["count"] == n_mem
            if not ok:
                missed.append(f"RSS {label}")
            print(
                f"  {label:<52} {growth:>10.2f} {fmt_rate(n_mem / out['seconds']):>9}"
                f"  {'< 16 MiB':<10} {'PASS' if ok else 'MISS'}"
                f"  (peak {out['before'] / 1024:.1f} -> {out['after'] / 1024:.1f} MiB,"
                f" RSS at start {out['current'] / 1024:.1f} MiB)"
            )

    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.2f} (other work on the machine skews the numbers)")
    if missed:
        print("MISSED: " + ", ".join(missed))
    else:
        print("all targets met")
    return 1 if (missed and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
