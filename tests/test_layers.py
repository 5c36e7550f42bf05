"""The package's layers hold: each imports only those below it, and the root stays light.

The contract lives in pyproject.toml (``[tool.importlinter]``) and CI runs it
with ``lint-imports``; these tests prove that it is checked for real (an
upward import breaks it) and that ``import sluicegate`` loads only the core.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import sluicegate

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path(sluicegate.__file__).resolve().parent
# The `lint-imports` command, run by this interpreter.
LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the copy of the package in ``tree``, with the project's contract."""
    config = tree / "pyproject.toml"
    shutil.copy(ROOT / "pyproject.toml", config)
    return subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--config", str(config), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def copy_package(tmp_path: Path) -> Path:
    shutil.copytree(SOURCE, tmp_path / "sluicegate", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_the_package_keeps_its_layers(tmp_path: Path) -> None:
    done = lint_imports(copy_package(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    tree = copy_package(tmp_path)
    runner = tree / "sluicegate" / "_runner.py"
    runner.write_text(runner.read_text() + "\nfrom .service import serve as _upward\n")
    done = lint_imports(tree)
    assert done.returncode != 0
    assert "BROKEN" in done.stdout
    assert "sluicegate._runner -> sluicegate.service" in done.stdout


def printed_by(code: str) -> str:
    """What ``code`` prints, run by a fresh interpreter (nothing imported yet)."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout


def test_import_sluicegate_loads_only_the_core() -> None:
    # What the import adds: a tool that measures the child (coverage, under
    # CI) may have loaded sqlite3 for itself before.
    probe = (
        "import json, sys; before = set(sys.modules); import sluicegate; "
        "print(json.dumps(sorted(m for m in set(sys.modules) - before if m.split('.')[0] "
        "in ('sluicegate', 'sqlite3', '_sqlite3', 'cattrs', 'rich', 'asyncio'))))"
    )
    loaded = set(json.loads(printed_by(probe)))
    assert loaded == {
        "sluicegate",
        "sluicegate._asyncio",
        "sluicegate._checks",
        "sluicegate._dynamic",
        "sluicegate._runner",
        "sluicegate._take",
        "sluicegate._taskset",
        "sluicegate._util",
        "sluicegate._version",
    }


def test_a_name_of_a_higher_layer_loads_on_first_use() -> None:
    probe = (
        "import sys, sluicegate; assert 'sluicegate.service' not in sys.modules; "
        "serve = sluicegate.serve; assert 'sluicegate.service' in sys.modules; "
        "from sluicegate import Retry; print(serve.__module__, Retry.__module__)"
    )
    assert printed_by(probe).split() == ["sluicegate.service", "sluicegate"]
