"""``sluicegate eval`` at its edges: the second review's findings, one test (or more) each.

Each test fails without the fix it names; the review's repro is the test's
starting point.
"""

from __future__ import annotations

import json
import math
import warnings
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import trio

from sluicegate import Task, Taskset, Timeline
from sluicegate.eval import evaluate
from test_eval_api import Env

ENVS = Path(__file__).parent / "eval_envs"


def rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def run_json(out: Path) -> dict[str, Any]:
    return json.loads((out / "run.json").read_text())  # type: ignore[no-any-return]


def tasks(*inputs: Any, ids: tuple[str, ...] = ()) -> Taskset[Task]:
    if ids:
        pairs = zip(inputs, ids, strict=True)
        return Taskset.from_iterable([Task(input=i, id=n) for i, n in pairs])
    return Taskset.from_iterable([Task(input=i) for i in inputs])


# -- B5: a result without a repr() is still written ------------------------------------


class NoRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


async def test_a_result_whose_repr_fails_keeps_its_row(tmp_path: Path, autojump_clock: Any) -> None:
    results = {1: {"factorial": math.factorial(2000)}, 2: NoRepr(), 3: "fine"}

    async def run(task: Task) -> Any:
        return results[task.input]

    report = await evaluate(Env(tasks(1, 2, 3), run), output_dir=tmp_path)
    assert (report.stop_reason, report.ok) == ("completed", 3)
    got = {row["task_id"]: row for row in rows(tmp_path)}
    assert got["1"]["result_repr"] and "ValueError" in got["1"]["result"]
    assert got["2"]["result_repr"] and "RuntimeError: no repr" in got["2"]["result"]
    assert (got["3"]["result"], got["3"]["result_repr"]) == ("fine", False)
    again = await evaluate(Env(tasks(1, 2, 3), run), output_dir=tmp_path, resume=True)
    assert (again.passed, again.ok) == (True, 3)


# -- B12: text outside the result is escaped, the result left alone --------------------


async def test_a_lone_surrogate_outside_the_result_does_not_touch_the_result(
    tmp_path: Path, autojump_clock: Any
) -> None:
    async def run(task: Task) -> Any:
        if task.id == "b":
            raise ValueError("model output: \udcff")
        return {"answer": "fine"}

    env = Env(tasks(1, 2, ids=("doc-\ud800", "b")), run)
    report = await evaluate(env, output_dir=tmp_path, fail_on_error=5)
    assert (report.ok, report.errors) == (1, 1)
    data = (tmp_path / "results.jsonl").read_bytes()
    data.decode("utf-8")  # valid UTF-8 throughout
    got = {row["task_id"]: row for row in rows(tmp_path)}
    assert got["doc-\ud800"]["result"] == {"answer": "fine"}
    assert got["doc-\ud800"]["result_repr"] is False
    assert got["b"]["result"] is None and got["b"]["result_repr"] is False
    assert got["b"]["error"]["message"] == "model output: \udcff"


# -- B4: one session at a time on a run directory --------------------------------------


async def test_a_second_session_on_a_running_directory_is_refused(
    tmp_path: Path, autojump_clock: Any
) -> None:
    out = tmp_path / "run"
    started, finish = trio.Event(), trio.Event()

    async def run(task: Task) -> Any:
        started.set()
        await finish.wait()
        return task.input

    env = Env(tasks(1, 2, 3), run)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: evaluate(env, output_dir=out))
        await started.wait()
        with trio.fail_after(100), pytest.raises(ValueError, match=f"{out} is in use by another"):
            await evaluate(env, output_dir=out, resume=True)
        finish.set()
    record = run_json(out)
    assert [session["stop_reason"] for session in record["sessions"]] == ["completed"]
    assert len(rows(out)) == 3
    # The lock is let go at the end: a resume now goes ahead.
    again = await evaluate(env, output_dir=out, resume=True)
    assert (again.passed, again.ok) == (True, 3)
    assert len(run_json(out)["sessions"]) == 2


