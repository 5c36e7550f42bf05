"""Services benchmark: serve() against the hand-rolled trio loop, and retry loops.

Run it with ``python bench/service.py`` (``--quick`` for a smoke-sized run).
Every case runs in this one process and the cases take turns repeat by
repeat, so a burst of load from elsewhere on the machine hits them alike;
each row reports the median of the repeats and its ratio to the baseline of
the same run.

Rows and targets (issue 11):

* no-op items from a trio memory channel filled beforehand (how a service
  gets its work), window 64. ``serve()`` without a journal must do >= 2x the
  hand-rolled baseline, and with a journal >= 1.5x (a journaled service still
  beats the loop that journals nothing). Without ``on_outcome`` nobody waits
  for a commit (rows are committed behind the service, up to a backlog);
  the ``on_outcome`` rows wait for each item's commit, as a service that
  acknowledges upstream does. The ``synchronous="full"`` rows show what
  surviving a power loss costs.
* real work: the same with a 1 ms sleep per item (the hand-rolled loop and
  ``serve()`` with a journal, with and without ``on_outcome``), what the
  journal's design was chosen on (docs/service.md).
* memory: ``serve()`` with a journal and ``on_outcome`` over 300,000 items
  (``--quick``: 10,000), in a fresh process; the peak RSS growth must stay
  under 16 MiB, since nothing per item outlives the item.
* retries: the cost of one successful call through ``attempt()`` (the loop
  ``serve()`` and ``eval`` use), ``stamina`` and ``tenacity``, against the
  bare call. The retry path itself is not timed: it sleeps.

The exit status is 0 unless ``--check`` is given and a target is missed.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

import sluicegate

# The baseline, the no-op run and the measuring loop are bench/run.py's, so
# both benchmarks judge against the same loop (bench/ is not a package; run
# as a script, this file's folder is on sys.path).
from run import WINDOW, Case, agen, baseline, check, measure, noop, print_table
from sluicegate import Retry
from sluicegate._retry import attempt
from sluicegate.service import Journal


def filled_channel(n: int) -> trio.MemoryReceiveChannel[int]:
    send, receive = trio.open_memory_channel[int](n)
    for i in range(n):
        send.send_nowait(i)
    send.close()
    return receive


class Journals:
    """A fresh journal file per call, in one scratch directory."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="sluicegate-bench-")
        self._count = 0

    def next(self, synchronous: str = "normal") -> Journal:
        self._count += 1
        return Journal(Path(self._dir.name) / f"j{self._count}.db", synchronous=synchronous)  # type: ignore[arg-type]

    def cleanup(self) -> None:
        self._dir.cleanup()


def make_cases(journals: Journals) -> dict[str, Case]:
    async def c_baseline(n: int) -> None:
        assert len(await baseline(agen(n), noop, WINDOW)) == n

    async def c_baseline_channel(n: int) -> None:
        assert len(await baseline(filled_channel(n), noop, WINDOW)) == n

    async def c_run_stream(n: int) -> None:
        assert len(await sluicegate.run_stream(filled_channel(n), noop, window=WINDOW)) == n

    async def c_open_stream(n: int) -> None:
        count = 0
        async with sluicegate.open_stream(
            filled_channel(n), noop, window=WINDOW, ordered=False
        ) as results:
            async for _ in results:
                count += 1
        assert count == n

    async def acknowledge(served: Any) -> None:
        pass

    async def one_ms(item: object) -> None:
        # Real work per item: what the journal's design is judged on.
        await trio.sleep(0.001)

    async def c_baseline_1ms(n: int) -> None:
        assert len(await baseline(filled_channel(n), one_ms, WINDOW)) == n

    def c_serve(**kwargs: Any) -> Case:
        async def case(n: int) -> None:
            extra = dict(kwargs)
            if "journal" in extra:
                extra["journal"] = journals.next(extra["journal"])
            if extra.pop("acknowledge", False):
                extra["on_outcome"] = acknowledge
            run = one_ms if extra.pop("one_ms", False) else noop
            report = await sluicegate.service.serve(
                filled_channel(n), run, window=WINDOW, signals=(), **extra
            )
            assert report.ok == n, report

        return case

    return {
        "baseline (nursery + CapacityLimiter)": c_baseline,
        "baseline, memory channel": c_baseline_channel,
        "run_stream, memory channel": c_run_stream,
        "open_stream(ordered=False), channel": c_open_stream,
        "serve(), no journal": c_serve(),
        "serve(), key=str, no journal": c_serve(key=str),
        "serve(), journal": c_serve(key=str, journal="normal"),
        "serve(), journal, on_outcome": c_serve(key=str, journal="normal", acknowledge=True),
        'serve(), journal "full"': c_serve(key=str, journal="full"),
        'serve(), journal "full", on_outcome': c_serve(key=str, journal="full", acknowledge=True),
        "baseline, channel, 1 ms runs": c_baseline_1ms,
        "serve(), journal, 1 ms runs": c_serve(key=str, journal="normal", one_ms=True),
        "serve(), journal, on_outcome, 1 ms runs": c_serve(
            key=str, journal="normal", acknowledge=True, one_ms=True
        ),
    }


