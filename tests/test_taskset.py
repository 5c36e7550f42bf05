"""Task, Taskset and its views on both read paths, FeedTaskset, and tasksets in the runner."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from sluicegate import FeedTaskset, Task, Taskset, run_stream
from sluicegate.testing import ProbeError, RunProbe, ScriptedFeed

# -- fixtures: one taskset of each kind ------------------------------------------------


class Static(Taskset[Task]):
    def __init__(self, n: int) -> None:
        self.n = n

    def load(self) -> list[Task]:
        return [Task(i, id=f"t{i}") for i in range(self.n)]


class Counting(Taskset[Task]):
    """Infinite and lazy: records how far it was read and whether it was closed."""

    infinite = True

    def __init__(self) -> None:
        self.produced = 0
        self.closed = 0

    def load(self) -> Iterator[Task]:
        try:
            i = 0
            while True:
                self.produced += 1
                yield Task(i)
                i += 1
        finally:
            self.closed += 1


class Streaming(Taskset[Task]):
    """A live feed: a user's async generator over a scripted feed it owns."""

    def __init__(self, feed: ScriptedFeed[Any]) -> None:
        self.feed = feed

    async def stream(self) -> AsyncIterator[Task]:
        try:
            async for value in self.feed:
                yield Task(value)
        finally:
            await self.feed.aclose()


class StreamingChild(Streaming):
    pass


class StreamingGrandchild(StreamingChild):
    pass


class StaticChild(Static):
    pass


async def astream(ts: Taskset[Any]) -> list[Any]:
    async with aclosing(ts.stream()) as stream:  # type: ignore[type-var]
        return [item async for item in stream]


# -- Task -------------------------------------------------------------------------------


def test_task_defaults_and_unshared_metadata() -> None:
    a, b = Task("x"), Task("y")
    assert (a.id, a.target, a.system_prompt) == (None, None, None)
    assert a.metadata == {}
    assert a.metadata is not b.metadata


def test_task_is_frozen_and_hashable_with_a_dict_in_metadata() -> None:
    task = Task("x", metadata={"k": [1]})
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        task.input = "y"  # type: ignore[misc]
    assert {task: 1}[Task("x", metadata={"k": [1]})] == 1


