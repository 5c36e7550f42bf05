"""What a campaign keeps on disk: its manifest and its report (which is also its state)."""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

import attrs

from ._job import Outcome
from ._plan import Plan

__all__ = ["Manifest", "Report", "Row", "RowStatus", "StopReason"]

RowStatus = Literal[
    "pending",
    "prior_verified",
    "running",
    "verified",
    "generated_unverified",
    "blocked",
    "uncertain",
]
StopReason = Literal[
    "reconciliation_required",
    "target_reached",
    "drained",
    "budget_exhausted",
    "panel_exhausted",
    "reconciled",
]
FINISHED: frozenset[str] = frozenset({"verified", "generated_unverified", "blocked"})


@attrs.frozen
class Row:
    """One candidate in the report.

    Attributes:
        key: The candidate's key.
        status: Where it stands. ``running`` in a report left by a controller
            that died means its child's fate is being looked into on resume.
        resource_class: Its concurrency class, if any.
        reservation_id: The ledger id of its dispatch reservation, once dispatched.
        reserved: The dispatch reservation's amount.
        cost: What its scope has settled in the ledger (dispatch and stages).
        reason: Why it ended as it did (the job's reason, or the controller's).
        artifacts: Paths the job reported.
        exit_code: Its child's exit status, when known.
        started, finished: ISO timestamps.
        reconciled: Resolved by ``campaign reconcile`` rather than by its child.
    """

    key: str
    status: RowStatus
    resource_class: str | None = None
    reservation_id: int | None = None
    reserved: Decimal | None = None
    cost: Decimal | None = None
    reason: str | None = None
    artifacts: tuple[str, ...] = ()
    exit_code: int | None = None
    started: str | None = None
    finished: str | None = None
    reconciled: bool = False

    def with_outcome(self, outcome: Outcome) -> Row:
        """This row with the job's reported outcome."""
        return attrs.evolve(
            self, status=outcome.status, reason=outcome.reason, artifacts=outcome.artifacts
        )


@attrs.frozen
class Report:
    """``OUTDIR/report.json``, rewritten atomically after each admission and completion.

    Attributes:
        name: The campaign's name.
        target: Verified results wanted.
        verified: Verified results so far, prior ones included; a key counts once.
        prior_verified: Keys counted from the plan's ``prior`` results.
        running: Jobs running now (by class in ``running_by_class``).
        rows: One per candidate, in plan order.
        pending: Keys not dispatched yet.
        spent: Settled in the campaign's ledger scope.
        held: Reserved or uncertain in the campaign's ledger scope.
        cap: The campaign's ``max_spend``.
        stop_reason: Why the last run stopped; None while it runs.
            ``reconciled`` once ``campaign reconcile`` resolved the last
            uncertain candidate: no controller runs and the next run continues.
        draining: A drain was requested: no further job is admitted.
        updated: When this report was written.
    """

    name: str
    target: int
    verified: int
    prior_verified: tuple[str, ...]
    running: int
    running_by_class: dict[str, int]
    max_parallel: int
    class_limits: dict[str, int]
    rows: tuple[Row, ...]
    pending: tuple[str, ...]
    spent: Decimal
    held: Decimal
    cap: Decimal
    stop_reason: StopReason | None
    draining: bool
    updated: str

    def row(self, key: str) -> Row:
        """The row of ``key``.

        Raises:
            KeyError: no candidate has that key.
        """
        for row in self.rows:
            if row.key == key:
                return row
        raise KeyError(key)


@attrs.frozen
class Manifest:
    """``OUTDIR/campaign.json``: what this output directory is bound to.

    A rerun must bring the same plan, the same job code and the same ledger.
    """

    plan: Plan
    code_hash: str
    job_source: str
    ledger: str
    created: str
