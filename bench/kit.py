"""Seeded bugs: do sluicegate.testing's own checks catch them, with no assertion of ours?

    python bench/kit.py [--examples 200] [--seeds 1 2 3] [--only NAME]

Ten bugs of the kinds users write into code that plugs into sluicegate, each
with a correct twin that differs only in the fix. Each is tested the way
docs/testing.md shows, in a short test that uses the kit's checks and no
assertion of its own; the script re-runs itself under ``python -O``, which
strips any ``assert`` anyway. For each seed a test runs up to ``--examples``
Hypothesis examples (no shrinking: the first failing example is the catch).

Printed: which bugs each seed caught (and the check that caught it), the
false alarms on the correct twins, and the median length of a test. The
targets: at least 7 of 10 caught on every seed, no false alarm, a median
test of at most 15 lines.
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Any

import trio
import trio.lowlevel
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from sluicegate import RateLimit, Taskset, Window, run_stream, serve
from sluicegate.testing import (
    Dependency,
    Upstream,
    check_once,
    check_rate,
    check_run,
    check_source,
    endings,
    flaky,
    items,
    scenario,
)

# -- the code under test: ten bugs, each with its correct twin -------------------------------
#
# `fixed` chooses the twin; nothing else differs between the two.


def reader(fixed: bool) -> Callable[[Upstream[Any]], AsyncIterator[Any]]:
    """1. A source that never closes its upstream when the consumer stops early."""

    async def read(upstream: Upstream[Any]) -> AsyncIterator[Any]:
        if not fixed:
            async for message in upstream:
                yield message
            await upstream.aclose()  # only reached when the upstream ran out
            return
        try:
            async for message in upstream:
                yield message
        finally:
            with trio.CancelScope(shield=True):
                await upstream.aclose()

    return read


class Prefetching:
    """2 and 5. A queue source that takes two messages at a time, and gives back on close."""

    def __init__(self, upstream: Upstream[Any], *, bug: str | None) -> None:
        self.upstream = upstream
        self.bug = bug
        self.buffer: list[Any] = []
        self.handed: list[Any] = []

    def __aiter__(self) -> Prefetching:
        return self

    async def __anext__(self) -> Any:
        if not self.buffer:
            for _ in range(2):
                try:
                    self.buffer.append(await self.upstream.get())
                except StopAsyncIteration:
                    break
            if not self.buffer:
                raise StopAsyncIteration
        message = self.buffer.pop(0)
        self.handed.append(message)
        return message

    async def aclose(self) -> None:
        if self.bug == "redeliver":
            # "In case they did not finish": the last ones handed out go back too.
            self.upstream.give_back(*self.handed[-2:], *self.buffer)
        elif self.bug != "drop":
            self.upstream.give_back(*self.buffer)
        await self.upstream.aclose()


def slotted(fixed: bool) -> Callable[[Dependency], Callable[[Any], Any]]:
    """3. A run that keeps its host's slot when it is cancelled."""

    def make(dependency: Dependency) -> Callable[[Any], Any]:
        hosts: dict[str, trio.Semaphore] = defaultdict(lambda: trio.Semaphore(1))

        async def fetch(item: Any) -> Any:
            slot = hosts["api.example"]
            if fixed:
                async with slot:
                    return await dependency(item)
            await slot.acquire()
            value = await dependency(item)
            slot.release()
            return value

        return fetch

    return make


def forgiving(fixed: bool) -> Callable[[Dependency], Callable[[Any], Any]]:
    """4. A run that swallows trio.Cancelled along with the errors it means to forgive."""

    def make(dependency: Dependency) -> Callable[[Any], Any]:
        async def fetch(item: Any) -> Any:
            try:
                return await dependency(item)
            except Exception:
                return None  # a failed fetch is a missing value, not a crash
            except BaseException:
                if fixed:
                    raise
                return None  # the bug: "whatever went wrong", trio.Cancelled included

        return fetch

    return make


def retrying(fixed: bool, dependency: Dependency, limit: RateLimit) -> Callable[[Any], Any]:
    """6. Retries that skip the rate limit the first attempt respects."""

    async def call(item: Any) -> Any:
        await limit.acquire()
        for _ in range(5):
            try:
                return await dependency(item)
            except ConnectionError:
                if fixed:
                    await limit.acquire()
                else:
                    await trio.sleep(0.1)
        return None

    return call


