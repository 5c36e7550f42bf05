"""A resume of a traced run is traced too: ``--trace`` is recorded in ``run.json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluicegate import Timeline
from sluicegate.cli import main

ENV = """\
from pathlib import Path

from sluicegate import Task, Taskset

FLAG = Path(__file__).with_name("fail-once")


class Env:
    taskset = Taskset.from_iterable([Task(input=n, id=f"t{n}") for n in range(3)])

    async def run(self, task: Task) -> int:
        if task.input == 1 and FLAG.exists():
            raise ValueError("fails while the flag is there")
        return int(task.input)


env = Env()
"""


def test_resume_of_a_traced_run_records_its_session_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "env.py").write_text(ENV)
    (tmp_path / "fail-once").touch()
    out = str(tmp_path / "out")
    target = f"{tmp_path / 'env.py'}:env"
    main(["eval", target, "-o", out, "--trace", "--display", "none", "--fail-on-error", "5"])
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert record["config"]["trace"] is True
    (tmp_path / "fail-once").unlink()
    assert main(["eval", "--resume", out, "--display", "none"]) == 0, capsys.readouterr().err
    # One timeline per session: the resumed one (which re-ran t1) is there.
    sessions = Timeline.read(tmp_path / "out")
    assert len(sessions) == 2
    assert [span.label for span in sessions[1].spans] == ["t1 #0"]