async def test_a_new_run_into_an_existing_directory_takes_the_lock_too(
    tmp_path: Path, autojump_clock: Any
) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    started, finish = trio.Event(), trio.Event()

    async def run(task: Task) -> Any:
        started.set()
        await finish.wait()
        return task.input

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: evaluate(Env(tasks(1), run), output_dir=out))
        await started.wait()
        with trio.fail_after(100), pytest.raises(ValueError, match="in use by another"):
            await evaluate(Env(tasks(1), run), output_dir=out, resume=True)
        finish.set()
    assert len(rows(out)) == 1


async def test_without_fcntl_an_evaluation_runs_unlocked(
    tmp_path: Path, autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "fcntl", None)  # import fcntl now raises ImportError
    report = await evaluate(Env(tasks(1, 2)), output_dir=tmp_path / "a")
    assert report.passed
    assert not (tmp_path / "a" / ".lock").exists()
    again = await evaluate(Env(tasks(1, 2)), output_dir=tmp_path / "a", resume=True)
    assert again.passed and again.ok == 2


# -- B6: --retry-on names a class of the TARGET file; classes are kept as given --------


async def test_retry_on_a_class_of_the_target_file(tmp_path: Path, autojump_clock: Any) -> None:
    import sys

    target = f"{ENVS / 'retryon.py'}:env"
    report = await evaluate(
        target, output_dir=tmp_path / "r", retries=3, retry_on=["retryon:RateLimited"]
    )
    assert (report.passed, report.ok) == (True, 1)
    [row] = rows(tmp_path / "r")
    assert (row["status"], row["attempts"]) == ("ok", 3)
    assert "retryon" not in sys.modules  # the file was not imported a second time
    assert run_json(tmp_path / "r")["config"]["retry_on"] == ["retryon:RateLimited"]


async def test_retry_on_takes_a_class_that_cannot_be_imported_by_name(
    tmp_path: Path, autojump_clock: Any
) -> None:
    class LocalError(Exception):
        pass

    tries = 0

    async def run(task: Task) -> int:
        nonlocal tries
        tries += 1
        if tries < 3:
            raise LocalError("flaky")
        return 1

    report = await evaluate(
        Env(tasks(1), run), output_dir=tmp_path, retries=2, retry_on=[LocalError]
    )
    assert (report.passed, tries) == (True, 3)
    recorded = run_json(tmp_path)["config"]["retry_on"]
    assert recorded == [f"{__name__}:{LocalError.__qualname__}"]


# -- B7: a factory that exits or raises is refused in one line ---------------------------


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("exits", "exits() called sys.exit(0)"),
        ("raises", "raises() raised RuntimeError: set API_KEY"),
        ("raises_type_error", "raises_type_error() raised TypeError: bad config value"),
        ("needs", "is callable but not a zero-argument factory"),
    ],
)
def test_a_factory_that_exits_or_raises_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], factory: str, message: str
) -> None:
    from sluicegate.cli import main

    out = tmp_path / "out"
    target = f"{ENVS / 'factories.py'}:{factory}"
    assert main(["eval", target, "-o", str(out), "--display", "none"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sluicegate eval: error: "), lines
    assert message in lines[0]
    assert not out.exists()


# -- B10: finite scores whose sum overflows still have a mean --------------------------


async def test_finite_scores_whose_sum_overflows_have_a_finite_mean(
    tmp_path: Path, autojump_clock: Any
) -> None:
    def score(task: Task, result: Any) -> Any:
        return {"big": 1e308, "tiny": 5e-324}

    report = await evaluate(Env(tasks(1, 2, 3), score=score), output_dir=tmp_path)
    assert (report.stop_reason, report.passed) == ("completed", True), report.error
    assert report.scores == {"big": 1e308, "tiny": 5e-324}
    record = run_json(tmp_path)
    assert (record["stop_reason"], record["scores"]["big"]) == ("completed", 1e308)
    again = await evaluate(Env(tasks(1, 2, 3), score=score), output_dir=tmp_path, resume=True)
    assert (again.stop_reason, again.scores["big"]) == ("completed", 1e308)


def test_the_report_histogram_of_scores_whose_sum_overflows(tmp_path: Path) -> None:
    from sluicegate.report._svg import histograms_svg

    assert "mean 1e+308 over 2" in histograms_svg({"big": [1e308, 1e308]})


# -- B14: trace= and drain= are checked before anything happens ------------------------


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"trace": "yes"}, "trace must be True, None or a recorder"),
        ({"trace": Timeline}, "trace must be True, None or a recorder"),
        ({"drain": "soon"}, "drain must be a sluicegate.Drain or None"),
    ],
)
async def test_a_bad_trace_or_drain_is_refused_before_anything_happens(
    tmp_path: Path, setting: dict[str, Any], message: str
) -> None:
    ran: list[object] = []

    async def run(task: Task) -> Any:
        ran.append(task)

    with pytest.raises(ValueError, match=message):
        await evaluate(Env(tasks(1), run), output_dir=tmp_path / "o", **setting)
    assert not (tmp_path / "o").exists() and not ran


