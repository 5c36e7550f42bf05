"""What a campaign keeps on disk: its manifest and its report (which is also its state)."""

from __future__ import annotations

from decimal import Decimal
from typing import Literal, final

import attrs

from ._job import Outcome
from ._plan import Plan

__all__ = ["Controller", "Manifest", "Report", "Row", "RowStatus", "StopReason"]

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


@final
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
        exit_code: Its child's exit status, when known (not for a child a
            resumed controller adopted: only its parent learns that).
        started, finished: ISO timestamps.
        reconciled: Resolved by ``campaign reconcile`` rather than by its child.
        pid: Its child's process id, once started.
        process_start: When that process started, as the operating system
            counts it (Linux: clock ticks since boot, from ``/proc/PID/stat``);
            None where it cannot be read. With ``pid`` it tells the child from
            a later process that reuses the id.
        awaiting_result: ``uncertain`` because its child left no result: a
            ``result.json`` it writes later is imported by the next
            ``campaign run`` or by ``campaign reconcile``.
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
    pid: int | None = None
    process_start: int | None = None
    awaiting_result: bool = False

    def with_outcome(self, outcome: Outcome) -> Row:
        """This row with the job's reported outcome."""
        return attrs.evolve(
            self, status=outcome.status, reason=outcome.reason, artifacts=outcome.artifacts
        )


@final
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
        ledger_scope: The campaign's scope in the ledger (``NAME/ID``), as
            ``sluicegate ledger show`` lists it.
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
    ledger_scope: str | None = None

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
class Controller:
    """The sluicegate that controls a campaign: its version and a hash of its source.

    Attributes:
        version: ``sluicegate.__version__``.
        source_hash: ``sha256:...`` of the installed ``sluicegate`` package's
            files, so that an edited checkout with an unchanged version differs.
    """

    version: str
    source_hash: str

    def __str__(self) -> str:
        return f"sluicegate {self.version} ({self.source_hash[:19]})"


@attrs.frozen
class Manifest:
    """``OUTDIR/campaign.json``: what this output directory is bound to.

    A rerun must bring the same plan, the same job code, the same ledger and
    the same controller (or ``--allow-upgrade``).

    Attributes:
        id: Made at the first run; the campaign's ledger scope is
            ``(plan.name, id)``, so two directories running plans of one
            name never touch each other's reservations. None in a directory
            started before ids existed: its scope is ``(plan.name,)``.
        controller: The sluicegate running the campaign; None in a directory
            started before it was recorded.
        upgrades: Earlier controllers, oldest first, each replaced through
            ``--allow-upgrade``.
    """

    plan: Plan
    code_hash: str
    job_source: str
    ledger: str
    created: str
    id: str | None = None
    controller: Controller | None = None
    upgrades: tuple[Controller, ...] = ()

    @property
    def scope(self) -> tuple[str, ...]:
        """The campaign's scope in the ledger."""
        return (self.plan.name,) if self.id is None else (self.plan.name, self.id)