async def settle(key: str) -> None:
    await trio.lowlevel.checkpoint()


def booking(fixed: bool, ledger: list[str]) -> Callable[[Any], Any]:
    """7. An on_outcome that books an item again when it is redelivered after a restart."""

    async def on_outcome(served: Any) -> None:
        if fixed and (served.skipped or not served.ok):
            return
        ledger.append(served.key)

    return on_outcome


class Catalog(Taskset[Any]):
    """8. A taskset whose stream() is not restartable: load() hands out one shared iterator."""

    def __init__(self, rows: list[Any], *, fixed: bool) -> None:
        self.rows = list(rows) if fixed else iter(rows)

    def load(self) -> Any:
        return self.rows


async def pipeline(fixed: bool, values: list[int]) -> list[int]:
    """9. Two streams chained through a channel under one shared Window(1)."""
    window = Window(1)
    send, receive = trio.open_memory_channel[int](0)
    results: list[int] = []

    async def stage_one(value: int) -> None:
        await send.send(value * 2)

    async def stage_two(value: int) -> int:
        await trio.sleep(1)
        return value + 1

    async def first() -> None:
        async with send:
            await run_stream(values, stage_one, window=window)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        second = Window(1) if fixed else window
        results = await run_stream(receive, stage_two, window=second)
    return results


class Lines:
    """10. A source that closes its upstream when it runs out, and again when closed."""

    def __init__(self, upstream: Upstream[Any], *, fixed: bool) -> None:
        self.upstream = upstream
        self.fixed = fixed
        self.ended = False

    def __aiter__(self) -> Lines:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.upstream.get()
        except StopAsyncIteration:
            self.ended = True
            await self.upstream.aclose()
            raise

    async def aclose(self) -> None:
        if not (self.fixed and self.ended):
            await self.upstream.aclose()


# -- the tests, as a user writes them from docs/testing.md -------------------------------------


def test_reader(fixed: bool) -> Callable[[], None]:
    @given(ending=endings(), messages=items())
    def test(ending: Any, messages: list[Any]) -> None:
        check_source(reader(fixed), items=messages, endings=[ending])

    return test


def test_redelivering(fixed: bool) -> Callable[[], None]:
    bug = None if fixed else "redeliver"

    @given(ending=endings(), messages=items())
    def test(ending: Any, messages: list[Any]) -> None:
        check_source(lambda up: Prefetching(up, bug=bug), items=messages, endings=[ending])

    return test


def test_slot(fixed: bool) -> Callable[[], None]:
    @given(ending=endings(), values=items(), window=st.integers(1, 3))
    def test(ending: Any, values: list[Any], window: int) -> None:
        check_run(slotted(fixed), items=values, window=window, endings=[ending])

    return test


def test_cancelled(fixed: bool) -> Callable[[], None]:
    @given(ending=endings(), values=items(), how=flaky())
    def test(ending: Any, values: list[Any], how: Any) -> None:
        check_run(forgiving(fixed), items=values, flaky=how, endings=[ending])

    return test


def test_dropping(fixed: bool) -> Callable[[], None]:
    bug = None if fixed else "drop"

    @given(ending=endings(), messages=items())
    def test(ending: Any, messages: list[Any]) -> None:
        check_source(lambda up: Prefetching(up, bug=bug), items=messages, endings=[ending])

    return test


def test_retries(fixed: bool) -> Callable[[], None]:
    @given(how=flaky(max_failures=3), values=items(), window=st.integers(1, 4))
    @scenario
    async def test(how: Any, values: list[Any], window: int) -> None:
        dependency = how.make()
        limit = RateLimit(2, per=1.0, burst=1)
        await run_stream(values, retrying(fixed, dependency, limit), window=window)
        check_rate(dependency.calls, rate=2, per=1.0, burst=1)

    return test


