"""Services benchmark: serve() against the hand-rolled trio loop, and retry loops.

Run it with ``python bench/service.py`` (``--quick`` for a smoke-sized run).
Every case runs in this one process and the cases take turns repeat by
repeat, so a burst of load from elsewhere on the machine hits them alike;
each row reports the median of the repeats and its ratio to the baseline of
the same run.

Rows and targets (issues 11 and 27; docs/performance.md, "Services"):

* no-op items from a trio memory channel filled beforehand (how a service
  gets its work), window 64. ``serve()`` without a journal must do >= 2x the
  hand-rolled baseline, and with a journal >= 1.2x: the items waiting in the
  channel have their keys looked up together, a query for up to 64 of them.
  The async generator row takes the same steps with nothing waiting, so
  each key is a query of its own (an SQLite read transaction, about 3 us):
  it has no target (docs/performance.md, "Services", says why). Without
  ``on_outcome`` nobody waits for a commit; the ``on_outcome`` rows wait for
  each item's commit, as a service that acknowledges upstream does. The
  ``synchronous="full"`` rows show what surviving a power loss costs.
* real work: the same with a 1 ms sleep per item, and with 100 checkpoints
  per item. At window 64 the 1 ms items keep the CPU busy (about 50,000
  items a second), so what the journal costs per item shows in full: SQLite's
  own work on a row and its look-up, with no target. At window 8 the same
  items leave the CPU mostly idle, as a service waiting on its upstream
  does: there ``serve()`` with a journal must take at most 3% longer than
  without one.
* restart: ``on_outcome`` of items the journal already holds, each taking
  1 ms: they run a window at a time, beside the items that run.
* memory: ``serve()`` with a journal and ``on_outcome`` over 300,000 items
  (``--quick``: 10,000), in a fresh process; the peak RSS growth must stay
  under 16 MiB, since nothing per item outlives the item.
* trim: ``Journal.trim`` of a large journal (``--trim-rows``, 1,000,000 by
  default) while a service writes to it, against one ``DELETE`` of the same
  rows: the longest the service waited between two acknowledgements, and
  the largest WAL.
* retries: the cost of one successful call through ``attempt()`` (the loop
  ``serve()`` and ``eval`` use), ``stamina`` and ``tenacity`` (the ``bench``
  extra; a peer that is not installed is left out, with a note), against
  the bare call. The retry path itself is not timed: it sleeps.

The exit status is 0 unless ``--check`` is given and a target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import importlib
import json
import os
import platform
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

import sluicegate

# The baseline, the no-op run and the measuring loop are bench/run.py's, so
# both benchmarks judge against the same loop (bench/ is not a package; run
# as a script, this file's folder is on sys.path).
from run import (
    WINDOW,
    Case,
    agen,
    baseline,
    check,
    measure,
    noop,
    print_table,
    saturated,
    sleeping,
)
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


BASE = "baseline (nursery + CapacityLimiter)"
# A window that 1 ms items cannot keep the CPU busy at: a service waiting on
# its upstream, where the journal's cost must hide in the waiting.
IO_WINDOW = 8


def make_cases(
    journals: Journals,
    run: Callable[[int], Awaitable[Any]],
    *,
    peers: bool,
    window: int = WINDOW,
) -> dict[str, Case]:
    """The throughput cases for one kind of run; ``peers`` adds the runner's own rows."""

    async def c_baseline(n: int) -> None:
        assert len(await baseline(agen(n), run, window)) == n

    async def c_baseline_channel(n: int) -> None:
        assert len(await baseline(filled_channel(n), run, WINDOW)) == n

    async def c_run_stream(n: int) -> None:
        assert len(await sluicegate.run_stream(filled_channel(n), run, window=WINDOW)) == n

    async def c_open_stream(n: int) -> None:
        count = 0
        async with sluicegate.open_stream(
            filled_channel(n), run, window=WINDOW, ordered=False
        ) as results:
            async for _ in results:
                count += 1
        assert count == n

    async def acknowledge(served: Any) -> None:
        pass

    def c_serve(*, source: Callable[[int], Any] = filled_channel, **kwargs: Any) -> Case:
        async def case(n: int) -> None:
            extra = dict(kwargs)
            if "journal" in extra:
                extra["journal"] = journals.next(extra["journal"])
            if extra.pop("acknowledge", False):
                extra["on_outcome"] = acknowledge
            report = await sluicegate.service.serve(
                source(n), run, window=window, signals=(), **extra
            )
            assert report.ok == n, report

        return case

    cases: dict[str, Case] = {BASE: c_baseline}
    if peers:
        cases |= {
            "baseline, memory channel": c_baseline_channel,
            "run_stream, memory channel": c_run_stream,
            "open_stream(ordered=False), channel": c_open_stream,
        }
    cases |= {
        "serve(), no journal": c_serve(),
        "serve(), journal": c_serve(key=str, journal="normal"),
        "serve(), journal, on_outcome": c_serve(key=str, journal="normal", acknowledge=True),
    }
    if peers:
        cases |= {
            "serve(), key=str, no journal": c_serve(key=str),
            "serve(), journal, async generator": c_serve(source=agen, key=str, journal="normal"),
            'serve(), journal "full"': c_serve(key=str, journal="full"),
            'serve(), journal "full", on_outcome': c_serve(
                key=str, journal="full", acknowledge=True
            ),
        }
    return cases