def test_with_system_prompt_returns_a_new_task() -> None:
    task = Task("x", id=3, target="t", metadata={"k": 1})
    prompted = task.with_system_prompt("be brief")
    assert prompted == Task("x", id=3, target="t", metadata={"k": 1}, system_prompt="be brief")
    assert task.system_prompt is None
    with pytest.raises(TypeError, match=r"^text must be a str, not None$"):
        task.with_system_prompt(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^text must be a str, not 5$"):
        Static(1).with_system_prompt(5)  # type: ignore[arg-type]


# -- streaming ------------------------------------------------------------------------


def test_streaming_is_read_off_the_class_hierarchy() -> None:
    feed: ScriptedFeed[int] = ScriptedFeed()
    assert not Taskset[int]().streaming
    assert not Static(2).streaming
    assert not StaticChild(2).streaming
    assert not Counting().streaming
    assert not Taskset.from_iterable([1]).streaming
    assert Streaming(feed).streaming
    assert StreamingChild(feed).streaming
    assert StreamingGrandchild(feed).streaming
    assert FeedTaskset(feed).streaming


def test_a_view_is_streaming_exactly_when_its_base_is() -> None:
    feed: ScriptedFeed[int] = ScriptedFeed()
    for base in (Static(3), Counting()):
        views = [base.head(2), base.map(lambda t: t), base.with_system_prompt("p")]
        assert not any(v.streaming for v in views)
        assert not base.head(2).shuffle(1).map(lambda t: t).streaming
    for sbase in (Streaming(feed), StreamingGrandchild(feed)):
        views = [sbase.head(2), sbase.map(lambda t: t), sbase.with_system_prompt("p")]
        assert all(v.streaming for v in views)
        assert sbase.map(lambda t: t).head(1).with_system_prompt("p").streaming


# -- the two read paths of a static set ---------------------------------------------------


async def test_default_stream_is_iteration() -> None:
    ts = Static(4)
    assert await astream(ts) == list(ts) == [Task(i, id=f"t{i}") for i in range(4)]
    assert await astream(ts.head(2)) == list(ts.head(2)) == list(ts)[:2]


async def test_default_stream_closes_the_loaded_generator_when_closed_early() -> None:
    ts = Counting()
    stream = ts.stream()
    assert await anext(stream) == Task(0)
    await stream.aclose()  # type: ignore[attr-defined]
    assert ts.closed == 1


async def test_default_stream_is_cancellable_on_a_set_that_never_ends() -> None:
    with trio.move_on_after(0) as scope:
        await astream(Counting())
    assert scope.cancelled_caught


async def test_a_loop_over_an_infinite_static_stream_lets_other_tasks_run() -> None:
    ts = Counting()

    async def consume() -> None:
        async for _ in ts.stream():
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        # This task runs again only if the consumer's loop yields to trio.
        for _ in range(3):
            await trio.lowlevel.checkpoint()
        nursery.cancel_scope.cancel()
    assert ts.produced > 0
    assert ts.closed == 1


def _double(task: Task) -> Task:
    return attrs.evolve(task, input=task.input * 2)


def _tag(task: Task) -> Task:
    return attrs.evolve(task, metadata={**task.metadata, "seen": len(task.metadata)})


def _reverse_id(task: Task) -> Task:
    return attrs.evolve(task, id=str(task.id)[::-1])


MAPS: list[Callable[[Task], Task]] = [_double, _tag, _reverse_id]

op_strategy = st.one_of(
    st.tuples(st.just("head"), st.integers(min_value=0, max_value=12)),
    st.tuples(st.just("map"), st.sampled_from(MAPS)),
    st.tuples(st.just("shuffle"), st.integers() | st.text(max_size=5)),
    st.tuples(st.just("with_system_prompt"), st.text(max_size=8)),
)


def apply_view(ts: Taskset[Task], op: tuple[str, Any]) -> Taskset[Task]:
    name, arg = op
    if name == "head":
        return ts.head(arg)
    if name == "map":
        return ts.map(arg)
    if name == "shuffle":
        return ts.shuffle(arg)
    return ts.with_system_prompt(arg)


def apply_model(items: list[Task], op: tuple[str, Any]) -> list[Task]:
    """What a view must do, written out on plain lists."""
    name, arg = op
    if name == "head":
        return items[:arg]
    if name == "map":
        return [arg(t) for t in items]
    if name == "shuffle":
        items = list(items)
        random.Random(arg).shuffle(items)
        return items
    return [t.with_system_prompt(arg) for t in items]


@given(
    inputs=st.lists(st.integers(), max_size=15),
    ops=st.lists(op_strategy, max_size=6),
)
def test_views_agree_on_both_read_paths_and_with_the_list_model(
    inputs: list[int], ops: list[tuple[str, Any]]
) -> None:
    tasks = [Task(x, id=i) for i, x in enumerate(inputs)]
    base = Taskset.from_iterable(tasks)
    view: Taskset[Task] = base
    model = tasks
    for op in ops:
        view = apply_view(view, op)
        model = apply_model(model, op)

    async def main() -> list[Task]:
        return await astream(view)

    streamed = trio.run(main)
    assert streamed == list(view) == model
    assert list(view) == model  # a second read gives the same (shuffle included)
    assert len(view) == len(model)
    assert list(base) == tasks  # views never touch the original


@given(
    inputs=st.lists(st.integers(), max_size=10),
    ops=st.lists(op_strategy.filter(lambda op: op[0] != "shuffle"), max_size=5),
)
def test_views_of_a_streaming_taskset_apply_to_its_stream(
    inputs: list[int], ops: list[tuple[str, Any]]
) -> None:
    feed = ScriptedFeed(inputs, end=True)
    view: Taskset[Task] = Streaming(feed)
    model = [Task(x) for x in inputs]
    for op in ops:
        view = apply_view(view, op)
        model = apply_model(model, op)

    async def main() -> list[Task]:
        with trio.fail_after(1):
            return await astream(view)

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) == model
    # Never more than the heads asked for: an (n+1)-th pull would be one too many.
    assert feed.delivered == min([len(inputs)] + [arg for name, arg in ops if name == "head"])
    # The user's generator closes the feed it owns; one never started holds nothing.
    assert feed.close_count == (1 if feed.started else 0)


# -- streaming tasksets -------------------------------------------------------------------


async def test_with_system_prompt_reaches_every_streamed_task(autojump_clock: Any) -> None:
    feed = ScriptedFeed(["a", "b", "c"], end=True)
    view = StreamingGrandchild(feed).with_system_prompt("sys")
    with trio.fail_after(1):
        got = await astream(view)
    assert got == [Task(x, system_prompt="sys") for x in "abc"]


async def test_head_of_a_live_feed_takes_exactly_n(autojump_clock: Any) -> None:
    feed = ScriptedFeed([1, 2])  # never ends: a third pull would park for good
    with trio.fail_after(1):
        assert await astream(Streaming(feed).head(2).map(lambda t: t.input)) == [1, 2]
    assert feed.pulls == 2
    assert feed.close_count == 1


async def test_head_zero_of_a_live_feed_never_starts_it() -> None:
    feed = ScriptedFeed([1, 2])
    assert await astream(Streaming(feed).map(lambda t: t).head(0)) == []
    assert not feed.started


