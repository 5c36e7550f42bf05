"""``sluicegate eval`` in-process: planning, limits, errors, retries, dynamic sources, resume.

Every test that runs an evaluation takes ``autojump_clock``: rollout durations,
feed gaps and retry backoffs cost no real time, and a deadlock would show as
a jump to a far-off deadline instead of a hang.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from sluicegate import Drain, SampleSource, Task, Taskset, enqueue
from sluicegate.eval import EvalReport, evaluate
from sluicegate.eval._cli import arguments, register
from sluicegate.eval._config import ErrorBudget, UsageError
from sluicegate.eval._format import read_results
from sluicegate.eval._slots import TaskCapWarning
from sluicegate.eval._target import resolve_target
from sluicegate.testing import RunProbe

EXAMPLES = Path(__file__).parent.parent / "examples"
ENVS = Path(__file__).parent / "eval_envs"


# -- helpers -------------------------------------------------------------------


def settings(out: Path, *argv: str, target: str = "tests/env.py:env") -> dict[str, Any]:
    """What the command line would hand evaluate() for ``argv``."""
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["eval", target, "-o", str(out), "--display", "none", *argv])
    return arguments(args)


def rows(out: Path) -> list[dict[str, Any]]:
    text = (out / "results.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def run_json(out: Path) -> dict[str, Any]:
    return json.loads((out / "run.json").read_text())  # type: ignore[no-any-return]


class Env:
    """A test environment: any taskset, a run that records what it saw."""

    def __init__(self, taskset: Any, run: Any = None, score: Any = None) -> None:
        self.taskset = taskset
        self.seen: list[Any] = []
        self._run = run
        if score is not None:
            self.score = score

    async def run(self, task: Any) -> Any:
        self.seen.append(task)
        if self._run is not None:
            return await self._run(task)
        await trio.sleep(1)
        return task.input if isinstance(task, Task) else task


async def go(out: Path, obj: Any, *argv: str, **kwargs: Any) -> EvalReport:
    return await evaluate(**{**settings(out, *argv), "env": obj, **kwargs})


COUNTS = {"planned": 0, "ok": 0, "error": 0, "resumed": 0, "abandoned": 0, "cut_short": 0}


def counts(**changed: int) -> dict[str, int]:
    return {**COUNTS, **changed}


class Feed(Taskset[Task]):
    """A live feed that never ends: one task every ``gap`` seconds; counts its pulls."""

    def __init__(self, gap: float = 0.2, end: int | None = None) -> None:
        self.gap = gap
        self.end = end
        self.pulls = 0
        self.closed = False

    async def stream(self) -> AsyncIterator[Task]:
        try:
            for number in itertools.count(1):
                if self.end is not None and number > self.end:
                    return
                self.pulls += 1
                await trio.sleep(self.gap)
                yield Task(input=number)
        finally:
            self.closed = True


class Infinite(Taskset[Task]):
    infinite = True

    def load(self) -> Any:
        return (Task(input=n) for n in itertools.count(1))


def static(count: int, **fields: Any) -> Taskset[Task]:
    return Taskset.from_iterable([Task(input=n, **fields) for n in range(1, count + 1)])


# -- static sets -----------------------------------------------------------------


async def test_static_set_writes_one_row_per_rollout(tmp_path: Path, autojump_clock: Any) -> None:
    env = Env(static(5), score=lambda task, result: float(result % 2))
    outcome = await go(tmp_path, env, "-n", "3", "-r", "2")
    assert outcome.exit_status == 0
    got = rows(tmp_path)
    assert sorted((r["task_id"], r["rollout"]) for r in got) == [
        (t, r) for t in ("1", "2", "3") for r in (0, 1)
    ]
    assert set(got[0]) >= {
        "task_id",
        "rollout",
        "status",
        "result",
        "score",
        "error",
        "attempts",
        "started_at",
        "duration_s",
    }
    assert all(r["status"] == "ok" and r["error"] is None and r["attempts"] == 1 for r in got)
    assert all(r["duration_s"] == pytest.approx(1.0) for r in got)
    record = run_json(tmp_path)
    assert record["stop_reason"] == "completed"
    assert record["counts"] == counts(planned=6, ok=6)
    assert record["scores"] == {"score": pytest.approx(4 / 6)}
    assert record["config"]["num_tasks"] == 3
    # The run saw tasks carrying the ids the rows name.
    assert {task.id for task in env.seen} == {"1", "2", "3"}


async def test_ids_continue_the_numbering_around_explicit_ones(
    tmp_path: Path, autojump_clock: Any
) -> None:
    tasks = [Task(input="a"), Task(input="b", id="2"), Task(input="c"), Task(input="d", id=1)]
    env = Env(Taskset.from_iterable(tasks))
    await go(tmp_path, env)
    ids = {r["result"]: r["task_id"] for r in rows(tmp_path)}
    assert ids == {"a": "3", "b": "2", "c": "4", "d": "1"}


async def test_static_duplicate_ids_are_refused_before_any_rollout(
    tmp_path: Path, autojump_clock: Any
) -> None:
    env = Env(Taskset.from_iterable([Task(input=1, id="x"), Task(input=2, id="x")]))
    with pytest.raises(UsageError, match="duplicate"):
        await go(tmp_path / "out", env)
    assert env.seen == []


@pytest.mark.parametrize("kind", ["feed", "infinite"])
async def test_id_filter_on_an_endless_source_stops_after_the_last_wanted_id(
    tmp_path: Path, autojump_clock: Any, kind: str
) -> None:
    taskset = Feed() if kind == "feed" else Infinite()
    with trio.fail_after(1_000):
        outcome = await go(tmp_path, Env(taskset), "-n", "10", "--id", "3", "--id", "7")
    assert outcome.exit_status == 0
    assert sorted(r["task_id"] for r in rows(tmp_path)) == ["3", "7"]
    if isinstance(taskset, Feed):
        assert taskset.pulls == 7
        assert taskset.closed


@pytest.mark.parametrize("kind", ["feed", "infinite"])
async def test_with_id_n_bounds_the_tasks_read_and_names_the_ids_never_seen(
    tmp_path: Path, autojump_clock: Any, kind: str
) -> None:
    taskset = Feed() if kind == "feed" else Infinite()
    with trio.fail_after(1_000), pytest.warns(UserWarning) as caught:
        outcome = await go(tmp_path, Env(taskset), "-n", "5", "--id", "3", "--id", "nope")
    assert [r["task_id"] for r in rows(tmp_path)] == ["3"]
    assert outcome.stop_reason == "completed"
    [warning] = [w for w in caught if "--id" in str(w.message)]
    assert str(warning.message) == "--id matched no task among the 5 read for: nope"
    if isinstance(taskset, Feed):
        assert (taskset.pulls, taskset.closed) == (5, True)


async def test_id_filter_and_shuffle_on_a_static_set(tmp_path: Path, autojump_clock: Any) -> None:
    env = Env(static(10))
    await go(tmp_path / "a", env, "--id", "7", "--id", "3")
    assert sorted(r["task_id"] for r in rows(tmp_path / "a")) == ["3", "7"]
    # The shuffled head is deterministic for a seed and keeps each task's id.
    first = Env(static(10))
    await go(tmp_path / "b", first, "--shuffle", "4", "-n", "4", "-c", "1")
    second = Env(static(10))
    await go(tmp_path / "c", second, "--shuffle", "4", "-n", "4", "-c", "1")
    assert first.seen == second.seen
    assert [t.input for t in first.seen] != [1, 2, 3, 4]
    assert all(t.id == str(t.input) for t in first.seen)


async def test_system_prompt_reaches_every_read_path(tmp_path: Path, autojump_clock: Any) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Be brief.")
    sources: list[Any] = [
        static(2),
        Feed(gap=0),
        SampleSource.from_items([Task(input=1), Task(input=2)]),
    ]
    for number, taskset in enumerate(sources):
        env = Env(taskset)
        await go(tmp_path / str(number), env, "-n", "2", "--system-prompt", str(prompt))
        assert [t.system_prompt for t in env.seen] == ["Be brief.", "Be brief."]


# -- streams ---------------------------------------------------------------------


async def test_n_on_a_never_ending_feed_gives_exactly_n_rows(
    tmp_path: Path, autojump_clock: Any
) -> None:
    feed = Feed()
    outcome = await go(tmp_path, Env(feed), "-n", "3")
    assert outcome.exit_status == 0
    assert len(rows(tmp_path)) == 3
    assert feed.pulls == 3  # never an (n+1)th
    assert feed.closed
    assert run_json(tmp_path)["counts"]["planned"] == 3


async def test_n_zero_is_refused_before_the_feed_starts(
    tmp_path: Path, autojump_clock: Any
) -> None:
    # A run that evaluates nothing must not pass a gate (review N5).
    feed = Feed()
    with pytest.raises(ValueError, match=r"-n/--num-tasks must be an int >= 1, not 0"):
        await evaluate(Env(feed), num_tasks=0, output_dir=tmp_path / "out")
    assert feed.pulls == 0
    assert not (tmp_path / "out").exists()


async def test_the_live_feed_example_stops_after_n(tmp_path: Path, autojump_clock: Any) -> None:
    env = resolve_target(f"{EXAMPLES / 'live_feed.py'}:env")
    outcome = await go(tmp_path, env, "-n", "3", "-r", "2")
    assert outcome.exit_status == 0
    assert len(rows(tmp_path)) == 6
    assert run_json(tmp_path)["scores"] == {"score": 1.0}


async def test_concurrency_bounds_rollouts_and_the_feed_is_not_read_ahead(
    tmp_path: Path, autojump_clock: Any
) -> None:
    feed = Feed(gap=0)
    probe: RunProbe[Task] = RunProbe(durations=lambda task: 1 + task.input % 3)
    pulls_at_start: list[tuple[int, int]] = []

    async def run(task: Task) -> Any:
        pulls_at_start.append((task.input, feed.pulls))
        return await probe(task)

    await go(tmp_path, Env(feed, run), "-n", "5", "-r", "4", "-c", "3")
    assert len(rows(tmp_path)) == 20
    assert probe.peak == 3
    # A task is pulled only when the window wants its first rollout.
    assert all(pulls == number for number, pulls in pulls_at_start)


async def test_static_concurrency_bound_with_rollouts(tmp_path: Path, autojump_clock: Any) -> None:
    probe: RunProbe[Task] = RunProbe(durations=lambda task: 0.5 + task.input % 2)
    await go(tmp_path, Env(static(6), probe), "-r", "4", "-c", "5")
    assert len(rows(tmp_path)) == 24
    assert probe.peak == 5


@pytest.mark.parametrize(
    ("taskset", "argv", "message"),
    [
        (Feed(), [], "-n/--num-tasks"),
        (Infinite(), [], "-n/--num-tasks"),
        (Feed(), ["-n", "2", "--shuffle", "1"], "--shuffle"),
        (Infinite(), ["-n", "2", "--shuffle", "1"], "--shuffle"),
        (Feed(), ["-n", "2", "--resume", "{out}"], "--resume"),
        (SampleSource.from_items([Task(input=1)]), ["--shuffle", "1"], "--shuffle"),
        (SampleSource.from_items([Task(input=1)]), ["--resume", "{out}"], "--resume"),
    ],
)
async def test_refusals_happen_before_any_rollout(
    tmp_path: Path, autojump_clock: Any, taskset: Any, argv: list[str], message: str
) -> None:
    out = tmp_path / "out"
    env = Env(taskset)
    with pytest.raises(UsageError, match=message) as info:
        await go(out, env, *[arg.format(out=out) for arg in argv])
    assert env.seen == []
    assert not out.exists()
    if isinstance(taskset, Feed):
        assert taskset.pulls == 0
    if "--shuffle" in argv or "--resume" in argv:
        assert "SampleSource" in str(info.value) or "taskset" in str(info.value)


async def test_infinite_static_set_takes_n_lazily(tmp_path: Path, autojump_clock: Any) -> None:
    await go(tmp_path, Env(Infinite()), "-n", "4")
    assert sorted(r["result"] for r in rows(tmp_path)) == [1, 2, 3, 4]


# -- errors, retries, the error budget ----------------------------------------------


def failing(bad: Any, duration: float = 1.0) -> Any:
    async def run(task: Task) -> Any:
        await trio.sleep(duration)
        if bad(task.input):
            raise RuntimeError(f"task {task.input} broke")
        return task.input

    return run


async def test_the_first_error_aborts_by_default(tmp_path: Path, autojump_clock: Any) -> None:
    env = Env(static(10), failing(lambda n: n == 3))
    outcome = await go(tmp_path, env, "-c", "1")
    assert outcome.exit_status == 1
    got = rows(tmp_path)
    assert [r["status"] for r in got] == ["ok", "ok", "error"]
    assert got[-1]["error"]["type"] == "RuntimeError"
    assert got[-1]["error"]["message"] == "task 3 broke"
    assert got[-1]["result"] is None
    record = run_json(tmp_path)
    assert record["stop_reason"] == "failed"
    assert record["counts"]["error"] == 1


async def test_an_absolute_count_aborts_mid_run_on_a_stream(
    tmp_path: Path, autojump_clock: Any
) -> None:
    feed = Feed()
    outcome = await go(
        tmp_path,
        Env(feed, failing(lambda n: n % 2 == 0)),
        "-n",
        "20",
        "-c",
        "1",
        "--fail-on-error",
        "3",
    )
    assert outcome.exit_status == 1
    statuses = [r["status"] for r in rows(tmp_path)]
    assert statuses.count("error") == 3
    assert len(statuses) == 6  # stopped at the 3rd error (task 6), long before task 20
    assert feed.closed


async def test_a_fraction_aborts_a_static_set_once_it_cannot_pass(
    tmp_path: Path, autojump_clock: Any
) -> None:
    env = Env(static(10), failing(lambda n: n <= 4))
    outcome = await go(tmp_path, env, "-c", "1", "--fail-on-error", "0.2")
    assert outcome.exit_status == 1
    # 3 errors exceed 0.2 of 10: known without running the other 7.
    assert [r["status"] for r in rows(tmp_path)] == ["error"] * 3


async def test_a_fraction_on_a_growing_total_is_judged_at_the_end(
    tmp_path: Path, autojump_clock: Any
) -> None:
    # Every other task fails: 5 of 10. The early errors exceed any fraction of the
    # tasks seen so far, but a stream's total is only known at the end.
    env = Env(Feed(), failing(lambda n: n % 2 == 1))
    outcome = await go(tmp_path / "a", env, "-n", "10", "--fail-on-error", "0.4")
    assert outcome.exit_status == 1
    assert len(rows(tmp_path / "a")) == 10
    assert run_json(tmp_path / "a")["stop_reason"] == "failed"
    env = Env(Feed(), failing(lambda n: n % 2 == 1))
    outcome = await go(tmp_path / "b", env, "-n", "10", "--fail-on-error", "0.5")
    assert outcome.exit_status == 0
    assert run_json(tmp_path / "b")["counts"] == counts(planned=10, ok=5, error=5)


async def test_a_fraction_on_a_sample_source_is_judged_at_the_end(
    tmp_path: Path, autojump_clock: Any
) -> None:
    batches = [[Task(input=n) for n in range(2, 5)]]

    async def more() -> Sequence[Task] | None:
        return batches.pop() if batches else None

    # When task 1 fails it is the only task so far: 1 error of 1 planned. The
    # source adds three more afterwards, and 1 of 4 is within 0.5.
    source = SampleSource.from_items([Task(input=1)], next=more)
    env = Env(source, failing(lambda n: n == 1))
    outcome = await go(tmp_path / "a", env, "--fail-on-error", "0.5", "-c", "1")
    assert outcome.exit_status == 0
    assert len(rows(tmp_path / "a")) == 4
    batches = [[Task(input=n) for n in range(2, 5)]]
    source = SampleSource.from_items([Task(input=1)], next=more)
    env = Env(source, failing(lambda n: n <= 3))
    outcome = await go(tmp_path / "b", env, "--fail-on-error", "0.5", "-c", "1")
    assert outcome.exit_status == 1
    assert len(rows(tmp_path / "b")) == 4


def test_error_budget_parsing() -> None:
    assert ErrorBudget.parse("0").crossed(1, None)
    assert not ErrorBudget.parse("5").crossed(4, None)
    assert ErrorBudget.parse("5").crossed(5, None)
    assert not ErrorBudget.parse("0.1").crossed(1, 10)
    assert ErrorBudget.parse("0.1").crossed(2, 10)
    assert not ErrorBudget.parse("0.1").crossed(100, None)
    for bad in ("1.0", "-1", "1.5", "x", "0.0"):
        with pytest.raises(UsageError, match="--fail-on-error"):
            ErrorBudget.parse(bad)


async def test_retries_run_the_rollout_again_with_backoff(
    tmp_path: Path, autojump_clock: Any
) -> None:
    attempts: dict[int, int] = {}

    async def flaky(task: Task) -> Any:
        attempts[task.input] = attempts.get(task.input, 0) + 1
        if attempts[task.input] <= 2:
            raise ValueError(f"attempt {attempts[task.input]}")
        return "fine"

    outcome = await go(tmp_path / "a", Env(static(2), flaky), "--retries", "2")
    assert outcome.exit_status == 0
    for row in rows(tmp_path / "a"):
        assert row["status"] == "ok"
        assert row["attempts"] == 3
        assert [(e["type"], e["message"]) for e in row["earlier_errors"]] == [
            ("ValueError", "attempt 1"),
            ("ValueError", "attempt 2"),
        ]
        # Full jitter: each wait is up to 0.1 s, then 0.2 s, on the mock clock.
        assert 0 <= row["duration_s"] <= 0.1 + 0.2
    attempts.clear()
    outcome = await go(tmp_path / "b", Env(static(1), flaky), "--retries", "1")
    assert outcome.exit_status == 1
    [row] = rows(tmp_path / "b")
    assert row["status"] == "error"
    assert row["attempts"] == 2
    assert (row["error"]["type"], row["error"]["message"]) == ("ValueError", "attempt 2")
    assert [(e["type"], e["message"]) for e in row["earlier_errors"]] == [
        ("ValueError", "attempt 1")
    ]


async def test_a_failing_score_is_an_error_and_results_are_unstructured(
    tmp_path: Path, autojump_clock: Any
) -> None:
    import attrs

    @attrs.frozen
    class Answer:
        text: str
        tokens: list[int]

    async def run(task: Task) -> Answer:
        return Answer(text=str(task.input), tokens=[1, 2])

    def score(task: Task, result: Answer) -> dict[str, float]:
        if task.input == 2:
            raise KeyError("no grader")
        return {"len": len(result.text)}

    outcome = await go(tmp_path, Env(static(2), run, score), "--fail-on-error", "1", "-c", "1")
    assert outcome.exit_status == 1
    first, second = rows(tmp_path)
    assert first["result"] == {"text": "1", "tokens": [1, 2]}
    assert first["score"] == {"len": 1.0}
    assert second["status"] == "error" and second["error"]["type"] == "KeyError"


# -- dynamic sources -------------------------------------------------------------


class Tree(SampleSource[Task, Any]):
    """Each task ``n`` (below ``depth``) is followed by two children; counts next() calls."""

    def __init__(self, seed: Sequence[Task], depth: int = 3) -> None:
        self.seed = list(seed)
        self.depth = depth
        self.next_calls = 0

    def initial(self) -> Sequence[Task]:
        return self.seed

    async def next(self) -> Sequence[Task] | None:
        self.next_calls += 1
        return None

    async def on_complete(self, item: Task, result: Any) -> Sequence[Task] | None:
        level = item.metadata.get("level", 0)
        if level + 1 >= self.depth:
            return None
        return [Task(input=f"{item.input}.{k}", metadata={"level": level + 1}) for k in (1, 2)]


async def test_dynamic_ids_rollouts_and_growing_total(tmp_path: Path, autojump_clock: Any) -> None:
    source = Tree([Task(input="a"), Task(input="b", id="2")], depth=2)
    outcome = await go(tmp_path, Env(source), "-r", "2")
    assert outcome.exit_status == 0
    got = rows(tmp_path)
    by_input: dict[str, set[tuple[str, int]]] = {}
    for row in got:
        by_input.setdefault(row["result"], set()).add((row["task_id"], row["rollout"]))
    # Each of the 2 rollouts of a task adds its own two children.
    assert len(got) == 2 * 2 + 2 * 2 * 2 * 2
    assert by_input["a"] == {("1", 0), ("1", 1)}
    assert by_input["b"] == {("2", 0), ("2", 1)}
    ids = sorted({row["task_id"] for row in got}, key=int)
    assert ids == [str(n) for n in range(1, 11)]
    assert all(len(keys) >= 2 for keys in by_input.values())
    assert run_json(tmp_path)["counts"]["planned"] == len(got)


async def test_duplicate_ids_from_a_source_fail_the_run(
    tmp_path: Path, autojump_clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    async def on_complete(item: Task, result: Any) -> Sequence[Task]:
        return [Task(input="again", id="1")]

    source = SampleSource.from_items([Task(input="x", id="1")], on_complete=on_complete)
    outcome = await go(tmp_path, Env(source))
    assert outcome.exit_status == 1
    record = run_json(tmp_path)
    assert record["stop_reason"] == "failed"
    assert "duplicate" in record["error"]
    # Our own refusal is one line, not a traceback.
    assert "Traceback" not in capsys.readouterr().err


async def test_n_caps_added_tasks_with_one_warning(tmp_path: Path, autojump_clock: Any) -> None:
    source = Tree([Task(input="a")], depth=10)
    with pytest.warns(TaskCapWarning) as caught:
        outcome = await go(tmp_path, Env(source), "-n", "5")
    assert outcome.exit_status == 0
    assert len([w for w in caught if issubclass(w.category, TaskCapWarning)]) == 1
    assert len(rows(tmp_path)) == 5
    assert source.next_calls == 0  # the cap was reached: the source is not asked for more


async def test_a_seed_that_reaches_n_never_calls_next(tmp_path: Path, autojump_clock: Any) -> None:
    source = Tree([Task(input=n) for n in range(4)], depth=1)
    with pytest.warns(TaskCapWarning):
        await go(tmp_path / "a", Env(source), "-n", "3")
    assert len(rows(tmp_path / "a")) == 3
    assert source.next_calls == 0
    source = Tree([Task(input=n) for n in range(3)], depth=1)
    await go(tmp_path / "b", Env(source), "-n", "3")
    assert source.next_calls == 0
    source = Tree([Task(input=n) for n in range(3)], depth=1)
    await go(tmp_path / "c", Env(source), "-n", "4")
    assert source.next_calls == 1


async def test_id_filter_applies_to_added_tasks(tmp_path: Path, autojump_clock: Any) -> None:
    source = Tree([Task(input="a")], depth=3)
    # 1 adds 2 and 3; only 3 runs, and adds 4 and 5; only 5 runs. Filtered-out
    # tasks still take their ids, so ids do not depend on the filter.
    await go(tmp_path, Env(source), "--id", "1", "--id", "3", "--id", "5", "--id", "6")
    assert sorted(r["task_id"] for r in rows(tmp_path)) == ["1", "3", "5"]


async def test_tasks_from_enqueue_get_ids_and_rollouts(tmp_path: Path, autojump_clock: Any) -> None:
    enqueued = False

    async def run(task: Task) -> Any:
        nonlocal enqueued
        if not enqueued:
            enqueued = True
            enqueue(Task(input="child"), Task(input="named", id="n"))
        await trio.sleep(1)
        return task.input

    source = SampleSource.from_items([Task(input="parent")])
    outcome = await go(tmp_path, Env(source, run), "-r", "2")
    assert outcome.exit_status == 0
    got = sorted((r["result"], r["task_id"], r["rollout"]) for r in rows(tmp_path))
    assert got == [
        ("child", "2", 0),
        ("child", "2", 1),
        ("named", "n", 0),
        ("named", "n", 1),
        ("parent", "1", 0),
        ("parent", "1", 1),
    ]
    assert run_json(tmp_path)["counts"]["planned"] == 6


async def test_enqueued_tasks_are_capped(tmp_path: Path, autojump_clock: Any) -> None:
    async def run(task: Task) -> Any:
        enqueue(Task(input=task.input + 1))
        await trio.sleep(1)
        return task.input

    source = SampleSource.from_items([Task(input=1)])
    with pytest.warns(TaskCapWarning) as caught:
        outcome = await go(tmp_path, Env(source, run), "-n", "4")
    assert outcome.exit_status == 0
    assert len([w for w in caught if issubclass(w.category, TaskCapWarning)]) == 1
    assert sorted(r["result"] for r in rows(tmp_path)) == [1, 2, 3, 4]
    assert run_json(tmp_path)["counts"]["planned"] == 4


# -- drain and resume ------------------------------------------------------------


async def test_a_drain_lets_in_flight_rollouts_finish(tmp_path: Path, autojump_clock: Any) -> None:
    drain = Drain()

    async def run(task: Task) -> Any:
        if task.input == 3:
            drain.request("test")
        await trio.sleep(5)
        return task.input

    feed = Feed(gap=0)
    outcome = await go(tmp_path, Env(feed, run), "-n", "100", "-c", "4", drain=drain)
    assert outcome.exit_status == 130
    assert sorted(r["result"] for r in rows(tmp_path)) == [1, 2, 3]
    assert feed.closed
    record = run_json(tmp_path)
    assert record["stop_reason"] == "interrupted"
    assert record["ended_at"] is not None


async def test_a_drain_stops_a_growing_source(tmp_path: Path, autojump_clock: Any) -> None:
    drain = Drain()
    source = Tree([Task(input="a"), Task(input="b")], depth=20)

    started: list[str] = []

    async def run(task: Task) -> Any:
        started.append(task.input)
        if task.input == "a.1.1":
            drain.request("test")
        await trio.sleep(1)
        return task.input

    outcome = await go(tmp_path, Env(source, run), "-c", "2", drain=drain)
    assert outcome.exit_status == 130
    # Nothing started after the drain, and what was in flight finished.
    assert started[-1] == "a.1.1"
    assert sorted(r["result"] for r in rows(tmp_path)) == sorted(started)
    assert source.next_calls == 0


async def test_resume_skips_ok_rows_and_reruns_errors(tmp_path: Path, autojump_clock: Any) -> None:
    env = Env(static(6), failing(lambda n: n == 4))
    first = await go(tmp_path, env, "-r", "2", "--fail-on-error", "5")
    assert first.exit_status == 0
    assert len(rows(tmp_path)) == 12
    # Simulate a kill that tore the last line.
    with (tmp_path / "results.jsonl").open("a") as file:
        file.write('{"task_id": "5", "rollo')
    env = Env(static(6))
    with pytest.warns(UserWarning, match="torn last line"):
        second = await go(tmp_path, env, "-r", "2", "--resume", str(tmp_path))
    assert second.exit_status == 0
    assert sorted(t.input for t in env.seen) == [4, 4]
    got = rows(tmp_path)
    ok = [(r["task_id"], r["rollout"]) for r in got if r["status"] == "ok"]
    assert sorted(ok) == sorted((str(t), r) for t in range(1, 7) for r in (0, 1))
    assert (tmp_path / "results.torn").read_text() == '{"task_id": "5", "rollo\n'
    record = run_json(tmp_path)
    assert record["counts"] == counts(planned=12, ok=12, resumed=10)


async def test_resume_with_a_different_config_is_refused(
    tmp_path: Path, autojump_clock: Any
) -> None:
    await go(tmp_path, Env(static(3)), "-n", "2", "-r", "2")
    env = Env(static(3))
    with pytest.raises(UsageError, match=r"-n/--num-tasks: 2 in run.json, 3 now"):
        await go(tmp_path, env, "-n", "3", "--resume", str(tmp_path))
    with pytest.raises(UsageError, match=r"-r/--rollouts: 2 in run.json, 1 now"):
        await evaluate(env, rollouts=1, num_tasks=2, output_dir=tmp_path, resume=True)
    # -c may change on a resume, and flags left out come from run.json.
    await go(tmp_path, env, "-c", "7", "--resume", str(tmp_path))
    assert env.seen == []
    assert run_json(tmp_path)["config"]["concurrency"] == 7


async def test_an_output_path_that_is_a_file_is_a_usage_error(
    tmp_path: Path, autojump_clock: Any
) -> None:
    target = tmp_path / "afile"
    target.write_text("not a directory")
    with pytest.raises(UsageError, match="not a directory"):
        await go(target, Env(static(2)))


async def test_an_existing_results_file_is_not_overwritten(
    tmp_path: Path, autojump_clock: Any
) -> None:
    await go(tmp_path, Env(static(1)))
    with pytest.raises(UsageError, match="--resume"):
        await go(tmp_path, Env(static(1)))


def test_a_torn_line_that_is_complete_json_is_kept(tmp_path: Path) -> None:
    line = (
        '{"task_id": "1", "rollout": 0, "status": "ok", "result": 1, "score": null, '
        '"error": null, "attempts": 1, "started_at": "2026-01-01T00:00:00+00:00", '
        '"duration_s": 0.5}'
    )
    (tmp_path / "results.jsonl").write_text(line)
    previous = read_results(tmp_path)
    assert list(previous.ok) == [("1", 0)]
    assert previous.set_aside is None
    assert (tmp_path / "results.jsonl").read_text() == line + "\n"


# -- targets -----------------------------------------------------------------------


def test_target_resolution_errors_name_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"path/to/file\.py:NAME"):
        resolve_target("no-colon")
    with pytest.raises(UsageError, match="does not exist"):
        resolve_target(f"{tmp_path / 'nope.py'}:env")
    with pytest.raises(UsageError, match="not found"):
        resolve_target("no_such_module_for_sluicegate:env")
    with pytest.raises(UsageError, match="has no 'missing'; it has: EnvClass, broken"):
        resolve_target(f"{ENVS / 'shapes.py'}:missing")
    with pytest.raises(UsageError, match="no taskset"):
        resolve_target(f"{ENVS / 'shapes.py'}:no_taskset")
    with pytest.raises(UsageError, match="no taskset and no run"):
        resolve_target(f"{ENVS / 'shapes.py'}:empty")
    with pytest.raises(UsageError, match="taskset must be"):
        resolve_target(f"{ENVS / 'shapes.py'}:wrong_taskset")


def test_targets_may_be_factories_and_name_themselves() -> None:
    env = resolve_target(f"{ENVS / 'shapes.py'}:make_env")
    assert env.name == "made"
    assert isinstance(env.taskset, Taskset)
    env = resolve_target(f"{ENVS / 'shapes.py'}:EnvClass")
    assert env.name == "shapes"


async def test_serving_is_held_open_for_the_whole_run(tmp_path: Path, autojump_clock: Any) -> None:
    events: list[str] = []

    class Served(Env):
        def serving(self) -> Any:
            from contextlib import asynccontextmanager

            @asynccontextmanager
            async def held() -> AsyncIterator[None]:
                events.append("up")
                yield
                events.append("down")

            return held()

    async def run(task: Task) -> Any:
        events.append(f"run {task.input}")
        return task.input

    await go(tmp_path, Served(static(2), run), "-c", "1")
    assert events == ["up", "run 1", "run 2", "down"]


# -- display ---------------------------------------------------------------------


async def test_plain_display_prints_batches_and_a_summary(
    tmp_path: Path, autojump_clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    await go(tmp_path, Env(Feed()), "-n", "4", "-c", "1", display="plain")
    out = capsys.readouterr().out
    assert "/4+ (<= 4) done, 0 errors, 1 running (of 1), " in out
    assert "completed, passed: 4 ok, 0 errors, 4 planned" in out
    assert str(tmp_path) in out


async def test_rich_display_renders(
    tmp_path: Path, autojump_clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    await go(tmp_path, Env(Feed()), "-n", "3", "-r", "2", display="rich")
    out = capsys.readouterr().out
    assert "completed" in out
    assert "mean" not in out  # no score function, no score means


# -- signals, in-process ---------------------------------------------------------


async def test_sigterm_drains_and_a_second_cancels(tmp_path: Path, autojump_clock: Any) -> None:
    import os
    import signal

    async def run(task: Task) -> Any:
        if task.input == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        await trio.sleep(5)
        return task.input

    outcome = await go(tmp_path / "a", Env(Feed(gap=0), run), "-n", "50", "-c", "3", signals=True)
    assert outcome.exit_status == 130
    assert sorted(r["result"] for r in rows(tmp_path / "a")) == [1, 2, 3]
    assert outcome.error == "SIGTERM received"

    async def stubborn(task: Task) -> Any:
        if task.input == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            await trio.sleep(1)
            os.kill(os.getpid(), signal.SIGTERM)
            await trio.sleep_forever()
        await trio.sleep(0.5)
        return task.input

    outcome = await go(
        tmp_path / "b", Env(Feed(gap=0), stubborn), "-n", "50", "-c", "3", signals=True
    )
    assert outcome.exit_status == 130
    assert sorted(r["result"] for r in rows(tmp_path / "b")) == [1, 3]
    assert run_json(tmp_path / "b")["stop_reason"] == "interrupted"


async def test_a_resume_may_name_the_target_file_by_another_path(
    tmp_path: Path, autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = EXAMPLES / "arithmetic.py"
    monkeypatch.chdir(EXAMPLES)
    await evaluate("arithmetic.py:env", num_tasks=2, output_dir=tmp_path)
    monkeypatch.chdir(EXAMPLES.parent)
    outcome = await evaluate(
        "examples/arithmetic.py:env", num_tasks=2, output_dir=tmp_path, resume=True
    )
    assert outcome.ok == 2
    record = run_json(tmp_path)
    assert record["config"]["target"] == f"{target.resolve()}:env"
    assert record["counts"]["resumed"] == 2