# -- restart ------------------------------------------------------------------------


async def restart_case(n: int, journals: Journals) -> tuple[float, int]:
    """Seconds ``serve()`` takes over ``n`` recorded items whose ``on_outcome`` takes 1 ms.

    Returns the seconds and the most acknowledgements seen running at once.
    """
    journal = journals.next()
    await sluicegate.service.serve(range(n), noop, window=WINDOW, key=str, journal=journal,
                                   signals=())  # fmt: skip
    alive = most = 0

    async def acknowledge(served: Any) -> None:
        nonlocal alive, most
        alive += 1
        most = max(most, alive)
        await trio.sleep(0.001)
        alive -= 1

    start = time.perf_counter()
    report = await sluicegate.service.serve(
        range(n), noop, window=WINDOW, key=str, journal=journal, on_outcome=acknowledge,
        signals=(),
    )  # fmt: skip
    assert report.skipped == n, report
    return time.perf_counter() - start, most


# -- trim ---------------------------------------------------------------------------


def old_rows(path: Path, rows: int) -> None:
    """A journal at ``path`` holding ``rows`` successes that finished long ago."""
    trio.run(lambda: sluicegate.service.serve([], noop, window=1, key=str, journal=path,
                                              signals=()))  # fmt: skip
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            " INSERT INTO items (key, status, attempts, value, value_format, started, finished)"
            " SELECT printf('order-%09d', i), 'ok', 1, 'null', 'json', 1000.0, 1000.5 FROM n",
            (rows,),
        )


