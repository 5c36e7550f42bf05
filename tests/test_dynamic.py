"""SampleSource and enqueue(): dynamic sources on the core runner.

Tests that involve time run on trio's MockClock (the ``autojump_clock``
fixture, or an explicit ``MockClock`` for the Hypothesis property), so
durations cost no real time and a deadlock turns into a ``TooSlowError``
instead of a hang.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluicegate import Drain, SampleSource, enqueue, open_stream, run_stream
from sluicegate.testing import ProbeError, RunProbe, ScriptedFeed

# Far beyond any test's schedule on the mock clock: reaching it means a deadlock.
DEADLOCK = 10_000


class Recording(AsyncIterator[Any]):
    """Wraps a bound stream to record the pull order and the closes."""

    def __init__(self, inner: AsyncIterator[Any]) -> None:
        self.inner = inner
        self.pulled: list[Any] = []
        self.close_count = 0

    def __aiter__(self) -> Recording:
        return self

    async def __anext__(self) -> Any:
        item = await self.inner.__anext__()
        self.pulled.append(item)
        return item

    async def aclose(self) -> None:
        self.close_count += 1
        await self.inner.aclose()  # type: ignore[attr-defined]


class Watched(SampleSource[Any, Any]):
    """Delegates to a SampleSource and keeps the bound streams for assertions."""

    def __init__(self, inner: SampleSource[Any, Any]) -> None:
        self.inner = inner
        self.bound: list[Any] = []  # the _SampleStream of each binding
        self.recordings: list[Recording] = []

    def initial(self) -> Sequence[Any]:
        return self.inner.initial()

    async def next(self) -> Sequence[Any] | None:
        return await self.inner.next()

    async def on_complete(self, item: Any, result: Any) -> Sequence[Any] | None:
        return await self.inner.on_complete(item, result)

    async def on_abandoned(self, item: Any) -> None:
        await self.inner.on_abandoned(item)

    def bind_run(
        self,
        run: Callable[[Any], Awaitable[Any]],
        /,
        *,
        admitting: Callable[[], bool] | None = None,
        drained: Callable[[], bool] | None = None,
    ) -> Any:
        stream, wrapped = super().bind_run(run, admitting=admitting, drained=drained)
        recording = Recording(stream)
        self.bound.append(stream)
        self.recordings.append(recording)
        return recording, wrapped


class Generations:
    """A ``next`` that returns the given batches one call at a time, then None."""

    def __init__(self, *batches: Sequence[Any] | None) -> None:
        self.queue = list(batches)
        self.calls = 0

    async def __call__(self) -> Sequence[Any] | None:
        self.calls += 1
        await trio.lowlevel.checkpoint()
        return self.queue.pop(0) if self.queue else None


# -- the liveness that batch-at-a-time dispatch lacks ---------------------------------


@pytest.mark.parametrize("window", [2, 3, None])
async def test_enqueued_item_starts_while_others_run(
    autojump_clock: Any, window: int | None
) -> None:
    unblocked = trio.Event()

    async def run(item: str) -> str:
        if item == "blocker":
            # Only the item that `injector` enqueues sets this: under batch-at-a-
            # time dispatch it would wait for `blocker` to finish, forever.
            await unblocked.wait()
        elif item == "injector":
            enqueue("unblocker")
        elif item == "unblocker":
            unblocked.set()
        await trio.sleep(1)
        return item.upper()

    source = SampleSource[str, str].from_items(["blocker", "injector"])
    with trio.fail_after(DEADLOCK):
        results = await run_stream(source, run, window=window)
    assert results == ["BLOCKER", "INJECTOR", "UNBLOCKER"]
    # With two places, unblocker takes injector's place at 1 and all are done
    # at 2; with a third place free it starts at once and all are done at 1.
    assert trio.current_time() == (2 if window == 2 else 1)


async def test_follow_ups_start_at_once_on_free_places(autojump_clock: Any) -> None:
    probe: RunProbe[str] = RunProbe(durations={"slow": 100, "quick": 1, "child": 1})

    async def on_complete(item: str, result: str) -> list[str] | None:
        return ["child"] if item == "quick" else None

    source = SampleSource[str, str].from_items(["slow", "quick"], on_complete=on_complete)
    with trio.fail_after(DEADLOCK):
        await run_stream(source, probe, window=2)
    # The child ran beside `slow` instead of waiting for it.
    assert probe.finished == ["quick", "child", "slow"]
    assert trio.current_time() == 100


# -- the three ways to add work --------------------------------------------------------


async def test_generations_through_next_only(autojump_clock: Any) -> None:
    next_batch = Generations(["a1", "a2", "a3"], ["b1", "b2"], ["c1"])
    probe: RunProbe[str] = RunProbe(durations=lambda item: 1 + int(item[1]))
    source = SampleSource[str, str].from_items([], next=next_batch)
    results = await run_stream(source, probe, window=8)
    assert results == ["a1", "a2", "a3", "b1", "b2", "c1"]
    assert next_batch.calls == 4  # three batches and the None
    # A generation starts only when the one before is over: 4 + 3 + 2 seconds.
    assert trio.current_time() == 9


async def test_chain_through_on_complete_only(autojump_clock: Any) -> None:
    async def on_complete(item: int, result: int) -> list[int] | None:
        return [item + 1] if item < 9 else None

    probe: RunProbe[int] = RunProbe(durations={n: 1 for n in range(10)}, value=lambda n: n * n)
    source = SampleSource[int, int].from_items([0], on_complete=on_complete)
    assert await run_stream(source, probe, window=4) == [n * n for n in range(10)]
    assert probe.peak == 1


async def test_subclass_with_all_three_hooks(autojump_clock: Any) -> None:
    class Countdown(SampleSource[int, str]):
        def __init__(self) -> None:
            self.seen: list[tuple[int, str]] = []
            self.rounds = 0

        def initial(self) -> Sequence[int]:
            return [2]

        async def next(self) -> Sequence[int] | None:
            self.rounds += 1
            return [10 * self.rounds] if self.rounds < 3 else None

        async def on_complete(self, item: int, result: str) -> Sequence[int] | None:
            self.seen.append((item, result))
            return [item - 1] if 0 < item < 10 else None

    async def run(item: int) -> str:
        await trio.sleep(1)
        return f"<{item}>"

    source = Countdown()
    results = await run_stream(source, run, window=2)
    assert results == ["<2>", "<1>", "<0>", "<10>", "<20>"]
    assert source.seen == [(2, "<2>"), (1, "<1>"), (0, "<0>"), (10, "<10>"), (20, "<20>")]
    assert source.rounds == 3


async def test_from_items_copies_the_seed_for_every_stream() -> None:
    seed = [1, 2, 3]
    source = SampleSource[int, int].from_items(iter(seed))
    probe: RunProbe[int] = RunProbe()
    assert await run_stream(source, probe, window=2) == seed
    assert await run_stream(source, probe, window=None) == seed


def test_from_items_rejects_non_callables() -> None:
    with pytest.raises(TypeError, match="next"):
        SampleSource.from_items([], next=[1, 2])  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="on_complete"):
        SampleSource.from_items([], on_complete="x")  # type: ignore[call-overload]


async def test_default_source_has_no_work() -> None:
    probe: RunProbe[Any] = RunProbe()
    assert await run_stream(SampleSource[Any, Any](), probe, window=3) == []
    assert probe.started == []


async def test_empty_seed_pulls_from_next(autojump_clock: Any) -> None:
    next_batch = Generations(["x"], ["y", "z"])
    probe: RunProbe[str] = RunProbe()
    results = await run_stream(
        SampleSource[str, str].from_items((), next=next_batch), probe, window=1
    )
    assert results == ["x", "y", "z"]


async def test_empty_batch_from_next_means_ask_again_when_idle(autojump_clock: Any) -> None:
    next_batch = Generations([], [], ["late"], [], None, ["never"])
    probe: RunProbe[str] = RunProbe(durations={"seed": 5})
    source = SampleSource[str, str].from_items(["seed"], next=next_batch)
    assert await run_stream(source, probe, window=2) == ["seed", "late"]
    assert next_batch.calls == 5


async def test_next_that_never_blocks_stays_cancellable(autojump_clock: Any) -> None:
    calls = 0
    scope = trio.CancelScope()

    async def never_ready() -> list[Any]:
        # No checkpoint of its own: only the pull loop's checkpoint can deliver
        # the cancellation requested here.
        nonlocal calls
        calls += 1
        if calls == 100:
            scope.cancel()
        if calls > 1000:
            raise AssertionError("the pull loop never reached a checkpoint")
        return []

    watched = Watched(SampleSource[Any, Any].from_items([], next=never_ready))
    with scope:
        await run_stream(watched, RunProbe(), window=2)
    assert scope.cancelled_caught
    assert calls == 100
    assert watched.recordings[0].close_count == 1


async def test_enqueue_during_the_final_next_still_runs(autojump_clock: Any) -> None:
    asked = trio.Event()
    added = trio.Event()

    async with trio.open_nursery() as outside:

        async def leave_behind() -> None:
            # Spawned by a run into a nursery that outlives it: it keeps the
            # run's context, so enqueue() reaches the stream later on.
            await asked.wait()
            enqueue("late")
            added.set()

        async def run(item: str) -> str:
            if item == "seed":
                outside.start_soon(leave_behind)
            await trio.sleep(1)
            return item

        async def last_next() -> None:
            asked.set()
            await added.wait()
            return None

        async def on_complete(item: str, result: str) -> list[str] | None:
            # Follow-ups of work that started after next() said None run too.
            return ["after-late"] if item == "late" else None

        source = SampleSource[str, str].from_items(
            ["seed"], next=last_next, on_complete=on_complete
        )
        with trio.fail_after(DEADLOCK):
            results = await run_stream(source, run, window=2)
    assert results == ["seed", "late", "after-late"]


async def test_enqueue_from_nested_calls_and_spawned_tasks(autojump_clock: Any) -> None:
    def helper(item: str) -> None:
        enqueue(f"{item}.deep")

    async def run(item: str) -> str:
        if "." not in item:
            helper(item)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep, 1)

                async def child() -> None:
                    await trio.sleep(0.5)
                    enqueue(f"{item}.spawned1", f"{item}.spawned2")

                nursery.start_soon(child)
        return item

    source = SampleSource[str, str].from_items(["a"])
    results = await run_stream(source, run, window=1)
    assert results == ["a", "a.deep", "a.spawned1", "a.spawned2"]


async def test_enqueue_comes_before_on_complete_follow_ups(autojump_clock: Any) -> None:
    async def run(item: str) -> str:
        if item == "root":
            enqueue("enqueued")
        return item

    async def on_complete(item: str, result: str) -> list[str] | None:
        return ["followed"] if item == "root" else None

    source = SampleSource[str, str].from_items(["root"], on_complete=on_complete)
    assert await run_stream(source, run, window=3) == ["root", "enqueued", "followed"]


async def test_one_source_bound_twice_keeps_separate_buffers(autojump_clock: Any) -> None:
    async def run(item: str) -> str:
        if not item.endswith("!"):
            await trio.sleep(1)
            enqueue(item + "!")
        await trio.sleep(1)
        return item

    source = SampleSource[str, str].from_items(["x"])
    outcome: dict[str, list[str]] = {}

    async def one(label: str) -> None:
        async def labelled(item: str) -> str:
            return label + ":" + await run(item)

        outcome[label] = await run_stream(source, labelled, window=2)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, "A")
        nursery.start_soon(one, "B")
    assert outcome == {"A": ["A:x", "A:x!"], "B": ["B:x", "B:x!"]}


async def test_nested_streams_enqueue_to_their_own_source() -> None:
    async def inner_run(item: str) -> str:
        if item == "i":
            enqueue("i2")
        return item

    async def outer_run(item: str) -> list[str]:
        if item == "o":
            inner = await run_stream(SampleSource[str, str].from_items(["i"]), inner_run, window=2)
            enqueue("o2")  # the outer stream again, once the inner one is over
            return inner
        return [item]

    results = await run_stream(SampleSource[str, list[str]].from_items(["o"]), outer_run, window=2)
    assert results == [["i", "i2"], ["o2"]]


# -- next() is asked only when idle -------------------------------------------------


async def test_next_is_never_asked_while_anything_is_running_or_buffered(
    autojump_clock: Any,
) -> None:
    probe: RunProbe[int] = RunProbe(durations=lambda n: 1 + n % 3)
    added = 0
    completed = 0
    asked_at: list[tuple[int, int, int, int]] = []
    rounds = iter([[10, 11, 12, 13, 14], [], [20, 21], [30]])

    class Busy(SampleSource[int, int]):
        def initial(self) -> Sequence[int]:
            nonlocal added
            added += 3
            return [0, 1, 2]

        async def next(self) -> Sequence[int] | None:
            stream = watched.bound[0]
            asked_at.append((probe.alive, stream.in_flight, stream.buffered, added - completed))
            batch = next(rounds, None)
            if batch is not None:
                added_now(len(batch))
            return batch

        async def on_complete(self, item: int, result: int) -> Sequence[int] | None:
            nonlocal completed
            completed += 1
            if item % 2 == 0 and item < 25:
                added_now(1)
                return [item + 1000]
            return None

    def added_now(count: int) -> None:
        nonlocal added
        added += count

    async def run(item: int) -> int:
        if item % 5 == 1 and item < 1000:
            added_now(2)
            enqueue(item + 2000, item + 3000)
        value: int = await probe(item)
        return value

    watched = Watched(Busy())
    with trio.fail_after(DEADLOCK):
        results = await run_stream(watched, run, window=3)
    assert len(asked_at) == 5  # four batches, then None
    assert asked_at == [(0, 0, 0, 0)] * 5
    assert sorted(results) == sorted(set(results))
    assert len(results) == added


# -- fail-fast, cancellation, drain, close-out -----------------------------------------


async def test_failure_in_on_complete_fails_fast_as_itself(autojump_clock: Any) -> None:
    probe: RunProbe[str] = RunProbe(durations={"bad": 1, "other": 50})

    async def on_complete(item: str, result: str) -> list[str] | None:
        if item == "bad":
            raise KeyError("from on_complete")
        return None

    watched = Watched(
        SampleSource[str, str].from_items(["other", "bad", "later"], on_complete=on_complete)
    )
    with pytest.raises(KeyError, match="from on_complete") as info:
        await run_stream(watched, probe, window=2)
    assert any("item 1" in note for note in info.value.__notes__)
    assert probe.cancelled == ["other"]
    assert "later" not in probe.started
    assert trio.current_time() == 1
    assert watched.recordings[0].close_count == 1
    assert watched.bound[0].closed


async def test_failure_in_next_fails_fast_as_itself(autojump_clock: Any) -> None:
    async def broken() -> list[str]:
        await trio.sleep(2)
        raise ValueError("from next")

    watched = Watched(SampleSource[str, str].from_items(["a"], next=broken))
    with pytest.raises(ValueError, match="from next") as info:
        await run_stream(watched, RunProbe(), window=2)
    assert any("source" in note for note in info.value.__notes__)
    assert watched.recordings[0].close_count == 1


async def test_failure_in_initial_fails_as_the_source(autojump_clock: Any) -> None:
    class Broken(SampleSource[str, str]):
        def initial(self) -> Sequence[str]:
            raise OSError("no seed")

    with pytest.raises(OSError, match="no seed"):
        await run_stream(Broken(), RunProbe(), window=2)


async def test_failing_run_skips_on_complete(autojump_clock: Any) -> None:
    seen: list[str] = []

    async def on_complete(item: str, result: str) -> list[str] | None:
        seen.append(item)
        return ["follow"]

    probe: RunProbe[str] = RunProbe(fail={"bad"})
    with pytest.raises(ProbeError):
        await run_stream(
            SampleSource[str, str].from_items(["bad"], on_complete=on_complete), probe, window=1
        )
    assert seen == []
    assert "follow" not in probe.started


async def test_cancellation_while_blocked_in_next_ends_promptly(autojump_clock: Any) -> None:
    feed: ScriptedFeed[list[str]] = ScriptedFeed()

    async def next_batch() -> list[str] | None:
        try:
            return await feed.__anext__()
        except StopAsyncIteration:
            return None

    watched = Watched(SampleSource[str, str].from_items(["a"], next=next_batch))
    probe: RunProbe[str] = RunProbe()
    async with trio.open_nursery() as nursery:
        cancel_scope = trio.CancelScope()

        async def stream() -> None:
            with cancel_scope:
                await run_stream(watched, probe, window=2)

        nursery.start_soon(stream)
        await feed.wait_parked()
        assert probe.finished == ["a"]
        started = trio.current_time()
        cancel_scope.cancel()
    assert trio.current_time() == started
    assert cancel_scope.cancelled_caught
    assert watched.recordings[0].close_count == 1


async def test_parked_pull_is_cancelled_with_the_stream(autojump_clock: Any) -> None:
    probe: RunProbe[str] = RunProbe(gated=True)
    watched = Watched(SampleSource[str, str].from_items(["held"]))
    with trio.move_on_after(7):
        await run_stream(watched, probe, window=3)
    assert trio.current_time() == 7
    assert probe.cancelled == ["held"]
    assert watched.recordings[0].close_count == 1


@pytest.mark.parametrize("window", [2, 3, None])
async def test_drain_lets_in_flight_runs_finish_and_admits_nothing_more(
    autojump_clock: Any, window: int | None
) -> None:
    drain = Drain()
    follow_ups_asked: list[str] = []

    async def run(item: str) -> str:
        if item == "trigger":
            drain.request("enough")
        await trio.sleep(3)
        if item == "slow":
            enqueue("dropped-enqueue")  # after the drain: quietly not admitted
        return item

    async def on_complete(item: str, result: str) -> list[str]:
        follow_ups_asked.append(item)
        return [f"{item}-child"]

    watched = Watched(
        SampleSource[str, str].from_items(["slow", "trigger"], on_complete=on_complete)
    )
    # With a third place, a pull is parked waiting for work when the drain comes.
    results = await run_stream(watched, run, window=window, drain=drain)
    assert results == ["slow", "trigger"]
    assert trio.current_time() == 3
    assert sorted(follow_ups_asked) == ["slow", "trigger"]
    assert watched.recordings[0].close_count == 1


async def test_open_stream_with_a_sample_source(autojump_clock: Any) -> None:
    async def on_complete(item: int, result: int) -> list[int] | None:
        return [item * 2, item * 2 + 1] if item < 4 else None

    probe: RunProbe[int] = RunProbe(durations=lambda n: 8 - n)
    source = SampleSource[int, int].from_items([1], on_complete=on_complete)
    seen = []
    async with open_stream(source, probe, window=2, ordered=True) as results:
        async for done in results:
            seen.append((done.index, done.item))
    # 3 is quicker than 2, so its children are added (and pulled) first.
    assert seen == list(enumerate([1, 2, 3, 6, 7, 4, 5]))
    assert probe.peak == 2


async def test_enqueue_outside_a_run_raises() -> None:
    with pytest.raises(RuntimeError, match="SampleSource"):
        enqueue(1)

    async def plain_run(item: int) -> int:
        enqueue(item + 1)
        return item

    with pytest.raises(RuntimeError, match="SampleSource"):
        await run_stream([1], plain_run, window=1)


async def test_enqueue_inside_next_raises_even_in_a_nested_stream() -> None:
    errors: list[RuntimeError] = []

    async def asking() -> None:
        try:
            enqueue("from next")
        except RuntimeError as exc:
            errors.append(exc)
        return None

    async def outer_run(item: str) -> list[str]:
        assert item == "o", "enqueue() in the inner next() fed the outer stream"
        # window=None: the inner puller task inherits this run's context.
        inner = SampleSource[str, str].from_items(["i"], next=asking)
        return await run_stream(inner, RunProbe(), window=None)

    outer = SampleSource[str, list[str]].from_items(["o"])
    assert await run_stream(outer, outer_run, window=None) == [["i"]]
    assert len(errors) == 1
    assert "SampleSource" in str(errors[0])


@pytest.mark.parametrize("hook", ["initial", "next", "on_complete"])
async def test_hook_returning_a_string_is_a_type_error(hook: str) -> None:
    class Stringy(SampleSource[str, str]):
        def initial(self) -> Sequence[str]:
            return "abc" if hook == "initial" else ["x"]

        async def next(self) -> Sequence[str] | None:
            return "abc" if hook == "next" else None

        async def on_complete(self, item: str, result: str) -> Sequence[str] | None:
            return "abc" if hook == "on_complete" else None

    probe: RunProbe[str] = RunProbe()
    with pytest.raises(TypeError, match="'abc'"):
        await run_stream(Stringy(), probe, window=2)
    assert "a" not in probe.started


async def test_enqueue_after_the_stream_ended_raises(autojump_clock: Any) -> None:
    errors: list[BaseException] = []

    async with trio.open_nursery() as outside:
        finished = trio.Event()

        async def too_late() -> None:
            await finished.wait()
            try:
                enqueue("lost")
            except RuntimeError as exc:
                errors.append(exc)

        async def run(item: str) -> str:
            outside.start_soon(too_late)
            return item

        assert await run_stream(SampleSource[str, str].from_items(["a"]), run, window=1) == ["a"]
        finished.set()
    assert len(errors) == 1
    assert "ended" in str(errors[0])


async def test_no_state_kept_for_finished_items(autojump_clock: Any) -> None:
    class Node:
        def __init__(self, depth: int) -> None:
            self.depth = depth

    refs: list[weakref.ref[Node]] = []
    most_alive = 0

    async def on_complete(item: Node, result: int) -> list[Node] | None:
        if item.depth >= 300:
            return None
        child = Node(item.depth + 1)
        refs.append(weakref.ref(child))
        return [child]

    async def run(item: Node) -> int:
        await trio.sleep(1)
        return item.depth

    first = Node(0)
    refs.append(weakref.ref(first))
    source = SampleSource[Node, int].from_items([first], on_complete=on_complete)
    del first
    window = 3
    async with open_stream(source, run, window=window) as results:
        async for done in results:
            assert done.value == done.index
            del done
            if len(refs) % 50 == 0:
                gc.collect()
                most_alive = max(most_alive, sum(ref() is not None for ref in refs))
    assert len(refs) == 301
    # The seed copy from_items keeps, plus what the workers hold: O(window).
    assert most_alive <= 2 * window + 2


async def test_stream_pulled_by_two_tasks_at_once_is_refused() -> None:
    async def next_batch() -> list[int]:
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    probe: RunProbe[int] = RunProbe()
    stream, _ = SampleSource[int, int].from_items([], next=next_batch).bind_run(probe)
    with trio.move_on_after(1):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.__anext__)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(RuntimeError, match="two tasks"):
                await stream.__anext__()
            nursery.cancel_scope.cancel()
    await stream.aclose()  # type: ignore[attr-defined]
    await stream.aclose()  # type: ignore[attr-defined]
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()


# -- the property ---------------------------------------------------------------------

ORIGINS = ("seed", "next", "on_complete", "enqueue", "enqueue_spawned")


@st.composite
def trees(draw: st.DrawFn) -> dict[str, Any]:
    """A random forest of items; each says where it comes from and how long it runs."""
    count = draw(st.integers(1, 25))
    nodes = []
    for index in range(count):
        origin = draw(st.sampled_from(ORIGINS if index else ORIGINS[:2]))
        nodes.append(
            {
                "origin": origin,
                "parent": draw(st.integers(0, index - 1)) if index else None,
                "generation": draw(st.integers(0, 3)),
                "duration": draw(st.integers(0, 4)),
                "offset": draw(st.integers(0, 4)),
            }
        )
    return {
        "nodes": nodes,
        "window": draw(st.none() | st.integers(1, 5)),
        "front": draw(st.sampled_from(["run_stream", "ordered", "unordered"])),
    }


async def play(tree: dict[str, Any]) -> None:
    nodes = tree["nodes"]
    window = tree["window"]
    children: dict[int, dict[str, list[int]]] = {
        i: {o: [] for o in ORIGINS} for i in range(len(nodes))
    }
    gens: list[list[int]] = [[] for _ in range(4)]
    seed: list[int] = []
    for index, node in enumerate(nodes):
        if node["origin"] == "seed":
            seed.append(index)
        elif node["origin"] == "next":
            gens[node["generation"]].append(index)
        else:
            children[node["parent"]][node["origin"]].append(index)
    rounds = iter(gens)
    added: list[int] = []
    started: list[int] = []
    completed = 0
    alive = 0
    peak = 0
    idle_violations: list[str] = []

    class Tree(SampleSource[int, int]):
        def initial(self) -> Sequence[int]:
            added.extend(seed)
            return seed

        async def next(self) -> Sequence[int] | None:
            pulled = watched.recordings[0].pulled
            if alive or completed != len(added) or len(pulled) != len(added):
                idle_violations.append(f"next() asked with alive={alive}, added={len(added)}")
            await trio.sleep(1)
            batch = next(rounds, None)
            if batch is not None:
                added.extend(batch)
            return batch

        async def on_complete(self, item: int, result: int) -> Sequence[int] | None:
            nonlocal completed
            await trio.sleep(nodes[item]["offset"] % 2)
            completed += 1
            batch = children[item]["on_complete"]
            added.extend(batch)
            return batch

    def add(*items: int) -> None:
        added.extend(items)
        enqueue(*items)

    async def run(item: int) -> int:
        nonlocal alive, peak
        started.append(item)
        alive += 1
        peak = max(peak, alive)
        try:
            offset = min(nodes[item]["offset"], nodes[item]["duration"])
            async with trio.open_nursery() as nursery:
                spawned = children[item]["enqueue_spawned"]
                if spawned:

                    async def later() -> None:
                        await trio.sleep(offset)
                        add(*spawned)

                    nursery.start_soon(later)
                await trio.sleep(offset)
                if children[item]["enqueue"]:
                    add(*children[item]["enqueue"])
                await trio.sleep(nodes[item]["duration"] - offset)
        finally:
            alive -= 1
        return item * 7

    watched = Watched(Tree())
    with trio.fail_after(DEADLOCK):
        if tree["front"] == "run_stream":
            results = await run_stream(watched, run, window=window)
        else:
            ordered = tree["front"] == "ordered"
            by_index: dict[int, int] = {}
            async with open_stream(watched, run, window=window, ordered=ordered) as stream:
                async for done in stream:
                    assert done.item == watched.recordings[0].pulled[done.index]
                    assert not ordered or done.index == len(by_index)
                    by_index[done.index] = done.value
            results = [by_index[index] for index in range(len(by_index))]
    recording = watched.recordings[0]

    assert sorted(started) == list(range(len(nodes))), "every item runs exactly once"
    assert window is None or peak <= window, "the window holds"
    assert recording.pulled == added, "work is handed out in the order it was added"
    assert results == [item * 7 for item in recording.pulled], "results in pull order"
    assert idle_violations == []
    assert recording.close_count == 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_random_trees_of_follow_ups(tree: dict[str, Any]) -> None:
    trio.run(play, tree, clock=trio.testing.MockClock(autojump_threshold=0))


@pytest.mark.parametrize("window", [2, None])
async def test_work_added_after_a_drain_request_does_not_run(
    autojump_clock: Any, window: int | None
) -> None:
    drain = Drain()

    async def run(item: object) -> object:
        await trio.sleep(1)
        if item == 0:
            drain.request()
            enqueue("after the drain")
        return item

    with trio.fail_after(100):
        results = await run_stream(SampleSource.from_items([0]), run, window=window, drain=drain)
    assert results == [0]


# -- abandoned work: on_abandoned() -----------------------------------------------------


class Abandons(SampleSource[str, str]):
    """Records what it hears of; ``more`` maps an item to its follow-ups."""

    def __init__(self, seed: Sequence[str], more: dict[str, list[str]] | None = None) -> None:
        self.seed = list(seed)
        self.more = more or {}
        self.abandoned: list[str] = []

    def initial(self) -> Sequence[str]:
        return self.seed

    async def on_complete(self, item: str, result: str) -> Sequence[str] | None:
        return self.more.get(item)

    async def on_abandoned(self, item: str) -> None:
        self.abandoned.append(item)


@pytest.mark.parametrize("window", [1, 2, None])
async def test_a_drain_reports_every_accepted_item_left_unstarted_once(
    autojump_clock: Any, window: int | None
) -> None:
    drain = Drain()

    async def run(item: str) -> str:
        if item == "a":
            drain.request("stop")
            await trio.sleep(1)
            enqueue("enqueued late")  # added by a run still finishing
        else:
            await trio.sleep(2)
        return item

    # "a" adds a follow-up too; "b" (if it started) adds one.
    source = Abandons(["a", "b", "c", "d"], {"a": ["follow-up"], "b": ["b's follow-up"]})
    results = await run_stream(source, run, window=window, drain=drain)
    started = set(results)
    accepted = {"a", "b", "c", "d", "enqueued late", "follow-up"} | (
        {"b's follow-up"} if "b" in started else set()
    )
    assert sorted(source.abandoned) == sorted(accepted - started)
    assert len(source.abandoned) == len(set(source.abandoned))


async def test_a_failure_or_a_cancellation_reports_nothing(autojump_clock: Any) -> None:
    async def failing(item: str) -> str:
        if item == "a":
            await trio.sleep(1)
            raise ProbeError("a")
        await trio.sleep(5)
        return item

    source = Abandons(["a", "b", "c"])
    with pytest.raises(ProbeError):
        await run_stream(source, failing, window=2)
    assert source.abandoned == []

    async def slow(item: str) -> str:
        await trio.sleep(5)
        return item

    source = Abandons(["a", "b", "c"])
    with trio.move_on_after(1):
        await run_stream(source, slow, window=1, drain=Drain())
    assert source.abandoned == []


async def test_a_drain_then_a_failure_reports_nothing_more(autojump_clock: Any) -> None:
    drain = Drain()

    async def run(item: str) -> str:
        if item == "a":
            await trio.sleep(1)
            drain.request()
            await trio.sleep(1)
            raise ProbeError("after the drain")
        with trio.CancelScope(shield=True):
            await trio.sleep(3)  # outlasts the failure, then adds work
        enqueue("late")
        return item

    source = Abandons(["a", "b", "c"])
    with pytest.raises(ProbeError):
        await run_stream(source, run, window=2, drain=drain)
    # c was buffered at the drain and reported then; "late" came after the failure.
    assert source.abandoned == ["c"]


async def test_enqueue_is_refused_inside_on_abandoned_and_once_a_drained_stream_is_idle(
    autojump_clock: Any,
) -> None:
    drain = Drain()
    refused: list[str] = []
    later = trio.Event()

    async def abandoned(item: str) -> None:
        try:
            enqueue("from on_abandoned")
        except RuntimeError as exc:
            refused.append(str(exc))

    async with trio.open_nursery() as outer:

        async def linger() -> None:
            await later.wait()
            try:
                enqueue("too late")  # the stream has ended: nobody could hear of it
            except RuntimeError as exc:
                refused.append(str(exc))

        async def run(item: str) -> str:
            drain.request()
            outer.start_soon(linger)  # a task that outlives its run
            return item

        source = SampleSource[str, str].from_items(["a", "b"], on_abandoned=abandoned)
        assert await run_stream(source, run, window=1, drain=drain) == ["a"]
        later.set()
    assert len(refused) == 2
    assert "inside a run" in refused[0]
    assert "has ended" in refused[1]


def test_from_items_checks_on_abandoned() -> None:
    with pytest.raises(TypeError, match="on_abandoned"):
        SampleSource.from_items([], on_abandoned=3)  # type: ignore[call-overload]


@pytest.mark.parametrize(("bad", "error"), [(-1, ValueError), (True, TypeError), (2.0, TypeError)])
async def test_a_rollout_that_is_not_a_count_is_refused_by_enqueue(
    bad: Any, error: type[Exception]
) -> None:
    async def run(item: int) -> int:
        enqueue(item + 1, rollout=bad)
        return item

    with pytest.raises(error, match=r"rollout must be an int >= 0 or None, not"):
        await run_stream(SampleSource.from_items([1]), run, window=1)