# -- memory -------------------------------------------------------------------------


RSS_LIMIT_MIB = 16.0


def memory_child(n: int) -> None:
    """Body of the memory subprocess: print the peak RSS growth as one JSON line."""
    journals = Journals()
    acknowledged = 0

    async def acknowledge(served: Any) -> None:
        nonlocal acknowledged
        acknowledged += 1

    async def case(items: int) -> None:
        await sluicegate.service.serve(
            agen(items), noop, window=WINDOW, key=str, journal=journals.next(),
            on_outcome=acknowledge, signals=(),
        )  # fmt: skip

    try:
        trio.run(case, 2000)  # imports, SQLite's page cache, trio's start-up
        gc.collect()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        trio.run(case, n)
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    finally:
        journals.cleanup()
    print(json.dumps({"before": before, "after": after, "seconds": seconds, "acks": acknowledged}))


def run_memory_case(n: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--memory-child", str(n)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"memory case failed:\n{proc.stderr.strip()}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


# -- retries ------------------------------------------------------------------------


async def succeed() -> int:
    return 1


def retry_cases() -> dict[str, Case]:
    import stamina
    import tenacity

    policy = Retry(attempts=3, on=(ConnectionError,))

    async def c_bare(n: int) -> None:
        for _ in range(n):
            await succeed()

    async def c_attempt(n: int) -> None:
        for _ in range(n):
            tried = await attempt(succeed, retry=policy)
            tried.result.unwrap()

    stamina_call = stamina.retry(on=ConnectionError, attempts=3)(succeed)

    async def c_stamina(n: int) -> None:
        for _ in range(n):
            await stamina_call()

    tenacity_call = tenacity.retry(
        retry=tenacity.retry_if_exception_type(ConnectionError),
        stop=tenacity.stop_after_attempt(3),
        wait=tenacity.wait_random_exponential(multiplier=0.1, max=5.0),
        sleep=trio.sleep,
    )(succeed)

    async def c_tenacity(n: int) -> None:
        for _ in range(n):
            await tenacity_call()

    return {
        "bare call (no retry)": c_bare,
        "attempt() (sluicegate)": c_attempt,
        "stamina.retry": c_stamina,
        "tenacity.retry": c_tenacity,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per case (>= 3)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--no-retry", action="store_true", help="skip the retry rows")
    parser.add_argument("--no-memory", action="store_true", help="skip the RSS case")
    parser.add_argument("--memory-child", type=int, metavar="N", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        memory_child(args.memory_child)
        return 0
    n, n_retry, repeats = (3_000, 3_000, 3) if args.quick else (50_000, 100_000, 5)
    n_memory = 10_000 if args.quick else 300_000
    if args.repeats is not None:
        repeats = max(3, args.repeats)
    load = os.getloadavg()
    print(
        f"sluicegate {sluicegate.__version__} services bench: "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
        f"Python {platform.python_version()}, trio {trio.__version__}, "
        f"{os.cpu_count()} CPUs, load {load[0]:.2f}"
        f"{', QUICK (sizes too small for the targets to mean much)' if args.quick else ''}"
    )
    print(f"window {WINDOW}, median of {repeats} repeats; cpu us: CPU time per item")
    journals = Journals()
    try:
        rows = measure(make_cases(journals), n, repeats)
    finally:
        journals.cleanup()
    base = rows["baseline (nursery + CapacityLimiter)"]
    check(rows["serve(), no journal"], base, 2.0, "baseline")
    check(rows["serve(), journal"], base, 1.5, "baseline")
    print_table(
        f"no-op items from a filled memory channel (baseline: async generator), {n:,} items",
        rows.values(),
        base,
    )
    missed = [row.name for row in rows.values() if row.ok is False]
    if not args.no_retry:
        rrows = measure(retry_cases(), n_retry, repeats)
        bare = rrows["bare call (no retry)"]
        print_table(
            f"one successful call through each retry loop, {n_retry:,} calls"
            " (vs base: against the bare call)",
            rrows.values(),
            bare,
        )
        print("  added cost per successful call:")
        for name, row in rrows.items():
            if row is not bare:
                print(f"    {name:<28} {row.cpu_us - bare.cpu_us:6.2f} us (cpu)")
    if not args.no_memory:
        out = run_memory_case(n_memory)
        growth = (out["after"] - out["before"]) / 1024
        ok = growth < RSS_LIMIT_MIB and out["acks"] == n_memory + 2000
        if not ok:
            missed.append("memory")
        print(
            f"\npeak RSS growth, serve() with a journal and on_outcome, {n_memory:,} items,"
            f" fresh process: {growth:.2f} MiB (target < {RSS_LIMIT_MIB:g} MiB)"
            f" {'PASS' if ok else 'MISS'}; {n_memory / out['seconds'] / 1000:.1f}k items/s"
        )
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.2f}")
    print("MISSED: " + ", ".join(missed) if missed else "all targets met")
    return 1 if (missed and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
