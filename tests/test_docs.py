"""Every code block in the docs and the README is executed.

``python`` blocks run as standalone scripts. In ``console`` blocks each
``$ sluicegate ...`` or ``$ python ...`` line runs in order, in one scratch
directory per block with ``examples/`` reachable; install and developer
commands (``pip``, ``nox``) are what CI itself runs, so they are not re-run
here. Other languages (``text``, ``pycon``, ``json``, ``mermaid``) are not code.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from repo_helpers import ignored

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SETUP_COMMANDS = ("pip ", "python -m pip ", "nox ", "git ", "cd ", "bash .ci/run")
RUNNABLE = ("python", "console")
# A block that needs a server reads its address from the environment, as a
# program would: the fixture of that name gives it one of the test servers.
SERVERS = {"REDIS_URL": "redis_url", "DATABASE_URL": "postgres_dsn"}


def blocks() -> list[Any]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for number, match in enumerate(FENCE.finditer(text), start=1):
            language, body = match.group(1), match.group(2)
            if language in RUNNABLE:
                where = f"{page.name}#{number}"
                found.append(pytest.param(where, language, body, id=where))
    return found


def environment(servers: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, **(servers or {})}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env.setdefault("COLUMNS", "100")
    return env


def scratch(tmp_path: Path) -> Path:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    return tmp_path


@pytest.mark.parametrize(("where", "language", "body"), blocks())
def test_code_block_runs(
    where: str, language: str, body: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    needed = [name for name in SERVERS if name in body]
    servers = {name: request.getfixturevalue(SERVERS[name]) for name in needed}
    run_block(where, language, body, scratch(tmp_path), servers)


def run_block(
    where: str, language: str, body: str, cwd: Path, servers: dict[str, str] | None = None
) -> None:
    """Run one block in ``cwd``: a python script, or a console block's commands in order."""
    if language == "python":
        script = cwd / "block.py"
        script.write_text(body, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=cwd,
            env=environment(servers),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{where} failed:\n{done.stdout}\n{done.stderr}"
        return
    commands = [line[2:].strip() for line in body.splitlines() if line.startswith("$ ")]
    ran = 0
    for command in commands:
        if command.startswith(SETUP_COMMANDS):
            continue
        argv = shlex.split(command)
        if argv[0] == "sluicegate":
            argv = [sys.executable, "-m", "sluicegate", *argv[1:]]
        elif argv[0] == "python":
            argv = [sys.executable, *argv[1:]]
        else:
            pytest.fail(f"{where}: don't know how to run {command!r}")
        done = subprocess.run(
            argv, cwd=cwd, env=environment(), capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{where}: {command!r} failed:\n{done.stdout}\n{done.stderr}"
        ran += 1
    if not ran and not commands:
        pytest.fail(f"{where}: a console block with no $ commands")


# Pages a reader follows top to bottom in one directory.
IN_ORDER = ("observe.md", "campaign.md")


@pytest.mark.parametrize("name", IN_ORDER)
def test_a_page_can_be_followed_in_order_leaving_only_ignored_files(
    name: str, tmp_path: Path
) -> None:
    cwd = scratch(tmp_path)
    page = [param.values for param in blocks() if param.values[0].startswith(f"{name}#")]
    assert page
    for where, language, body in page:
        run_block(str(where), str(language), str(body), cwd)
    left = sorted(
        f"{path.name}/" if path.is_dir() else path.name
        for path in cwd.iterdir()
        if path.name not in ("examples", "block.py")
    )
    assert left == ignored(left), f"{name} leaves untracked files: {left}"


def test_the_hang_on_the_observe_page_leaves_the_anomaly_it_shows(tmp_path: Path) -> None:
    cwd = scratch(tmp_path)
    text = (ROOT / "docs" / "observe.md").read_text(encoding="utf-8")
    (hang,) = [body for _, _, body in (p.values for p in blocks()) if "item 7 hangs" in str(body)]
    run_block("observe.md (the hang)", "python", str(hang), cwd)
    shown = re.search(r"```text\n\$ (sluicegate trace \S+ --anomalies)\n(.*?)```", text, re.DOTALL)
    assert shown is not None
    argv = shlex.split(shown.group(1))
    done = subprocess.run(
        [sys.executable, "-m", "sluicegate", *argv[1:]],
        cwd=cwd,
        env=environment(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    expected = shown.group(2).splitlines()
    got = done.stdout.splitlines()
    assert got[:3] == expected[:3]
    assert got[-1] == expected[-1]
    assert got[3].split()[:3] == ["1", "7", got[3].split()[2]]
    assert got[3].split()[-1] == "task-7"


def test_the_performance_page_says_which_extra_each_bench_command_needs() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(requirement.startswith("nox") for requirement in extras["dev"])
    peers = {re.split(r"[<>=\[ ]", requirement)[0] for requirement in extras["bench"]}
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    section = " ".join(page.split("## Running the benchmark")[1].split("\n## ")[0].split())
    assert "nox, which the `dev` extra brings" in section
    assert "pip install -e '.[bench]'" in section
    for script in sorted((ROOT / "bench").glob("*.py")):
        source = script.read_text(encoding="utf-8")
        needs = [peer for peer in peers if re.search(rf"^\s*import {peer}\b", source, re.M)]
        if needs:
            assert f"bench/{script.name}" in section, f"{script.name} needs {needs}: say so"
            for peer in needs:
                assert peer in section, f"{script.name} needs {peer}: say so"
