"""An evaluation under a window object, and what run.json and the summary say of its window."""

from __future__ import annotations

import functools
import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import trio

from eval_helpers import ENVS, Env, rows, run_json, static
from sluicegate import AdaptiveWindow, Drain, Task, Window, serve
from sluicegate.cli import main
from sluicegate.eval import evaluate
from sluicegate.testing import RunProbe
from upstream import SimulatedUpstream

ALIVE = f"{ENVS / 'alive.py'}:env"


def _one_second_rollouts() -> RunProbe[Task]:
    """One-second rollouts that return their task's input; ``peak``: the most at once."""
    return RunProbe(durations=lambda task: 1.0, value=lambda task: task.input)


async def test_one_window_bounds_an_evaluation_and_a_service_together(
    tmp_path: Path, autojump_clock: Any
) -> None:
    window = Window(3)
    alive = {"eval": 0, "serve": 0}
    peak = 0
    together = False

    async def alive_for(kind: str) -> None:
        nonlocal peak, together
        alive[kind] += 1
        peak = max(peak, sum(alive.values()))
        together = together or all(alive.values())
        await trio.sleep(1)
        alive[kind] -= 1

    async def rollout(task: Task) -> Any:
        await alive_for("eval")
        return task.input

    async def item(n: int) -> None:
        await alive_for("serve")

    out = tmp_path / "out"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(serve, range(12), item, window=window, signals=()))
        report = await evaluate(Env(static(12), rollout), concurrency=window, output_dir=out)
    assert report.ok == 12
    assert peak == 3 and together
    # 24 one-second runs three at a time take 8 s: both ran at once, and
    # neither waited for the other to end.
    assert trio.current_time() <= 10
    assert window.in_flight == 0
    config = run_json(out)["config"]
    assert (config["concurrency"], config["window_object"]) == (3, "Window")


async def test_one_window_bounds_two_evaluations_together(
    tmp_path: Path, autojump_clock: Any
) -> None:
    window = Window(2)
    rollout = _one_second_rollouts()

    async def one(name: str) -> None:
        await evaluate(Env(static(6), rollout), concurrency=window, output_dir=tmp_path / name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, "a")
        nursery.start_soon(one, "b")
    assert rollout.peak == 2
    assert trio.current_time() <= 7  # 12 one-second rollouts, two at a time
    assert len(rows(tmp_path / "a")) == len(rows(tmp_path / "b")) == 6


async def test_a_window_resized_during_the_evaluation_takes_effect_and_is_recorded(
    tmp_path: Path, autojump_clock: Any
) -> None:
    window = Window(2)
    rollout = _one_second_rollouts()

    async def widen() -> None:
        await trio.sleep(2.5)
        window.size = 5

    out = tmp_path / "out"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(widen)
        await evaluate(Env(static(20), rollout), concurrency=window, output_dir=out)
    assert rollout.peak == 5
    record = run_json(out)
    assert record["config"]["concurrency"] == 2  # the size as the session started
    assert [change["size"] for change in record["window"]] == [5]
    assert record["window"][0]["reason"] == "set"


async def test_an_adaptive_window_passed_in_adapts_during_the_evaluation(
    tmp_path: Path, autojump_clock: Any
) -> None:
    upstream = SimulatedUpstream(4, call_time=1.0, retry_after=None)
    window = AdaptiveWindow(initial=2, max=16)

    async def call(task: Task) -> Any:
        await upstream()
        return task.input

    out = tmp_path / "out"
    report = await evaluate(Env(static(80), call), concurrency=window, retries=30, output_dir=out)
    assert report.ok == 80
    reasons = [change.reason for change in window.changes]
    assert "grow" in reasons and "overload" in reasons
    assert upstream.peak <= 4
    record = run_json(out)
    assert record["config"]["concurrency"] == "auto:16"
    assert record["config"]["window_object"] == "AdaptiveWindow"
    assert [change["size"] for change in record["window"]] == [c.size for c in window.changes]


async def test_a_shared_adaptive_window_records_only_this_sessions_changes(
    tmp_path: Path, autojump_clock: Any
) -> None:
    window = AdaptiveWindow(initial=2, max=8)
    window.size = 6  # before the evaluation: not its history
    await trio.sleep(1)

    async def rollout(task: Task) -> Any:
        await trio.sleep(1)
        return task.input

    out = tmp_path / "out"
    await evaluate(Env(static(4), rollout), concurrency=window, output_dir=out)
    assert window.changes[0].size == 6
    assert all(change["time"] >= 1 for change in run_json(out)["window"])


@pytest.mark.parametrize(
    ("given", "recorded"), [("auto", "auto"), ("auto:16", "auto:16"), (" AUTO:016", "auto:16")]
)
async def test_run_json_records_c_auto_as_auto(
    tmp_path: Path, autojump_clock: Any, given: str, recorded: str
) -> None:
    upstream = SimulatedUpstream(4, call_time=1.0, retry_after=None)

    async def call(task: Task) -> Any:
        await upstream()
        return task.input

    out = tmp_path / "out"
    await evaluate(Env(static(30), call), concurrency=given, retries=30, output_dir=out)
    record = run_json(out)
    assert record["config"]["concurrency"] == recorded
    assert record["config"]["window_object"] is None
    assert "adaptive" not in record["config"]
    assert any(change["reason"] == "grow" for change in record["window"])


