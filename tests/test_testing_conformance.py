"""check_source and check_run: each contract they check fails a piece that breaks it, by name.

Every broken piece has a correct twin that passes every ending, so a check
that stopped looking fails the broken case, and one that looked too hard
fails the twin.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio
from hypothesis import given, settings

from sluicegate import Taskset
from sluicegate.testing import (
    ENDINGS,
    ConformanceError,
    Dependency,
    Ending,
    Flaky,
    Upstream,
    check_run,
    check_source,
    endings,
    items,
)


def failure(check: Callable[..., None], *args: Any, **options: Any) -> ConformanceError:
    with pytest.raises(ConformanceError) as info:
        check(*args, **options)
    return info.value


# -- sources ----------------------------------------------------------------------------


async def closing_reader(upstream: Upstream[Any]) -> AsyncIterator[Any]:
    try:
        async for message in upstream:
            yield message
    finally:
        with trio.CancelScope(shield=True):
            await upstream.aclose()


async def leaky_reader(upstream: Upstream[Any]) -> AsyncIterator[Any]:
    async for message in upstream:
        yield message
    await upstream.aclose()  # never reached when the consumer stops early


def test_a_correct_reader_passes_every_ending() -> None:
    check_source(closing_reader, items=["a", "a", {"unhashable": 1}, None])


def test_an_upstream_left_open_is_named_with_its_ending() -> None:
    broken = failure(check_source, leaky_reader, endings=["consumer-left"])
    assert broken.ending == Ending("consumer-left")
    assert str(broken) == "ending 'consumer-left': the upstream was never closed, not once"
    check_source(leaky_reader, endings=["exhausted"])  # the happy path hides it


class Prefetch:
    """Takes two messages at a time; on close gives back what it holds (or the bug says)."""

    def __init__(self, upstream: Upstream[Any], bug: str | None = None) -> None:
        self.upstream, self.bug = upstream, bug
        self.buffer: list[Any] = []
        self.handed: list[Any] = []

    def __aiter__(self) -> Prefetch:
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
        self.handed.append(self.buffer.pop(0))
        return self.handed[-1]

    async def aclose(self) -> None:
        if self.bug == "redeliver":
            self.upstream.give_back(*self.handed[-2:], *self.buffer)
        elif self.bug != "drop":
            self.upstream.give_back(*self.buffer)
        await self.upstream.aclose()


def test_a_queue_source_that_gives_back_only_what_it_holds_passes() -> None:
    check_source(Prefetch, items=range(7))


def test_messages_dropped_at_close() -> None:
    drained = Ending("drained", after=0)
    broken = failure(check_source, lambda up: Prefetch(up, "drop"), endings=[drained])
    assert "'drained after 0': message(s) #1 taken from the upstream were neither run" in str(
        broken
    )
    assert "dropped at close" in str(broken)


def test_messages_given_back_after_they_ran() -> None:
    broken = failure(check_source, lambda up: Prefetch(up, "redeliver"), endings=["restarted"])
    assert str(broken).startswith("ending 'restarted': message(s) #0, #1 ran and were then given")
    assert "they will run twice" in str(broken)


class Lines:
    """Closes its upstream when it runs out, and when closed: once, or (the bug) again."""

    def __init__(self, upstream: Upstream[Any], *, once: bool) -> None:
        self.upstream, self.once, self.ended = upstream, once, False

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
        if not (self.once and self.ended):
            await self.upstream.aclose()


def test_an_upstream_closed_twice() -> None:
    broken = failure(check_source, lambda up: Lines(up, once=False))
    assert str(broken) == "ending 'exhausted': the upstream was closed 2 times, not once"
    check_source(lambda up: Lines(up, once=True))


class Catalog(Taskset[int]):
    def __init__(self, *, shared_iterator: bool) -> None:
        self.rows = iter(range(5)) if shared_iterator else list(range(5))

    def load(self) -> Any:
        return self.rows


def test_a_stream_that_is_not_restartable() -> None:
    broken = failure(check_source, lambda: Catalog(shared_iterator=True), restartable=True)
    assert str(broken).startswith("ending 'restarted': stream() is not restartable")
    check_source(lambda: Catalog(shared_iterator=False), restartable=True)


def test_the_invariant_is_checked_after_each_ending_and_survives_python_O() -> None:
    opened: list[int] = []

    async def numbers() -> AsyncIterator[int]:
        opened.append(1)
        for n in range(5):
            yield n
        opened.pop()  # the bug: only an exhausted stream gives its handle back

    broken = failure(check_source, numbers, invariant=lambda: not opened, endings=ENDINGS[:2])
    assert str(broken) == "ending 'consumer-left': invariant() returned False"
    opened.clear()
    broken = failure(check_source, numbers, invariant=lambda: f"{len(opened)} open" * bool(opened))
    assert str(broken) == "ending 'consumer-left': 1 open"


@settings(max_examples=20, deadline=None)
@given(ending=endings(), messages=items())
def test_a_property_over_endings_and_items_of_any_type(ending: Ending, messages: list[Any]) -> None:
    check_source(closing_reader, items=messages, endings=[ending])


# -- runs -------------------------------------------------------------------------------


def pooled(*, safe: bool) -> Callable[[Dependency], Callable[[Any], Any]]:
    def make(dependency: Dependency) -> Callable[[Any], Any]:
        slot = trio.Semaphore(1)

        async def fetch(item: Any) -> Any:
            if safe:
                async with slot:
                    return await dependency(item)
            await slot.acquire()
            value = await dependency(item)
            slot.release()  # skipped when the call is cut
            return value

        return fetch

    return make


def test_a_run_that_keeps_a_slot_when_cancelled_deadlocks_the_next_stream() -> None:
    broken = failure(check_run, pooled(safe=False))
    assert str(broken).startswith(
        f"ending {str(broken.ending)!r}: the same run, on a fresh stream afterwards, deadlocked"
    )
    assert broken.ending.how in ("consumer-left", "run-failed", "cancelled")
    check_run(pooled(safe=True))


def forgiving(*, catches: type[BaseException]) -> Callable[[Dependency], Callable[[Any], Any]]:
    def make(dependency: Dependency) -> Callable[[Any], Any]:
        async def fetch(item: Any) -> Any:
            try:
                return await dependency(item)
            except catches:
                return None

        return fetch

    return make


def test_a_run_that_swallows_cancelled_is_named_with_the_item() -> None:
    broken = failure(check_run, forgiving(catches=BaseException), items=["x", "y"])
    assert str(broken).startswith(
        "ending 'run-failed': the run of 'x' returned after its call was cancelled: "
        "trio.Cancelled was swallowed"
    )
    check_run(forgiving(catches=Exception), flaky=Flaky(fail_first=1, error=KeyError))


def test_a_run_whose_call_outlives_the_stream() -> None:
    def make(dependency: Dependency) -> Callable[[Any], Any]:
        async def fetch(item: Any) -> Any:
            # The bug: the call is left running in a system task, outside the stream.
            trio.lowlevel.spawn_system_task(dependency, item)
            await trio.lowlevel.checkpoint()
            return item

        return fetch

    broken = failure(check_run, make, endings=["exhausted"])
    assert "call(s) of the dependency still in flight after the stream ended" in str(broken)


def test_a_run_that_ignores_the_failure_of_another_is_still_ended() -> None:
    # Without a dependency: a run of the caller's own, checked on every ending.
    async def double(n: int) -> int:
        await trio.sleep(n % 3)
        return 2 * n

    check_run(lambda: double)


def test_endings_are_checked_values() -> None:
    with pytest.raises(ValueError, match="'how' must be in"):
        Ending("finished")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'after' must be >= 0"):
        Ending("drained", after=-1)
    assert str(Ending("drained", after=3)) == "drained after 3"
    with pytest.raises(TypeError, match=r"Flaky\(error=...\) must be an exception class"):
        Flaky(error=3)  # type: ignore[arg-type]
