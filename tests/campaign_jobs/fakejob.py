"""A fake campaign job for the tests: fast, deterministic, steered by its options.

Tests copy this file into a temporary directory and point a plan at it, so a
test can also edit the copy (to make the campaign's frozen code stale).

Options (all optional):
    status: the outcome status (default ``verified``).
    cost: the outcome cost, a string (default ``"0"``).
    started: a file to create when the job starts; it holds the process id.
    gate: a file the test holds an exclusive lock on; the job waits for the lock
        to be released before finishing.
    stages: ``[[name, reserve, actual], ...]`` stage reservations to make and settle.
    leave_open: a stage name to reserve and never settle.
    crash: exit at once with this status, writing no result.
    uncertain: report that cleanup is uncertain.
    fail: raise RuntimeError with this message.
    returns: return this value instead of an Outcome.
    say: text printed to stdout and stderr.
    runs: a file to which the key is appended (one line per run).
    on_term: a file to create on SIGTERM, which the job then ignores (it goes
        on waiting at its gate, and ends normally once the gate opens).
"""

from __future__ import annotations

import fcntl
import os
import signal
import sys
from decimal import Decimal
from pathlib import Path
from typing import cast

import trio

from sluicegate.campaign import JobContext, Outcome


def run(ctx: JobContext) -> Outcome:
    opts = ctx.options
    if "runs" in opts:
        with open(opts["runs"], "a") as f:
            f.write(ctx.key + "\n")
    if "say" in opts:
        print(f"out: {opts['say']}")
        print(f"err: {opts['say']}", file=sys.stderr)
    if "on_term" in opts:

        def noted(signum: int, frame: object) -> None:
            Path(opts["on_term"]).touch()

        signal.signal(signal.SIGTERM, noted)
    if "started" in opts:
        tmp = Path(opts["started"] + ".tmp")
        tmp.write_text(str(os.getpid()))
        tmp.rename(opts["started"])
    if "gate" in opts:
        # A child process has no trio event to wait on; blocking on the lock the
        # test holds needs no polling. The alarm (default action: terminate)
        # keeps a job from outliving a failed test for long.
        signal.alarm(120)
        fd = os.open(opts["gate"], os.O_RDONLY | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.close(fd)
        signal.alarm(0)
    if "crash" in opts:
        sys.stdout.flush()
        os._exit(int(opts["crash"]))
    if "fail" in opts:
        raise RuntimeError(opts["fail"])
    if "returns" in opts:
        return cast(Outcome, opts["returns"])  # breaking the contract, on purpose
    for name, reserve, actual in opts.get("stages", []):
        rid = ctx.budget.reserve(name, Decimal(reserve))
        ctx.budget.settle(rid, Decimal(actual))
    if "leave_open" in opts:
        ctx.budget.reserve(opts["leave_open"], Decimal("0.5"))
    (ctx.work_dir / "artifact.txt").write_text(ctx.key)
    return Outcome(
        status=opts.get("status", "verified"),
        cost=Decimal(opts.get("cost", "0")),
        reason=opts.get("reason"),
        artifacts=(ctx.work_dir / "artifact.txt", __file__),
        cleanup_uncertain=bool(opts.get("uncertain", False)),
    )


async def arun(ctx: JobContext) -> Outcome:
    """The same job as an ``async def``: the child runs it with trio.run."""
    await trio.lowlevel.checkpoint()
    outcome = run(ctx)
    return Outcome(outcome.status, outcome.cost, "async", outcome.artifacts)