def one_delete(path: Path) -> None:
    """The trim before issue 27: every old row in one transaction."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None, timeout=30)) as db:
        db.execute("BEGIN IMMEDIATE")
        db.execute("DELETE FROM items WHERE finished < ? AND status = 'ok'", (2000.0,))
        db.execute("COMMIT")


def journal_trim(path: Path) -> None:
    Journal(path).trim(datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC))


def no_trim(path: Path) -> None:
    """What the service waits for on its own (its checkpoints), over as long."""
    time.sleep(5.0)


def trim_case(path: Path, trim: Callable[[Path], None]) -> dict[str, float]:
    """``trim(path)`` in a thread while a service writes to the journal, each item acknowledged.

    Returns the seconds the trim took, the longest gap between two
    acknowledgements while it ran, and the largest WAL seen.
    """
    wal = f"{path}-wal"
    found = {"seconds": 0.0, "longest_wait_s": 0.0, "wal_bytes": 0.0}

    def wal_size() -> float:
        with contextlib.suppress(FileNotFoundError):
            return float(os.stat(wal).st_size)
        return 0.0

    async def main() -> None:
        stop = trio.Event()
        trimming = False
        last = trio.current_time()

        async def acknowledge(served: Any) -> None:
            nonlocal last
            now = trio.current_time()
            if trimming:
                found["longest_wait_s"] = max(found["longest_wait_s"], now - last)
                found["wal_bytes"] = max(found["wal_bytes"], wal_size())
            last = now

        async def feed() -> AsyncIterator[int]:
            n = 0
            while not stop.is_set():
                yield n
                n += 1

        async def trimmer() -> None:
            nonlocal trimming, last
            await trio.sleep(0.5)  # the service is under way
            trimming = True
            last = trio.current_time()
            start = time.perf_counter()

            def run_trim() -> None:
                trim(path)
                found["wal_bytes"] = max(found["wal_bytes"], wal_size())

            await trio.to_thread.run_sync(run_trim)
            found["seconds"] = time.perf_counter() - start
            trimming = False
            stop.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trimmer)
            nursery.start_soon(
                lambda: sluicegate.service.serve(
                    feed(), sleeping, window=8, key=lambda n: f"new-{n}", journal=path,
                    on_outcome=acknowledge, signals=(),
                )
            )  # fmt: skip

    trio.run(main)
    return found


def run_trim_cases(rows: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="sluicegate-bench-trim-"))
    try:
        made = folder / "made.db"
        start = time.perf_counter()
        old_rows(made, rows)
        size = os.path.getsize(made)
        print(
            f"\ntrim: {rows:,} old rows ({size / 2**20:.0f} MB, made in"
            f" {time.perf_counter() - start:.1f} s), trimmed while a service acknowledges"
            " items of 1 ms, window 8"
        )
        print(f"  {'trim':<16} {'seconds':>8} {'longest wait':>13} {'largest WAL':>12}")
        for label, trim in (
            ("one DELETE", one_delete),
            ("Journal.trim", journal_trim),
            ("none, 5 s", no_trim),
        ):
            path = folder / f"{label.split()[0].strip(',').lower()}.db"
            shutil.copyfile(made, path)
            found = trim_case(path, trim)
            print(
                f"  {label:<16} {found['seconds']:8.2f} {found['longest_wait_s']:11.3f} s"
                f" {found['wal_bytes'] / 2**20:9.1f} MB"
            )
    finally:
        shutil.rmtree(folder)


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


def installed(name: str) -> Any:
    """The module ``name``, or None when it is not installed."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        return None


