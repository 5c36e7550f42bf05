"""``sluicegate campaign ...``: exit statuses, messages, status output and the live view."""

from __future__ import annotations

import argparse
import io
import json
from decimal import Decimal
from pathlib import Path

import pytest
from rich.console import Console

from sluicegate.campaign import read_report
from sluicegate.campaign._cli import register
from sluicegate.campaign._view import LiveView, render
from test_campaign import Env


def main(argv: list[str]) -> int:
    """The commands as ``sluicegate`` wires them (through ``register``)."""
    parser = argparse.ArgumentParser(prog="sluicegate")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    status: int = args.handler(args)
    return status


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def run(env: Env, *extra: str) -> int:
    paths = [str(env.plan_path), str(env.out), "--ledger", str(env.ledger_path)]
    return main(["campaign", "run", *paths, *extra])


def test_run_status_reconcile(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    env.write_plan(
        [
            {"key": "a", "resource_class": "gpu", "options": {"cost": "0.5"}},
            {"key": "b", "options": {"uncertain": True}},
            {"key": "c"},
        ],
        max_parallel=1,
        class_limits={"gpu": 2},
    )
    assert run(env, "--no-live") == 3
    captured = capsys.readouterr()
    assert "reconciliation_required" in captured.out
    assert "uncertain: b" in captured.err and "campaign reconcile" in captured.err

    assert main(["campaign", "status", str(env.out)]) == 0
    out = capsys.readouterr().out
    assert "verified 1/10" in out and "no controller is running" in out
    assert main(["campaign", "status", str(env.out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stop_reason"] == "reconciliation_required"

    args = ["campaign", "reconcile", str(env.out), "b", "--as", "blocked", "--cost", "0.25"]
    assert main(args) == 0
    assert "b: blocked, cost 0.25" in capsys.readouterr().out
    assert main(args) == 2
    assert "not uncertain" in capsys.readouterr().err

    assert run(env, "--no-live") == 0
    report = read_report(env.out)
    assert report.stop_reason == "panel_exhausted" and report.spent == Decimal("0.75")


def test_refusals_exit_2_with_a_reason(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    env.write_plan([{"key": "a"}])
    assert main(["campaign", "run", str(env.plan_path), str(env.out), "--ledger", "no.db"]) == 2
    assert "ledger init" in capsys.readouterr().err
    env.write_plan([{"key": "a", "reservation": "-1"}], max_parallel="2")
    assert run(env) == 2
    err = capsys.readouterr().err
    assert "plan.max_parallel" in err
    assert main(["campaign", "status", str(env.out)]) == 2
    env.plan_path.unlink()
    assert run(env) == 2
    assert "No such file" in capsys.readouterr().err
    assert main(["ledger", "init", str(env.root / "no" / "l.db"), "--limit", "1"]) == 2
    assert main(["campaign", "drain", str(env.out)]) == 2
    assert "not a campaign output directory" in capsys.readouterr().err


def test_drain_command_stops_a_rerun(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    env.write_plan([{"key": "a"}, {"key": "b"}], target=1)
    assert run(env, "--no-live") == 0
    assert main(["campaign", "drain", str(env.out)]) == 0
    assert (env.out / "drain-request.json").exists()
    assert run(env, "--no-live") == 0
    assert read_report(env.out).stop_reason == "target_reached"


def test_render_and_live_view(env: Env) -> None:
    env.write_plan([{"key": "a", "resource_class": "gpu"}], class_limits={"gpu": 2})
    assert run(env, "--live") == 0
    report = read_report(env.out)
    console = Console(file=io.StringIO(), width=200, force_terminal=True)
    with LiveView(console) as view:
        view(report)
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "verified 1/10" in shown
    plain = Console(file=io.StringIO(), width=200)
    plain.print(render(report, rows=True))
    text = plain.file.getvalue()  # type: ignore[attr-defined]
    assert "gpu 0/2" in text and "cap 50.00" in text and "panel_exhausted" in text
    assert "a" in text.split("\n")[2]
