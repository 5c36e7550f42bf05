"""Every example under examples/ runs as a script and exits 0."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from repo_helpers import ignored
from server_fixtures import SERVER_VARIABLES

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(
    path
    for path in (ROOT / "examples").rglob("*.py")
    if not path.name.startswith("_") and "__pycache__" not in path.parts
)


def test_there_are_examples() -> None:
    assert EXAMPLES


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_example_runs(example: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # An example that needs a server reads its address from the environment,
    # as a program would: the fixture of that name gives it one of the test servers.
    text = example.read_text(encoding="utf-8")
    env = dict(os.environ)
    env.update(
        (name, request.getfixturevalue(fixture))
        for name, fixture in SERVER_VARIABLES.items()
        if name in text
    )
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(example)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{example.name} failed:\n{done.stdout}\n{done.stderr}"
    # A warning is one plain line, as the command shows it, not Python's two
    # (a path into the package, then the `warnings.warn(` source line).
    raw = re.compile(r"^.*\.py:\d+: \w*Warning: ", re.MULTILINE)
    assert not raw.search(done.stderr), f"{example.name} printed a raw warning:\n{done.stderr}"
    # Run from the repository root, what it leaves behind must not show as untracked.
    left = sorted(f"{p.name}/" if p.is_dir() else p.name for p in tmp_path.iterdir())
    assert left == ignored(left), f"{example.name} leaves files .gitignore does not cover: {left}"
