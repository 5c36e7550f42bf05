"""The job of the example campaign (plan.json): pretend to build and check an environment.

A campaign imports this module in a fresh ``python -I`` process from its own
frozen copy and calls :func:`build` once per candidate. Everything here is
simulated and takes a few milliseconds; a real job would call a build service
and a test runner, reserving money in the ledger before each paid stage.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal

from sluicegate.campaign import JobContext, Outcome


def build(ctx: JobContext) -> Outcome:
    """Build, then verify, one environment described by ``ctx.options``."""
    opts = ctx.options
    # Each paid stage reserves first; the ledger refuses if any enclosing
    # scope (candidate, campaign, global) lacks room.
    hold = ctx.budget.reserve("build", Decimal(opts.get("build_reserve", "0.50")))
    time.sleep(0.01)  # the "build"
    ctx.budget.settle(hold, Decimal(opts.get("build_cost", "0.30")))
    if opts.get("broken"):
        return Outcome("blocked", reason="the build failed")

    hold = ctx.budget.reserve("verify", Decimal("0.20"))
    time.sleep(0.01)  # the "tests"
    ctx.budget.settle(hold, Decimal("0.10"))
    bundle = ctx.work_dir / "bundle.json"
    bundle.write_text(json.dumps({"key": ctx.key, "options": opts}))
    status = "generated_unverified" if opts.get("flaky") else "verified"
    # cost: what the job spent outside its stage reservations (here, the
    # worker itself); the campaign settles its dispatch reservation with it.
    return Outcome(status, cost=Decimal("0.05"), artifacts=(str(bundle),))


if __name__ == "__main__":
    print("envjob is the job of examples/campaign/plan.json; run run_example.py instead")
