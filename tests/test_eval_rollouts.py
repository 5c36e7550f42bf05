"""Issue 13 in an evaluation: single rollouts through ``enqueue(rollout=)``, and abandoned work.

The peer's own claims, ported: a group of four rollouts of one task runs
together and grows by two when the fourth completes; each ``(task id,
rollout)`` is reserved once, in whichever order it is added; ``-n`` counts
tasks; an orchestrating run that waits for work it enqueued hears
``on_abandoned`` after a drain instead of hanging.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from sluicegate import Drain, SampleSource, Task, enqueue, run_stream
from sluicegate.eval import current_rollout, evaluate
from sluicegate.eval._slots import TaskCapWarning


def rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def run_json(out: Path) -> dict[str, Any]:
    return json.loads((out / "run.json").read_text())  # type: ignore[no-any-return]


def keys(out: Path) -> list[tuple[str, int]]:
    return sorted((row["task_id"], row["rollout"]) for row in rows(out) if row["status"] == "ok")


class Env:
    def __init__(self, taskset: Any, run: Any) -> None:
        self.taskset = taskset
        self.run = run


async def test_a_group_of_four_runs_together_and_grows_by_two(
    tmp_path: Path, autojump_clock: Any
) -> None:
    all_started = trio.Event()
    alive = peak = started = 0
    order: list[tuple[str, int]] = []

    async def run(task: Task) -> int:
        nonlocal alive, peak, started
        alive += 1
        started += 1
        peak = max(peak, alive)
        order.append(("start", current_rollout()))
        if started == 4:
            all_started.set()
        # The first four hold each other up: they must be running together.
        with trio.fail_after(10):
            await all_started.wait()
        await trio.sleep(1 + current_rollout())
        alive -= 1
        return current_rollout()

    completed = 0

    async def on_complete(task: Task, result: int) -> None:
        nonlocal completed
        assert current_rollout() == result
        completed += 1
        order.append(("done", result))
        if completed == 4:
            enqueue(task, rollout=4)
            enqueue(task, rollout=5)

    source = SampleSource[Task, int].from_items(
        [Task(input="2+2", id="g")], on_complete=on_complete
    )
    report = await evaluate(Env(source, run), rollouts=4, concurrency=8, output_dir=tmp_path)
    assert report.stop_reason == "completed" and report.ok == 6
    assert keys(tmp_path) == [("g", k) for k in range(6)]
    assert peak == 4
    # The two new rollouts start only once the fourth has completed.
    assert order.index(("start", 4)) > order.index(("done", 3))
    assert run_json(tmp_path)["counts"]["planned"] == 6


async def _duplicate_run(tmp_path: Path, rollouts: int, adds: list[dict[str, Any]]) -> Any:
    """Seed task ``t``; its first rollout enqueues each of ``adds`` in turn."""
    added = False

    async def run(task: Task) -> str:
        nonlocal added
        if not added:
            added = True
            for add in adds:
                enqueue(Task(input="again", id="t"), **add)
        return "ok"

    source = SampleSource[Task, str].from_items([Task(input="seed", id="t")])
    return await evaluate(Env(source, run), rollouts=rollouts, output_dir=tmp_path)


@pytest.mark.parametrize(
    ("rollouts", "adds", "duplicate"),
    [
        # Whole first (the seed), then a rollout it already holds.
        (3, [{"rollout": 1}], True),
        # Whole first, then one past -r: a new rollout.
        (3, [{"rollout": 3}], False),
        # A single rollout twice.
        (1, [{"rollout": 4}, {"rollout": 4}], True),
        # The whole task again: every rollout it would hold is taken.
        (2, [{}], True),
        # The seed holds rollout 0 of -r 1; rollouts 1 and 2 are new, then the
        # whole task again would take 0 a second time.
        (1, [{"rollout": 1}, {"rollout": 2}, {}], True),
    ],
)
async def test_each_rollout_is_reserved_once_in_either_order(
    tmp_path: Path, autojump_clock: Any, rollouts: int, adds: list[dict[str, Any]], duplicate: bool
) -> None:
    report = await _duplicate_run(tmp_path, rollouts, adds)
    if duplicate:
        assert report.stop_reason == "failed"
        assert "duplicate" in str(report.error)
    else:
        assert report.stop_reason == "completed"
        assert keys(tmp_path) == [("t", k) for k in range(rollouts + 1)]


async def test_a_single_rollout_first_then_the_whole_task(
    tmp_path: Path, autojump_clock: Any
) -> None:
    # The single rollout comes first (from the seed's run), the whole task
    # after it (from on_complete): rollout 1 of -r 2 is then taken twice.
    async def run(task: Task) -> str:
        if task.input == "seed":
            enqueue(Task(input="x", id="x"), rollout=1)
        return "ok"

    async def on_complete(task: Task, result: str) -> Sequence[Task] | None:
        return [Task(input="x", id="x")] if task.input == "seed" else None

    source = SampleSource[Task, str].from_items([Task(input="seed")], on_complete=on_complete)
    report = await evaluate(Env(source, run), rollouts=2, output_dir=tmp_path, concurrency=1)
    assert report.stop_reason == "failed"
    assert "duplicate rollout 1 of task 'x'" in str(report.error)


@pytest.mark.parametrize("bad", [-1, True, 1.0, "1"])
async def test_an_invalid_rollout_raises_from_enqueue(
    tmp_path: Path, autojump_clock: Any, bad: Any
) -> None:
    caught: list[BaseException] = []

    async def run(task: Task) -> str:
        try:
            enqueue(task, rollout=bad)
        except (TypeError, ValueError) as exc:
            caught.append(exc)
        return "ok"

    source = SampleSource[Task, str].from_items([Task(input=1)])
    report = await evaluate(Env(source, run), output_dir=tmp_path)
    assert report.stop_reason == "completed"
    [error] = caught
    assert "rollout must be an int >= 0 or None, not" in str(error)


async def test_rollout_outside_an_evaluation_is_refused() -> None:
    async def run(item: int) -> int:
        enqueue(item + 1, rollout=0)
        return item

    with pytest.raises(RuntimeError, match=r"rollout=.*only works inside an evaluation"):
        await run_stream(SampleSource.from_items([1]), run, window=2)


async def test_n_counts_tasks_not_rollouts(tmp_path: Path, autojump_clock: Any) -> None:
    async def run(task: Task) -> str:
        if current_rollout() == 0:
            enqueue(task, rollout=7)  # another rollout of an admitted task: runs
            enqueue(Task(input="new"))  # a new task past -n 1: dropped
        return str(task.input)

    source = SampleSource[Task, str].from_items([Task(input="only", id="a")])
    with pytest.warns(TaskCapWarning):
        report = await evaluate(Env(source, run), num_tasks=1, rollouts=2, output_dir=tmp_path)
    assert report.stop_reason == "completed"
    assert keys(tmp_path) == [("a", 0), ("a", 1), ("a", 7)]
    assert run_json(tmp_path)["counts"]["planned"] == 3


async def test_single_rollouts_are_retried_like_any_rollout(
    tmp_path: Path, autojump_clock: Any
) -> None:
    attempts: dict[int, int] = {}

    async def run(task: Task) -> int:
        rollout = current_rollout()
        attempts[rollout] = attempts.get(rollout, 0) + 1
        if rollout == 0:
            enqueue(task, rollout=3)
        if rollout == 3 and attempts[3] == 1:
            raise ConnectionError("flaky")
        return rollout

    source = SampleSource[Task, int].from_items([Task(input="q", id="q")])
    report = await evaluate(Env(source, run), retries=1, output_dir=tmp_path)
    assert report.ok == 2
    assert {row["rollout"]: row["attempts"] for row in rows(tmp_path)} == {0: 1, 3: 2}


# -- abandoned work ------------------------------------------------------------------------


class Orchestrated(SampleSource[Task, Any]):
    """One orchestrator task enqueues three pieces of work and waits for each to settle."""

    def __init__(self) -> None:
        self.settled: dict[str, trio.Event] = {}
        self.outcomes: dict[str, str] = {}
        self.abandoned: list[tuple[str, int]] = []

    def initial(self) -> Sequence[Task]:
        return [Task(input="orchestrate", id="boss")]

    def _settle(self, task: Task, how: str) -> None:
        self.outcomes[str(task.id)] = how
        self.settled[str(task.id)].set()

    async def on_complete(self, item: Task, result: Any) -> None:
        if item.id != "boss":
            self._settle(item, "done")

    async def on_abandoned(self, item: Task) -> None:
        self.abandoned.append((str(item.id), current_rollout()))
        self._settle(item, "abandoned")


async def test_an_orchestrating_run_hears_on_abandoned_after_a_drain(
    tmp_path: Path, autojump_clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    drain = Drain()
    source = Orchestrated()

    async def run(task: Task) -> Any:
        if task.id != "boss":
            drain.request("enough")  # the first piece of work drains the run
            await trio.sleep(1)
            return "work"
        work = [Task(input=n, id=f"w{n}") for n in range(3)]
        for piece in work:
            source.settled[str(piece.id)] = trio.Event()
        enqueue(*work)
        for piece in work:
            await source.settled[str(piece.id)].wait()  # hangs without on_abandoned
        return dict(source.outcomes)

    with trio.fail_after(100):
        report = await evaluate(
            Env(source, run), concurrency=2, output_dir=tmp_path, drain=drain, display="plain"
        )
    assert report.stop_reason == "interrupted"
    assert "abandoned: 2: task w1 rollout 0, task w2 rollout 0\n" in capsys.readouterr().out
    assert source.outcomes == {"w0": "done", "w1": "abandoned", "w2": "abandoned"}
    assert source.abandoned == [("w1", 0), ("w2", 0)]
    record = run_json(tmp_path)
    assert record["counts"]["abandoned"] == 2
    assert {row["task_id"] for row in rows(tmp_path)} == {"boss", "w0"}


@pytest.mark.parametrize(
    ("limits", "dropped"),
    [
        ({"num_tasks": 2}, [("w1", 0), ("w1", 1), ("w2", 0), ("w2", 1)]),
        ({"ids": ["boss", "w0"]}, [("w1", 0), ("w1", 1), ("w2", 0), ("w2", 1)]),
    ],
)
async def test_tasks_dropped_by_the_cap_or_the_filter_are_reported_as_abandoned(
    tmp_path: Path, autojump_clock: Any, limits: dict[str, Any], dropped: list[tuple[str, int]]
) -> None:
    source = Orchestrated()
    waited: list[str] = []

    async def run(task: Task) -> Any:
        if task.id != "boss" or current_rollout() == 1:
            await trio.sleep(1)
            return "work"
        work = [Task(input=n, id=f"w{n}") for n in range(3)]
        for piece in work:
            source.settled[str(piece.id)] = trio.Event()
        enqueue(*work)  # accepted, though -n (or --id) lets only w0 run
        for piece in work:
            await source.settled[str(piece.id)].wait()  # hangs unless w1, w2 are reported
            waited.append(str(piece.id))
        return dict(source.outcomes)

    with trio.fail_after(100), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = await evaluate(Env(source, run), rollouts=2, output_dir=tmp_path, **limits)
    assert (report.stop_reason, report.passed) == ("completed", True), report.error
    assert waited == ["w0", "w1", "w2"]
    assert sorted(source.abandoned) == dropped
    assert source.outcomes == {"w0": "done", "w1": "abandoned", "w2": "abandoned"}
    assert keys(tmp_path) == [("boss", 0), ("boss", 1), ("w0", 0), ("w0", 1)]
    # Dropped tasks were never planned: they are not counted as abandoned rollouts.
    assert run_json(tmp_path)["counts"]["abandoned"] == 0
    cap = [TaskCapWarning] if "num_tasks" in limits else []
    assert [w.category for w in caught] == cap


async def test_the_progress_bound_is_dropped_once_a_rollout_past_r_is_added(
    tmp_path: Path, autojump_clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    async def run(task: Task) -> int:
        k = current_rollout()
        await trio.sleep(1 + k)
        if k < 8:
            enqueue(task, rollout=k + 4)
        return k

    source = SampleSource[Task, int].from_items([Task(input=1, id="a")])
    report = await evaluate(
        Env(source, run), num_tasks=1, rollouts=4, output_dir=tmp_path, display="plain"
    )
    assert (report.stop_reason, report.ok) == ("completed", 12)
    lines = re.findall(r"^(\d+)/(\d+)\+( \(<= (\d+)\))? done", capsys.readouterr().out, re.M)
    assert lines, "no progress line"
    for done, planned, _, bound in lines:
        # A bound is only shown while it holds: never below what is planned.
        assert not bound or int(done) <= int(planned) <= int(bound), lines
    assert any(not bound and int(planned) > 4 for _, planned, _, bound in lines), lines