def test_booking(fixed: bool) -> Callable[[], None]:
    @given(keys=st.lists(st.sampled_from("abcdef"), max_size=8), cut=st.integers(0, 8))
    @scenario(autojump=False)  # the journal works in a thread: real time
    async def test(keys: list[str], cut: int) -> None:
        ledger: list[str] = []
        with tempfile.TemporaryDirectory() as scratch:
            for feed in (keys[:cut], keys):  # the restart redelivers everything
                journal = f"{scratch}/journal.db"
                on_outcome = booking(fixed, ledger)
                await serve(feed, settle, window=2, key=str, journal=journal, on_outcome=on_outcome)
        check_once(ledger, expected=set(keys))

    return test


def test_restartable(fixed: bool) -> Callable[[], None]:
    @given(ending=endings(), rows=items())
    def test(ending: Any, rows: list[Any]) -> None:
        check_source(lambda: Catalog(rows, fixed=fixed), restartable=True, endings=[ending])

    return test


def test_pipeline(fixed: bool) -> Callable[[], None]:
    @given(values=st.lists(st.integers(), max_size=6))
    @scenario(timeout=60)
    async def test(values: list[int]) -> None:
        await pipeline(fixed, values)

    return test


def test_double_close(fixed: bool) -> Callable[[], None]:
    @given(ending=endings(), messages=items())
    def test(ending: Any, messages: list[Any]) -> None:
        check_source(lambda up: Lines(up, fixed=fixed), items=messages, endings=[ending])

    return test


CASES: dict[str, Callable[[bool], Callable[[], None]]] = {
    "source leaves its upstream open": test_reader,
    "in-flight messages given back": test_redelivering,
    "slot kept when cancelled": test_slot,
    "Cancelled swallowed": test_cancelled,
    "last items dropped at close": test_dropping,
    "retries over the rate quota": test_retries,
    "redelivered item booked twice": test_booking,
    "stream() not restartable": test_restartable,
    "two streams on one Window(1)": test_pipeline,
    "upstream closed twice": test_double_close,
}


def lines_of(case: Callable[[bool], Callable[[], None]]) -> int:
    """The lines of a test: its decorators, signature and body (what a user writes)."""
    source = inspect.getsource(case).splitlines()
    start = next(i for i, line in enumerate(source) if line.strip().startswith("@given"))
    end = next(i for i, line in enumerate(source) if line.strip().startswith("return test"))
    return sum(1 for line in source[start:end] if line.strip())


def run(
    case: Callable[[bool], Callable[[], None]], fixed: bool, examples: int, at: int
) -> str | None:
    """None if the test passed, else the first line of what failed it."""
    test = case(fixed)
    test = settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )(test)
    test = seed(at)(test)
    try:
        test()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        text = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return text[:110]
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--only", help="run the cases whose name contains this")
    parser.add_argument("--quick", action="store_true", help="20 examples, one seed")
    args = parser.parse_args()
    if __debug__:
        # Strip every assert, ours and any a user might have left in.
        os.execv(sys.executable, [sys.executable, "-O", *sys.argv])
    if args.quick:
        args.examples, args.seeds = 20, args.seeds[:1]
    cases = {name: case for name, case in CASES.items() if not args.only or args.only in name}
    print(f"seeded bugs: {len(cases)} pairs, {args.examples} examples per seed, python -O")
    caught: dict[int, int] = {}
    alarms = 0
    began = time.perf_counter()
    for at in args.seeds:
        caught[at] = 0
        print(f"\nseed {at}")
        for name, case in cases.items():
            found = run(case, False, args.examples, at)
            alarm = run(case, True, args.examples, at)
            caught[at] += found is not None
            alarms += alarm is not None
            verdict = "caught" if found else "MISSED"
            print(f"  {name:34} {verdict:7} {found or ''}")
            if alarm:
                print(f"  {'':34} FALSE ALARM on the correct twin: {alarm}")
    sizes = [lines_of(case) for case in cases.values()]
    print(
        f"\ncaught per seed: {', '.join(f'{caught[s]}/{len(cases)}' for s in args.seeds)}; "
        f"false alarms: {alarms} of {len(cases) * len(args.seeds)} twin runs; "
        f"median test: {statistics.median(sizes):g} lines (max {max(sizes)}); "
        f"{time.perf_counter() - began:.0f} s"
    )


if __name__ == "__main__":
    main()
