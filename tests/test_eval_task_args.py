"""-T key=value: keyword arguments for the environment's factory, recorded and reused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from sluicegate import Task, Taskset
from sluicegate.cli import main
from sluicegate.eval import evaluate


class Configurable:
    """A factory: each rollout's result says what it was built with."""

    def __init__(self, size: int = 2, label: str = "plain", tags: Any = None) -> None:
        self.taskset = Taskset.from_iterable([Task(input=n) for n in range(size)])
        self.built = {"size": size, "label": label, "tags": tags}

    async def run(self, task: Task) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        return self.built


def make(**kwargs: Any) -> Configurable:
    return Configurable(**kwargs)


instance = Configurable()


def results(out: Path) -> list[Any]:
    lines = (out / "results.jsonl").read_text().splitlines()
    return [json.loads(line)["result"] for line in lines]


def target(name: str) -> str:
    return f"{Path(__file__).resolve()}:{name}"


def test_values_are_json_when_they_parse(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["eval", target("Configurable"), "-o", str(out), "--display", "none"]
    argv += ["-T", "size=3", "-T", "label=big one", "-T", 'tags=["a", 1]']
    assert main(argv) == 0
    built = {"size": 3, "label": "big one", "tags": ["a", 1]}
    assert results(out) == [built] * 3
    record = json.loads((out / "run.json").read_text())
    assert record["config"]["task_args"] == built


def test_a_resume_builds_the_environment_with_the_same_arguments(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["eval", target("make"), "-o", str(out), "--display", "none", "-T", "size=3"]
    assert main(argv) == 0
    lines = (out / "results.jsonl").read_text().splitlines()
    (out / "results.jsonl").write_text(lines[0] + "\n")
    assert main(["eval", "--resume", str(out), "--display", "none"]) == 0
    assert len(results(out)) == 3 and all(result["size"] == 3 for result in results(out))
    # Other arguments would run other rollouts: refused.
    again = ["eval", "--resume", str(out), "--display", "none", "-T", "size=4"]
    assert main(again) == 2


def test_an_argument_the_factory_does_not_take_is_refused_before_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["eval", target("Configurable"), "-o", str(out), "-T", "colour=red"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "does not take an argument 'colour'" in err and "label, size, tags" in err
    assert not out.exists()
    assert main(["eval", target("instance"), "-o", str(out), "-T", "size=1"]) == 2
    assert "is an environment object, not a factory" in capsys.readouterr().err
    assert main(["eval", target("Configurable"), "-o", str(out), "-T", "size"]) == 2
    assert "-T takes KEY=VALUE" in capsys.readouterr().err
    assert not out.exists()


async def test_from_python(tmp_path: Path) -> None:
    report = await evaluate(Configurable, task_args={"size": 1}, output_dir=tmp_path / "a")
    assert report.ok == 1
    with pytest.raises(TypeError, match="-T label must be a JSON value"):
        await evaluate(Configurable, task_args={"label": object()}, output_dir=tmp_path / "b")
    with pytest.raises(ValueError, match="does not take an argument 'nope'"):
        await evaluate(Configurable, task_args={"nope": 1}, output_dir=tmp_path / "c")
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


async def test_not_with_dask_yet(tmp_path: Path) -> None:
    # The workers build the environment from TARGET alone: refused before
    # any cluster is reached.
    with pytest.raises(ValueError, match="-T cannot be used with --dask"):
        await evaluate(
            target("Configurable"),
            task_args={"size": 1},
            dask="tcp://127.0.0.1:9",
            output_dir=tmp_path / "out",
        )
    assert not (tmp_path / "out").exists()


def test_the_header_shows_each_value_as_the_factory_gets_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-T size=3 is a number and -T label=O.5 text: seen on the first line, before the run."""
    out = tmp_path / "run"
    argv = ["eval", target("Configurable"), "-o", str(out), "--display", "plain"]
    assert main([*argv, "-T", "size=3", "-T", "label=O.5", "-T", "tags=[1]"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("evaluating test_eval_task_args (")
    assert "-T size=3 (a number), label='O.5' (text), tags=[1] (a list)" in first
    assert first.endswith(f" -> {out}")


def test_a_key_given_twice_is_refused_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once, the last -T won silently."""
    out = tmp_path / "run"
    argv = ["eval", target("Configurable"), "-o", str(out), "-T", "size=3", "-T", "size=4"]
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert (
        line
        == "sluicegate eval: error: -T size is given twice (-T size=3 and -T size=4): give it once"
    )
    assert not out.exists()