# -- B15: one rule for a score and for each value of a mapping of scores ---------------


async def test_any_real_number_is_a_score_and_a_bool_or_text_never_is(
    tmp_path: Path, autojump_clock: Any
) -> None:
    np = pytest.importorskip("numpy")

    given: list[Any] = [
        np.float32(0.5),
        np.int64(2),
        Decimal("0.25"),
        Fraction(3, 4),
        {"acc": np.float64(0.5), "n": Decimal(1), "f": Fraction(1, 2)},
        True,
        "0.75",
        {"acc": True},
        {"acc": "0.75"},
        np.bool_(True),
        10**400,
        {"acc": Decimal("NaN")},
    ]

    def score(task: Task, result: Any) -> Any:
        return given[task.input]

    report = await evaluate(
        Env(tasks(*range(len(given))), score=score), output_dir=tmp_path, fail_on_error=100
    )
    assert report.stop_reason == "completed", report.error
    got = {int(row["task_id"]) - 1: row for row in rows(tmp_path)}
    assert [got[n]["score"] for n in range(5)] == [
        0.5,
        2.0,
        0.25,
        0.75,
        {"acc": 0.5, "n": 1.0, "f": 0.5},
    ]
    for n in range(5, len(given)):
        assert got[n]["status"] == "error", (n, got[n])
    assert {got[n]["error"]["type"] for n in (5, 6, 7, 8, 9)} == {"TypeError"}
    assert {got[n]["error"]["type"] for n in (10, 11)} == {"ValueError"}
    message = got[7]["error"]["message"]
    assert "score() returned 'acc': True: a score must be a real number" in message


# -- B16: a BaseException from inside run fails the run, naming the exception ----------


@pytest.mark.parametrize(
    ("kind", "error"), [("exit", "SystemExit: 4"), ("custom", "Custom: deep in a library")]
)
def test_a_base_exception_inside_run_fails_the_run_and_exits_1(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    error: str,
) -> None:
    from sluicegate.cli import main

    monkeypatch.setenv("SLUICEGATE_TEST_RAISE", kind)
    out = tmp_path / "out"
    target = f"{ENVS / 'base_exit.py'}:env"
    assert main(["eval", target, "-o", str(out), "--display", "none"]) == 1
    assert f"sluicegate eval: failed: {error}" in capsys.readouterr().err
    record = run_json(out)
    assert (record["stop_reason"], record["error"], record["passed"]) == ("failed", error, False)


async def test_a_keyboard_interrupt_inside_run_is_still_an_interruption(
    tmp_path: Path, autojump_clock: Any
) -> None:
    async def run(task: Task) -> Any:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await evaluate(Env(tasks(1), run), output_dir=tmp_path)
    assert run_json(tmp_path)["stop_reason"] == "interrupted"


