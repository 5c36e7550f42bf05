"""Every ``nox`` and ``bench`` command the docs show runs as written: its session exists, and
each flag it gives is one the script takes."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Where commands are written for a reader: the docs, the guides, each bench's docstring.
SOURCES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
SOURCES += [*sorted((ROOT / "bench").glob("*.py")), ROOT / "noxfile.py"]
NOX = re.compile(r"nox -s (\w+)(?: -- ([^`|\n)#]*))?")
BENCH = re.compile(r"python bench/(\w+)\.py([^`|\n)#]*)")


def documented(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    found = set()
    for path in SOURCES:
        for match in pattern.finditer(path.read_text(encoding="utf-8")):
            found.add((match.group(1), (match.group(2) or "").strip()))
    return sorted(found)


def flags(words: str) -> list[str]:
    return [word.strip("[]") for word in words.split() if word.strip("[]").startswith("-")]


def noxfile() -> tuple[set[str], tuple[str, ...]]:
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    sessions = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any(
            ast.unparse(decorator).startswith("nox.session") for decorator in node.decorator_list
        )
    }
    (benches,) = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "BENCHES"
    ]
    return sessions, tuple(benches)


@cache
def takes(bench: str) -> str:
    """The bench's ``--help``: the flags it takes."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{bench}.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def test_the_commands_are_found() -> None:
    assert ("bench", "--quick") in documented(NOX)
    assert ("imports", "--repeats 60") in documented(BENCH)


@pytest.mark.parametrize(("session", "args"), documented(NOX))
def test_a_documented_nox_command_names_a_session_and_flags_its_benches_take(
    session: str, args: str
) -> None:
    sessions, benches = noxfile()
    assert session in sessions
    if session != "bench":
        return
    words = args.split()
    # As the bench session reads its arguments: a bench's name first picks that one.
    names, words = (
        ([words[0]], words[1:]) if words[:1] and words[0] in benches else (benches, words)
    )
    for name in names:
        for flag in flags(" ".join(words)):
            assert re.search(rf"{re.escape(flag)}\b", takes(name)), (name, flag)


@pytest.mark.parametrize(("bench", "args"), [c for c in documented(BENCH) if flags(c[1])])
def test_a_documented_bench_command_uses_flags_the_bench_takes(bench: str, args: str) -> None:
    for flag in flags(args):
        assert re.search(rf"(^|[\s\[]){re.escape(flag)}\b", takes(bench)), (bench, flag)


def test_the_bench_session_installs_what_the_benches_import() -> None:
    """A bench that borrows the tests' helpers (which import pytest) needs the test extra."""
    text = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    bench = text[text.index("def bench(") :]
    (extras,) = re.findall(r'session\.install\("-e", "\.\[([\w,]+)\]"\)', bench)
    borrowing = [
        path.name
        for path in (ROOT / "bench").glob("*.py")
        if '/ "tests"' in path.read_text(encoding="utf-8")
    ]
    assert not borrowing or "test" in extras.split(","), borrowing