async def test_closing_a_mapped_stream_early_closes_the_users_stream(autojump_clock: Any) -> None:
    feed = ScriptedFeed([1, 2, 3])
    with trio.fail_after(1):
        stream = Streaming(feed).with_system_prompt("p").stream()
        assert await anext(stream) == Task(1, system_prompt="p")
        await stream.aclose()  # type: ignore[attr-defined]
    assert feed.pulls == 1
    assert feed.close_count == 1


async def test_a_failing_map_closes_the_stream_and_propagates() -> None:
    feed = ScriptedFeed([1, 2, 3])

    def bad(task: Task) -> Task:
        raise LookupError(task.input)

    with pytest.raises(LookupError):
        await astream(Streaming(feed).map(bad))
    assert feed.close_count == 1


def test_iterating_a_streaming_taskset_says_to_stream_it() -> None:
    feed: ScriptedFeed[int] = ScriptedFeed()
    with pytest.raises(TypeError, match="stream"):
        list(Streaming(feed))
    with pytest.raises(TypeError, match="stream"):
        list(Streaming(feed).head(1))
    assert not feed.started


def test_a_taskset_that_overrides_nothing_says_what_to_override() -> None:
    with pytest.raises(NotImplementedError, match=r"load\(\).*stream\(\)"):
        list(Taskset[int]())


# -- shuffle --------------------------------------------------------------------------------


def test_shuffle_is_deterministic_for_a_seed() -> None:
    ts = Static(30)
    first = list(ts.shuffle(7))
    assert list(ts.shuffle(7)) == first
    assert list(ts.shuffle(7)) == list(ts.shuffle(7))
    view = ts.shuffle("seed")
    assert list(view) == list(view)
    assert sorted(first, key=lambda t: t.input) == list(ts)
    assert first != list(ts)
    assert list(ts.shuffle(8)) != first


def test_shuffle_refuses_a_streaming_taskset() -> None:
    feed: ScriptedFeed[int] = ScriptedFeed()
    for ts in (Streaming(feed), StreamingChild(feed).head(3), FeedTaskset(feed).map(str)):
        with pytest.raises(ValueError, match="streaming"):
            ts.shuffle(1)


def test_shuffle_refuses_an_infinite_taskset_but_not_its_head() -> None:
    ts = Counting()
    with pytest.raises(ValueError, match="infinite"):
        ts.shuffle(1)
    with pytest.raises(ValueError, match="infinite"):
        ts.map(lambda t: t).shuffle(1)
    assert sorted(t.input for t in ts.head(5).shuffle(1)) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("seed", [None, 1.5, True, [1]])
def test_shuffle_refuses_a_seed_that_does_not_fix_an_order(seed: Any) -> None:
    with pytest.raises(TypeError, match=r"^seed must be an int, str or bytes, not "):
        Static(3).shuffle(seed)


# -- infinite sets and lengths ----------------------------------------------------------------


async def test_head_of_an_infinite_taskset_is_lazy_on_both_paths() -> None:
    ts = Counting()
    assert [t.input for t in ts.head(3)] == [0, 1, 2]
    assert ts.produced == 3  # islice: no 4th item asked for
    assert ts.closed == 1
    view = ts.map(_double).head(3).with_system_prompt("p")
    assert not view.infinite
    with trio.fail_after(5):
        streamed = await astream(view)
    assert streamed == [Task(i * 2, system_prompt="p") for i in range(3)]
    assert ts.closed == 2
    assert list(ts.head(0)) == []


def test_len_where_it_is_known() -> None:
    assert len(Static(4)) == 4
    assert len(Taskset.from_iterable(x for x in range(5))) == 5
    assert len(Static(4).head(2)) == 2
    assert len(Static(4).head(10)) == 4
    assert len(Static(4).map(_double).shuffle(3).with_system_prompt("p")) == 4
    assert len(Counting().head(7)) == 7
    assert len(Counting().map(_double).head(7)) == 7


def test_len_is_a_type_error_where_it_is_not_known() -> None:
    feed: ScriptedFeed[int] = ScriptedFeed()

    class Generated(Taskset[int]):
        def load(self) -> Iterator[int]:
            yield from range(3)

    for ts in (Counting(), Counting().map(_double), Streaming(feed), Streaming(feed).head(2)):
        with pytest.raises(TypeError, match="not known"):
            len(ts)
    with pytest.raises(TypeError, match="no length"):
        len(Generated())
    assert list(Generated()) == [0, 1, 2]  # list() copes with the missing length


@pytest.mark.parametrize(("n", "error"), [(-1, ValueError), ("1", TypeError), (False, TypeError)])
def test_head_refuses_a_bad_count(n: Any, error: type) -> None:
    with pytest.raises(error, match="head"):
        Static(3).head(n)


