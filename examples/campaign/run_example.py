"""Run the example campaign end to end in a temporary directory.

It creates its own ledger (global limit 20.00), runs examples/campaign/plan.json
(six candidates, target three verified, two at a time, one GPU job at a
time), prints the report, then shows that a rerun of the same command runs
nothing again. Takes a few seconds: each job is a fresh Python process.
"""

from __future__ import annotations

import tempfile
from decimal import Decimal
from pathlib import Path

import trio
from rich.console import Console

from sluicegate.campaign import Ledger, format_money, render, run_campaign

HERE = Path(__file__).resolve().parent


async def main(tmp: Path) -> None:
    ledger = Ledger.create(tmp / "ledger.db", Decimal("20.00"))
    out = tmp / "out"
    report = await run_campaign(HERE / "plan.json", out, ledger.path)
    Console(width=100).print(render(report, rows=True))
    assert report.stop_reason == "target_reached", report.stop_reason
    assert report.verified == 3

    # The identical command continues where it stopped: the target is met,
    # so nothing runs and nothing is spent twice.
    again = await run_campaign(HERE / "plan.json", out, ledger.path)
    assert again.rows == report.rows and again.spent == report.spent
    # The campaign's own scope in the ledger: the plan's name and the id in
    # OUT/campaign.json (the report names it).
    assert report.ledger_scope is not None
    usage = ledger.usage(tuple(report.ledger_scope.split("/")))
    held = usage.reserved + usage.uncertain
    print(f"ledger: settled {format_money(usage.settled)}, still held {format_money(held)}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        trio.run(main, Path(tmp))
