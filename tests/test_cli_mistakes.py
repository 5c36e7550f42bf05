"""A mistyped flag after a subcommand is answered by that subcommand, with the flag it resembles."""

from __future__ import annotations

import pytest

from sluicegate.cli import main


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err.splitlines()


def test_a_mistyped_flag_gets_the_subcommands_usage_and_the_nearest_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = refused(capsys, "eval", "x.py:env", "--nmu", "3")
    assert err[0].startswith("usage: sluicegate eval ")
    assert err[-1] == (
        "sluicegate eval: error: unrecognized arguments: --nmu 3; did you mean --num-tasks?"
    )
    err = refused(capsys, "eval", "x.py:env", "--retires", "3", "--concurency", "2")
    assert err[-1].endswith("did you mean --retries for --retires, --concurrency for --concurency?")
    err = refused(capsys, "report", "run", "--outptu", "r.html")
    assert err[0].startswith("usage: sluicegate report ")
    assert err[-1].endswith("did you mean --output?")


def test_a_nested_subcommand_answers_for_itself(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, "campaign", "run", "p.json", "out", "--ledger", "l.db", "--undrian")
    assert err[0].startswith("usage: sluicegate campaign run ")
    assert err[-1] == (
        "sluicegate campaign run: error: unrecognized arguments: --undrian; did you mean --undrain?"
    )


def test_nothing_is_guessed_when_nothing_is_near(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, "eval", "x.py:env", "--zzzzzz")
    assert err[-1] == "sluicegate eval: error: unrecognized arguments: --zzzzzz"
    err = refused(capsys, "eval", "x.py:env", "extra")
    assert err[-1] == "sluicegate eval: error: unrecognized arguments: extra"