def test_map_refuses_a_non_callable() -> None:
    with pytest.raises(TypeError, match=r"^fn must be callable, not 5$"):
        Static(3).map(5)  # type: ignore[arg-type]


# -- FeedTaskset --------------------------------------------------------------------------------


async def test_feed_taskset_ends_when_the_channel_closes() -> None:
    send, receive = trio.open_memory_channel[Task](10)
    ts = FeedTaskset(receive)
    async with send:
        for i in range(3):
            await send.send(Task(i))
    assert await astream(ts.with_system_prompt("p")) == [
        Task(i, system_prompt="p") for i in range(3)
    ]


async def test_closing_a_feed_taskset_early_closes_its_channel() -> None:
    send, receive = trio.open_memory_channel[int](10)
    ts = FeedTaskset(receive)
    await send.send(1)
    await send.send(2)
    assert await astream(ts.head(1)) == [1]
    with pytest.raises(trio.BrokenResourceError):
        await send.send(3)


async def test_head_zero_of_a_feed_taskset_releases_the_feed_unstarted() -> None:
    feed = ScriptedFeed([1])
    assert await astream(FeedTaskset(feed).map(str).head(0)) == []
    assert not feed.started
    assert feed.close_count == 1


async def test_cancelling_a_parked_feed_taskset_closes_the_feed() -> None:
    feed: ScriptedFeed[int] = ScriptedFeed()
    stream = FeedTaskset(feed).stream()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(anext, stream)
        await feed.wait_parked()
        nursery.cancel_scope.cancel()
    assert feed.close_count == 1


async def test_cancelling_a_parked_channel_feed_closes_the_channel() -> None:
    send, receive = trio.open_memory_channel[int](0)
    stream = FeedTaskset(receive).stream()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(anext, stream)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    with pytest.raises(trio.BrokenResourceError):
        send.send_nowait(1)


async def test_a_channel_feed_hands_out_waiting_items_without_a_schedule_point() -> None:
    send, receive = trio.open_memory_channel[int](10)
    for n in range(3):
        send.send_nowait(n)
    stream = FeedTaskset(receive).stream()
    with trio.CancelScope() as scope:
        scope.cancel()
        # Cancelled already, yet items that are waiting come out: no checkpoint
        # is made per item (the runner's workers make them instead).
        assert [await anext(stream) for _ in range(3)] == [0, 1, 2]
        with pytest.raises(trio.Cancelled):
            await anext(stream)  # empty: it blocks, and so sees the cancellation
    with pytest.raises(trio.BrokenResourceError):
        send.send_nowait(1)


async def test_a_feed_can_be_streamed_once() -> None:
    ts = FeedTaskset(ScriptedFeed([1], end=True))
    assert await astream(ts) == [1]
    with pytest.raises(RuntimeError, match="once"):
        ts.stream()


def test_feed_taskset_needs_an_async_iterable() -> None:
    with pytest.raises(TypeError, match=r"^source must be an async iterable .*, not list$"):
        FeedTaskset([1, 2])  # type: ignore[arg-type]


# -- tasksets in the runner ---------------------------------------------------------------------


async def test_a_streaming_taskset_runs_through_run_stream_with_back_pressure() -> None:
    feed = ScriptedFeed(["a", "b", "c", "d"], end=True)
    ts = Streaming(feed).with_system_prompt("p")
    probe: RunProbe[Task] = RunProbe(gated=True, value=lambda t: t.input.upper())
    results: list[str] = []

    async def drive() -> None:
        results.extend(await run_stream(ts.stream(), probe, window=2))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drive)
        await probe.wait_started(2)
        # Two runs hold both places: the third task is not pulled yet.
        await trio.testing.wait_all_tasks_blocked()
        assert feed.pulls == 2
        probe.release(Task("b", system_prompt="p"))
        await probe.wait_started(3)
        probe.release_all()
        for item in ("c", "d"):
            probe.release(Task(item, system_prompt="p"))
    assert results == ["A", "B", "C", "D"]
    assert probe.peak == 2
    assert feed.close_count == 1


async def test_a_static_taskset_runs_through_run_stream(autojump_clock: Any) -> None:
    ts = Static(6).shuffle(2).head(4)
    probe: RunProbe[Task] = RunProbe(durations=lambda t: 10 - t.input)
    assert await run_stream(ts.stream(), probe, window=2) == list(ts)
    assert probe.peak == 2


async def test_a_failing_run_closes_a_quiet_streaming_taskset(autojump_clock: Any) -> None:
    feed = ScriptedFeed(["x"])  # then quiet for good
    probe: RunProbe[Task] = RunProbe(fail=lambda t: t.input == "x")
    with trio.fail_after(1), pytest.raises(ProbeError):
        await run_stream(Streaming(feed).head(5).stream(), probe, window=2)
    assert feed.close_count == 1