# -- D1: with the rich bar on a terminal, messages still go to standard error ----------


async def test_messages_go_to_stderr_above_a_rich_bar_on_a_terminal(
    tmp_path: Path,
    autojump_clock: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rich.console import Console

    from sluicegate._terminal import messages

    monkeypatch.setenv("FORCE_COLOR", "1")  # rich takes standard output for a terminal
    assert Console().is_terminal

    async def run(task: Task) -> Any:
        await trio.sleep(task.input)
        if task.input % 2:
            raise KeyError(f"missing {task.input}")
        return task.input

    with messages("sluicegate eval"):
        report = await evaluate(
            Env(tasks(1, 2, 3, 4), run), output_dir=tmp_path, display="rich", fail_on_error=10
        )
    assert report.errors == 2
    captured = capsys.readouterr()
    for n in (1, 3):
        line = f"sluicegate eval: task {n} rollout 0 failed: KeyError: 'missing {n}'"
        assert line in captured.err.splitlines()
        assert f"missing {n}" not in captured.out
    assert "sluicegate eval" in captured.out  # the summary table stays on standard output


# -- N1: an empty output directory is a usage error -------------------------------------


@pytest.mark.parametrize("flag", ["-o", "--resume"])
def test_an_empty_output_directory_is_a_usage_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flag: str,
) -> None:
    from sluicegate.cli import main

    monkeypatch.chdir(tmp_path)
    target = f"{ENVS / 'base_exit.py'}:env"
    assert main(["eval", target, flag, "", "--display", "none"]) == 2
    assert "is empty" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# -- N4: --resume compares --id as a set -------------------------------------------------


async def test_a_resume_compares_ids_as_a_set(tmp_path: Path, autojump_clock: Any) -> None:
    env = Env(tasks(1, 2, 3))
    first = await evaluate(env, output_dir=tmp_path, ids=["1", "2"])
    assert first.ok == 2
    again = await evaluate(env, output_dir=tmp_path, ids=["2", "1", "2"], resume=True)
    assert (again.stop_reason, again.ok) == ("completed", 2)
    with pytest.raises(ValueError, match=r"--id: \['1', '2'\] in run.json, \['1', '3'\] now"):
        await evaluate(env, output_dir=tmp_path, ids=["3", "1"], resume=True)


# -- N5: a run that selected nothing fails ------------------------------------------------


def test_an_id_matching_no_task_of_a_static_set_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sluicegate.cli import main

    out = tmp_path / "out"
    target = f"{ENVS / 'base_exit.py'}:env"
    assert main(["eval", target, "--id", "99", "-o", str(out), "--display", "none"]) == 2
    assert "sluicegate eval: error: --id matched no task: 99" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(SystemExit) as refused:  # argparse's own usage error
        main(["eval", target, "-n", "0", "-o", str(out), "--display", "none"])
    assert refused.value.code == 2
    assert "-n/--num-tasks: must be >= 1, got 0" in capsys.readouterr().err
    assert not out.exists()


class Feed(Taskset[Task]):
    def __init__(self, count: int) -> None:
        self.count = count

    async def stream(self) -> Any:
        for n in range(1, self.count + 1):
            await trio.sleep(1)
            yield Task(input=n)


@pytest.mark.parametrize(("count", "ids"), [(3, ["nope"]), (0, [])])
async def test_a_stream_that_selected_nothing_fails(
    tmp_path: Path, autojump_clock: Any, count: int, ids: list[str]
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = await evaluate(Env(Feed(count)), num_tasks=5, ids=ids, output_dir=tmp_path)
    assert (report.stop_reason, report.passed, report.exit_status) == ("failed", False, 1)
    assert report.error is not None and report.error.startswith("nothing to evaluate")
    assert run_json(tmp_path)["stop_reason"] == "failed"