async def test_a_fixed_concurrency_is_recorded_as_an_int_with_no_window(
    tmp_path: Path, autojump_clock: Any
) -> None:
    await evaluate(Env(static(3)), concurrency=2, output_dir=tmp_path)
    record = run_json(tmp_path)
    assert (record["config"]["concurrency"], record["window"]) == (2, [])


def _interrupted_at_once(out: Path, concurrency: Any) -> None:
    """A session of ALIVE under ``concurrency`` that a drain stops before any rollout."""
    drain = Drain()
    drain.request("stopped before it began")
    report = trio.run(
        functools.partial(evaluate, ALIVE, concurrency=concurrency, output_dir=out, drain=drain)
    )
    assert report.stop_reason == "interrupted" and report.ok == 0


def _resume(out: Path) -> dict[str, Any]:
    assert main(["eval", "--resume", str(out), "--display", "none"]) == 0
    return run_json(out)


def test_a_resume_of_a_run_under_a_window_runs_under_the_size_recorded(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _interrupted_at_once(out, Window(3))
    config = run_json(out)["config"]
    assert (config["concurrency"], config["window_object"]) == (3, "Window")
    config = _resume(out)["config"]
    # A new fixed window of 3: the object, and whoever shared it, are gone.
    assert (config["concurrency"], config["window_object"]) == (3, None)
    assert max(row["result"]["alive"] for row in rows(out)) == 3
    assert len(rows(out)) == 12


def test_a_resume_of_a_run_under_an_adaptive_window_is_adaptive_up_to_its_max(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    _interrupted_at_once(out, AdaptiveWindow(initial=1, max=2))
    assert run_json(out)["config"]["concurrency"] == "auto:2"
    record = _resume(out)
    assert (record["config"]["concurrency"], record["config"]["window_object"]) == ("auto:2", None)
    # A new AdaptiveWindow(initial=2, max=2): nothing runs past its max.
    assert max(row["result"]["alive"] for row in rows(out)) <= 2
    assert len(rows(out)) == 12


def test_a_run_json_that_recorded_adaptive_reads_as_auto_and_resumes_adaptive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    _interrupted_at_once(out, "auto:16")
    # As the version before this one wrote -c auto:16.
    record = run_json(out)
    del record["config"]["window_object"]
    record["config"].update(concurrency=16, adaptive=True)
    (out / "run.json").write_text(json.dumps(record))
    assert main(["runs", str(tmp_path)]) == 0
    assert "interrupted" in capsys.readouterr().out
    record = _resume(out)
    assert record["config"]["concurrency"] == "auto:16"
    assert "adaptive" not in record["config"]
    # An AdaptiveWindow(initial=8, max=16): it grew as rollouts succeeded.
    assert record["window"][0]["reason"] == "grow"
    assert max(row["result"]["alive"] for row in rows(out)) <= 16


async def test_the_summary_says_where_an_adaptive_window_settled(
    tmp_path: Path, autojump_clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = SimulatedUpstream(4, call_time=1.0, retry_after=None)

    async def call(task: Task) -> Any:
        await upstream()
        return task.input

    out = tmp_path / "out"
    await evaluate(
        Env(static(80), call), concurrency="auto:16", retries=30, output_dir=out, display="plain"
    )
    text = capsys.readouterr().out
    sizes = [8] + [change["size"] for change in run_json(out)["window"]]
    decreases = sum(1 for before, after in itertools.pairwise(sizes) if after < before)
    assert decreases >= 1
    plural = "" if decreases == 1 else "s"
    line = f"window: settled at {sizes[-1]} (auto:16), {decreases} decrease{plural}"
    assert line in text.splitlines(), text
    assert ", -c auto:16 -> " in text.splitlines()[0]


@pytest.mark.parametrize("display", ["plain", "rich"])
async def test_the_summary_names_a_window_object_and_its_size(
    tmp_path: Path, autojump_clock: Any, capsys: pytest.CaptureFixture[str], display: str
) -> None:
    await evaluate(Env(static(3)), concurrency=Window(2), output_dir=tmp_path, display=display)
    text = capsys.readouterr().out
    assert "-c 2 (a Window object)" in text
    assert re.search(r"window[:│ ]+2 throughout \(a Window object\)", text), text


async def test_the_summary_says_nothing_of_a_window_under_a_fixed_concurrency(
    tmp_path: Path, autojump_clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    await evaluate(Env(static(3)), concurrency=2, output_dir=tmp_path, display="plain")
    assert "window" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("bad", "error"),
    [(Window, TypeError), (True, TypeError), ([4], TypeError), (0, ValueError), ("4", ValueError)],
)
async def test_what_is_not_a_window_is_refused_naming_every_form_taken(
    tmp_path: Path, bad: Any, error: type[Exception]
) -> None:
    words = "-c/--concurrency must be an int >= 1, 'auto', 'auto:MAX' or a sluicegate.Window"
    with pytest.raises(error, match=re.escape(words)):
        await evaluate(Env(static(1)), concurrency=bad, output_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()