def retry_cases() -> tuple[dict[str, Case], list[str]]:
    """The retry loops installed here, and the peers that are not (the ``bench`` extra's)."""
    policy = Retry(attempts=3, on=(ConnectionError,))

    async def c_bare(n: int) -> None:
        for _ in range(n):
            await succeed()

    async def c_attempt(n: int) -> None:
        for _ in range(n):
            tried = await attempt(succeed, retry=policy)
            tried.result.unwrap()

    cases: dict[str, Case] = {"bare call (no retry)": c_bare, "attempt() (sluicegate)": c_attempt}
    absent: list[str] = []
    stamina = installed("stamina")
    if stamina is None:
        absent.append("stamina")
    else:
        stamina_call = stamina.retry(on=ConnectionError, attempts=3)(succeed)

        async def c_stamina(n: int) -> None:
            for _ in range(n):
                await stamina_call()

        cases["stamina.retry"] = c_stamina
    tenacity = installed("tenacity")
    if tenacity is None:
        absent.append("tenacity")
    else:
        tenacity_call = tenacity.retry(
            retry=tenacity.retry_if_exception_type(ConnectionError),
            stop=tenacity.stop_after_attempt(3),
            wait=tenacity.wait_random_exponential(multiplier=0.1, max=5.0),
            sleep=trio.sleep,
        )(succeed)

        async def c_tenacity(n: int) -> None:
            for _ in range(n):
                await tenacity_call()

        cases["tenacity.retry"] = c_tenacity
    return cases, absent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per case (>= 3)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--no-serve", action="store_true", help="skip the serve() rows")
    parser.add_argument("--no-retry", action="store_true", help="skip the retry rows")
    parser.add_argument("--no-memory", action="store_true", help="skip the RSS case")
    parser.add_argument("--no-trim", action="store_true", help="skip the trim case")
    parser.add_argument(
        "--trim-rows", type=int, default=None, help="rows of the trimmed journal (1,000,000)"
    )
    parser.add_argument("--memory-child", type=int, metavar="N", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        memory_child(args.memory_child)
        return 0
    if args.quick:
        n, n_sleep, n_sat, n_retry, n_restart, n_trim, repeats = (
            3_000, 2_000, 300, 3_000, 2_000, 50_000, 3,
        )  # fmt: skip
    else:
        n, n_sleep, n_sat, n_retry, n_restart, n_trim, repeats = (
            50_000, 20_000, 3_000, 100_000, 20_000, 1_000_000, 5,
        )  # fmt: skip
    n_memory = 10_000 if args.quick else 300_000
    n_io = 800 if args.quick else 4_000
    if args.repeats is not None:
        repeats = max(3, args.repeats)
    if args.trim_rows is not None:
        n_trim = max(1_000, args.trim_rows)
    load = os.getloadavg()
    print(
        f"sluicegate {sluicegate.__version__} services bench: "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
        f"Python {platform.python_version()}, trio {trio.__version__}, "
        f"SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs, load {load[0]:.2f}"
        f"{', QUICK (sizes too small for the targets to mean much)' if args.quick else ''}"
    )
    print(f"window {WINDOW}, median of {repeats} repeats; cpu us: CPU time per item")
    missed: list[str] = []
    if not args.no_serve:
        journals = Journals()
        try:
            rows = measure(make_cases(journals, noop, peers=True), n, repeats)
            base = rows[BASE]
            check(rows["serve(), no journal"], base, 2.0, "baseline")
            check(rows["serve(), journal"], base, 1.2, "baseline")
            print_table(
                f"no-op items from a filled memory channel (baseline: async generator), {n:,}"
                " items",
                rows.values(),
                base,
            )
            missed += [row.name for row in rows.values() if row.ok is False]
            srows = measure(make_cases(journals, sleeping, peers=False), n_sleep, repeats)
            print_table(f"1 ms items, {n_sleep:,} items", srows.values(), srows[BASE])
            wrows = measure(
                make_cases(journals, sleeping, peers=False, window=IO_WINDOW), n_io, repeats
            )
            check(wrows["serve(), journal"], wrows["serve(), no journal"], 0.97, "no journal")
            print_table(
                f"1 ms items at window {IO_WINDOW} (the CPU mostly idle), {n_io:,} items",
                wrows.values(),
                wrows[BASE],
            )
            missed += [f"{row.name}, 1 ms" for row in wrows.values() if row.ok is False]
            crows = measure(make_cases(journals, saturated, peers=False), n_sat, repeats)
            print_table(f"100-checkpoint items, {n_sat:,} items", crows.values(), crows[BASE])
            seconds, most = trio.run(restart_case, n_restart, journals)
            print(
                f"\nrestart: {n_restart:,} items the journal holds, on_outcome of 1 ms each:"
                f" {seconds:.2f} s ({most} acknowledgements at once at most; one at a time"
                f" would take at least {n_restart / 1000:.0f} s)"
            )
        finally:
            journals.cleanup()
    if not args.no_retry:
        peers, absent = retry_cases()
        rrows = measure(peers, n_retry, repeats)
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
        if absent:
            print(
                f"  not measured: {', '.join(absent)} (not installed; they come with the bench"
                " extra: pip install -e '.[bench]')"
            )
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
    if not args.no_trim:
        run_trim_cases(n_trim)
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.2f}")
    print("MISSED: " + ", ".join(missed) if missed else "all targets met")
    return 1 if (missed and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
