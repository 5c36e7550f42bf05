"""What the tests ask of the repository itself (not a test module)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ignored(names: list[str]) -> list[str]:
    """Those of ``names`` (relative paths, a trailing / for a directory) .gitignore covers."""
    if not names:
        return []
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=ROOT,
        input="\n".join(names),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return sorted(done.stdout.splitlines())
