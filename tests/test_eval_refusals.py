"""Mistakes refused before anything runs: settings, factories, output directories, selections."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from eval_helpers import ENVS, Env, refused, static, tasks
from sluicegate import Task, Timeline
from sluicegate.cli import main
from sluicegate.eval import evaluate
from sluicegate.eval._config import UsageError


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

    out = tmp_path / "out"
    target = f"{ENVS / 'factories.py'}:{factory}"
    assert main(["eval", target, "-o", str(out), "--display", "none"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sluicegate eval: error: "), lines
    assert message in lines[0]
    assert not out.exists()


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

    with pytest.raises(TypeError, match=message):
        await evaluate(Env(tasks(1), run), output_dir=tmp_path / "o", **setting)
    assert not (tmp_path / "o").exists() and not ran


@pytest.mark.parametrize("flag", ["-o", "--resume"])
def test_an_empty_output_directory_is_a_usage_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flag: str,
) -> None:

    monkeypatch.chdir(tmp_path)
    target = f"{ENVS / 'base_exit.py'}:env"
    assert main(["eval", target, flag, "", "--display", "none"]) == 2
    assert "is empty" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_id_matching_no_task_of_a_static_set_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

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


async def test_settings_are_refused_before_anything_happens(
    tmp_path: Path, autojump_clock: Any
) -> None:
    out = tmp_path / "out"
    env = Env(static(2))
    bad: list[tuple[dict[str, Any], str]] = [
        ({"rollouts": 0}, "-r/--rollouts"),
        ({"timeout": -1}, "--timeout"),
        ({"retry_on": ["NoSuchError"]}, "--retry-on"),
        ({"retry_on": ["os:path"]}, "must name an exception class, not 'os:path'"),
        ({"fail_on_error": "1.5"}, "--fail-on-error"),
        ({"min_score": {"acc": math.nan}}, "--min-score"),
        ({"display": "fancy"}, "display"),
        ({"resume": True}, "output_dir"),
    ]
    for kwargs, message in bad:
        with pytest.raises(ValueError, match=re.escape(message)):
            await evaluate(env, output_dir=out if "resume" not in kwargs else None, **kwargs)
    # A wrong type is a TypeError, worded as run_stream() and serve() word it.
    with pytest.raises(
        TypeError,
        match=re.escape(
            "-c/--concurrency must be an int >= 1, 'auto', 'auto:MAX' or a sluicegate.Window, "
            "not True"
        ),
    ):
        await evaluate(env, output_dir=out, concurrency=True)
    assert not out.exists()


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ({"drain": "x"}, "drain must be a sluicegate.Drain or None, not 'x'"),
        ({"display": 3}, "display must be one of rich, plain, none, not 3"),
        ({"signals": 1}, "signals must be True or False, not 1"),
        ({"resume": "yes"}, "resume must be True or False, not 'yes'"),
        ({"output_dir": 3}, "output_dir (-o) must be a path (str or os.PathLike) or None, not 3"),
        ({"num_tasks": 1.5}, "-n/--num-tasks must be an int >= 1, not 1.5"),
        ({"rollouts": "2"}, "-r/--rollouts must be an int >= 1, not '2'"),
        ({"retries": True}, "--retries must be an int >= 0, not True"),
        ({"timeout": "1"}, "--timeout must be a finite number of seconds > 0, not '1'"),
        ({"shuffle": "7"}, "--shuffle must be an int seed or None, not '7'"),
        ({"system_prompt": 3}, "--system-prompt (system_prompt) must be text (a str) or None"),
        ({"ids": "12"}, "ids (--id) must be a collection of task ids, not '12'"),
        ({"ids": 12}, "ids (--id) must be a collection of task ids, not 12"),
        ({"retry_on": [3]}, "--retry-on must be exception classes or their names, not 3"),
        ({"fail_on_error": [1]}, "--fail-on-error must be a count (0, 1, 2, ...) or a fraction"),
        ({"min_score": "high"}, "--min-score must be a finite number, not 'high'"),
        ({"min_score": {"acc": "1"}}, "--min-score acc must be a finite number, not '1'"),
        ({"reduce": [3]}, "--reduce must be reducer names, not 3"),
        ({"pass_threshold": "1"}, "--pass-threshold must be a finite number, not '1'"),
        ({"task_args": [("a", 1)]}, "task_args (-T) must be a mapping of names to values, not"),
        (
            {"concurrency": 2.0},
            "-c/--concurrency must be an int >= 1, 'auto', 'auto:MAX' or a sluicegate.Window, "
            "not 2.0",
        ),
    ],
)
async def test_a_setting_of_the_wrong_type_is_a_type_error_in_the_packages_words(
    tmp_path: Path, setting: dict[str, Any], words: str
) -> None:
    """The words of sluicegate._checks: "<flag> must be <what it takes>, not <value>"."""
    out = tmp_path / "out"
    with pytest.raises(TypeError) as refused:
        await evaluate(Env(static(2)), **{"output_dir": out, **setting})
    assert str(refused.value).startswith(words), str(refused.value)
    assert not out.exists()


def test_refused_runs_give_one_line_exit_2_and_leave_no_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    shapes = ENVS / "shapes.py"
    out = tmp_path / "deep" / "out"
    line = refused(capsys, f"{shapes}:EnvClass", "-o", str(afile / "out"))
    assert "cannot create" in line and "not a directory" in line
    line = refused(capsys, f"{shapes}:broken", "-o", str(out))
    assert "load() raised OSError: the task file is gone" in line
    assert "shapes.py" in line  # where it raised
    line = refused(capsys, f"{shapes}:duplicates", "-o", str(out))
    assert "duplicate task id 'a'" in line
    line = refused(capsys, f"{shapes}:sync_run", "-o", str(out))
    assert "run must be an async function" in line
    line = refused(capsys, f"{ENVS / 'exits.py'}:env", "-o", str(out))
    assert "sys.exit(3)" in line
    assert not (tmp_path / "deep").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["afile"]


def test_usage_error_is_a_value_error() -> None:
    assert issubclass(UsageError, ValueError)


async def test_a_list_as_the_taskset_names_the_fix(tmp_path: Path) -> None:
    class Listed:
        taskset = [Task(input=1), Task(input=2)]  # noqa: RUF012 - the mistake shown

        async def run(self, task: Task) -> Any:
            return task.input

    with pytest.raises(ValueError, match=re.escape("Taskset.from_iterable(the list)")):
        await evaluate(Listed(), output_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_unknown_name_in_a_target_lists_the_modules_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(capsys, f"{ENVS / 'shapes.py'}:EnvClas", "-o", str(tmp_path / "out"))
    assert line.endswith(
        "shapes.py has no 'EnvClas'; did you mean 'EnvClass'? It has: EnvClass, broken, "
        "duplicates, empty, make_env, no_taskset, sync_run, wrong_taskset"
    )
    # What it imported (Task, Taskset, annotations) is not offered.
    assert "Taskset" not in line.partition("It has")[2]


class Declared:
    """An environment that says which scores its score() returns."""

    scores = ("exact", "f1")
    taskset = tasks(1, 2)

    async def run(self, task: Task) -> Any:
        return task.input

    def score(self, task: Task, result: Any) -> dict[str, float]:
        return {"exact": 1.0, "f1": 0.5}


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        (
            {"min_score": {"acc": 0.5}},
            "--min-score acc=0.5 names no score of the run: the environment's `scores` "
            "declares exact, f1",
        ),
        (
            {"min_score": {"acc/max": 0.5}, "reduce": ["max"]},
            "--min-score acc/max=0.5 names no score of the run: the environment's `scores` "
            "declares exact, f1, and with --reduce exact/max, f1/max",
        ),
        (
            {"min_score": {"exact/pass_at_1": 0.5}},
            "--min-score exact/pass_at_1=0.5 names a reduced score: add --reduce pass_at_1",
        ),
    ],
)
async def test_a_floor_on_no_score_is_refused_before_the_run(
    tmp_path: Path, setting: dict[str, Any], words: str
) -> None:
    """Once, the run went first and failed after, with "no score named ..."."""
    out = tmp_path / "out"
    with pytest.raises(ValueError) as refusal:
        await evaluate(Declared(), output_dir=out, **setting)
    assert str(refusal.value) == words
    assert not out.exists()
    passing = await evaluate(Declared(), output_dir=out, min_score={"f1": 0.5}, reduce=["max"])
    assert passing.passed


async def test_a_floor_without_any_score_is_refused_before_the_run(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^--min-score 0.5: the environment has no score\(\)"):
        await evaluate(Env(static(2)), output_dir=tmp_path / "out", min_score=0.5)
    assert not (tmp_path / "out").exists()
