"""What a job sees and returns: its context, its budget handle and its outcome.

A job is a function ``job(ctx: JobContext) -> Outcome`` (or an ``async def``,
run with ``trio.run``) in an importable module. It runs alone in a fresh
``python -I`` process, imported from the campaign's frozen copy of its code.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, final

import attrs

from ._ledger import Ledger

__all__ = ["Budget", "JobContext", "JobRequest", "JobResult", "Outcome", "OutcomeStatus"]

OutcomeStatus = Literal["verified", "generated_unverified", "blocked"]


def _cost(_: object, attribute: attrs.Attribute[Any], value: Decimal) -> None:
    if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative Decimal, got {value!r}")


def _paths(value: Iterable[str | os.PathLike[str]]) -> tuple[str, ...]:
    # Jobs naturally hand over Path objects; the report stores strings.
    if isinstance(value, (str, os.PathLike)):
        raise TypeError(f"artifacts must be a sequence of paths, not one path: {value!r}")
    return tuple(os.fspath(v) for v in value)


@final
@attrs.frozen
class Outcome:
    """What a job reports.

    Attributes:
        status: ``verified`` (counts toward the target), ``generated_unverified``
            or ``blocked``.
        cost: What the job spent beyond the stage reservations it settled
            itself through :class:`Budget`; the dispatch reservation is
            settled with it.
        reason: Why, in a few words (required reading for ``blocked``).
        artifacts: Paths of what the job produced, kept in the report.
        cleanup_uncertain: The job cannot tell whether everything it started
            was cleaned up (a remote machine, say). The candidate is then
            ``uncertain``: its reservation stays held and the campaign stops
            dispatching until it is reconciled.
    """

    status: OutcomeStatus = attrs.field(
        validator=attrs.validators.in_(("verified", "generated_unverified", "blocked"))
    )
    cost: Decimal = attrs.field(default=Decimal(0), validator=_cost)
    reason: str | None = None
    artifacts: tuple[str, ...] = attrs.field(default=(), converter=_paths)
    cleanup_uncertain: bool = False


class Budget:
    """A job's handle on its candidate's scope in the campaign ledger.

    Stage reservations nest under the candidate, so they count against the
    candidate, campaign and global limits in one transaction. The calls are
    blocking SQLite calls; from async job code, wrap them in
    ``trio.to_thread.run_sync``.

    Args:
        ledger: The ledger file.
        scope: The candidate's scope path (campaign name, key).
    """

    def __init__(self, ledger: Path | str, scope: tuple[str, ...]) -> None:
        self._ledger = Ledger(ledger)
        self.scope = scope

    def reserve(self, stage: str, amount: Decimal) -> int:
        """Hold ``amount`` for ``stage`` under this candidate.

        Returns:
            The reservation id for :meth:`settle` or :meth:`mark_uncertain`.

        Raises:
            BudgetRefused: an enclosing scope lacks room; it is named.
        """
        return self._ledger.reserve((*self.scope, stage), amount, note=f"stage {stage}")

    def settle(self, reservation: int, actual: Decimal) -> None:
        """Record what a stage really cost (an overrun is kept)."""
        self._ledger.settle(reservation, actual)

    def mark_uncertain(self, reservation: int) -> None:
        """Keep a stage's full reservation held: its outcome is unknown."""
        self._ledger.mark_uncertain(reservation)

    def room(self) -> Decimal | None:
        """The most this candidate could reserve now (advice, not a promise)."""
        return self._ledger.room(self.scope)


@final
@attrs.frozen
class JobContext:
    """What a job receives.

    Attributes:
        key: The candidate's key.
        options: The candidate's free-form options from the plan.
        work_dir: A directory of the job's own, kept after it ends.
        budget: Reservations in the campaign ledger, under this candidate.
    """

    key: str
    options: dict[str, Any]
    work_dir: Path
    budget: Budget


@attrs.frozen
class JobRequest:
    """What the parent writes for a child: everything it needs to run one job.

    Attributes:
        started: A file the child creates before it imports the job: without
            it, the job never began (see :meth:`JobFiles.started`).
    """

    key: str
    job: str
    options: dict[str, Any]
    work_dir: str
    code_dir: str
    ledger: str
    scope: tuple[str, ...]
    result: str
    started: str


@attrs.frozen
class JobResult:
    """What a child writes when its job has ended (``result.json``).

    Attributes:
        cost_unknown: The job reported no cost: it raised (its import
            included) or returned something other than an :class:`Outcome`.
            It may have spent before that, so its dispatch reservation is
            settled at its full amount, never at the outcome's zero cost.
    """

    key: str
    outcome: Outcome
    cost_unknown: bool = False
