"""The panel: one row per candidate, and every count the campaign needs, derived from them.

Nothing is counted apart from the rows: how many jobs run (in all and per
class), how many are verified, whether anything is uncertain. Admission reads
these counts, and the report is made from the same rows, so the two can never
disagree. The runner's window (``max_parallel``) is the only other bound, and
the campaign does not count it again.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from datetime import UTC, datetime

import trio

from ._ledger import ScopeUsage, scope_name
from ._plan import Candidate, Plan
from ._state import Report, Row, RowStatus, StopReason

__all__ = ["Panel", "now"]


def now() -> str:
    """The current UTC time as an ISO timestamp (milliseconds), as reports write it."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Panel:
    """The rows of one campaign, in plan order, and the counts derived from them.

    Args:
        plan: The campaign's plan.
        prior: Keys proven verified by the plan's ``prior`` results.
        rows: One row per candidate of ``plan``.
    """

    def __init__(self, plan: Plan, prior: Iterable[str], rows: dict[str, Row]) -> None:
        # Fixed.
        self.plan = plan
        self.prior = frozenset(prior)
        # Written only by set().
        # Invariant: one row per candidate of the plan, in plan order.
        self._rows = {c.key: rows[c.key] for c in plan.candidates}
        # Written only by set(): how many times a row stopped running.
        # Invariant: it never goes down (admission compares it with a value it saw).
        self._completions = 0
        # Set and replaced by set(); changed() waits on the current one.
        self._changed = trio.Event()

    @property
    def completions(self) -> int:
        """How many times a row has stopped running: what refused candidates wait for."""
        return self._completions

    def __getitem__(self, key: str) -> Row:
        return self._rows[key]

    def rows(self) -> list[Row]:
        """Every row, in plan order."""
        return list(self._rows.values())

    def keys(self, status: RowStatus) -> list[str]:
        """The keys of the rows with ``status``, in plan order."""
        return [r.key for r in self._rows.values() if r.status == status]

    def has(self, status: RowStatus) -> bool:
        """Whether any row has ``status``."""
        return any(r.status == status for r in self._rows.values())

    def verified(self) -> int:
        """Verified results, prior ones included; a key counts once."""
        verified = {r.key for r in self._rows.values() if r.status == "verified"}
        return len(self.prior | verified)

    def running_by_class(self) -> collections.Counter[str]:
        """Running jobs per class; ``"-"`` counts the ones without a class."""
        return collections.Counter(
            r.resource_class or "-" for r in self._rows.values() if r.status == "running"
        )

    def running(self) -> int:
        """Running jobs."""
        return sum(1 for r in self._rows.values() if r.status == "running")

    def slots(self) -> int:
        """Target slots left: ``target - verified - running``."""
        return self.plan.target - self.verified() - self.running()

    def has_room(self, candidate: Candidate) -> bool:
        """Whether ``candidate``'s class has room for one more running job."""
        name = candidate.resource_class
        if name is None:
            return True
        # The plan declares every class a candidate names.
        return self.running_by_class()[name] < self.plan.class_limits[name]

    def set(self, row: Row) -> None:
        """Replace the row of ``row.key`` and wake whoever waits for a change."""
        old = self._rows[row.key]
        self._rows[row.key] = row
        if old.status == "running" and row.status != "running":
            self._completions += 1
        self._changed.set()
        self._changed = trio.Event()

    async def changed(self) -> None:
        """Wait for the next :meth:`set`."""
        await self._changed.wait()

    def report(
        self,
        usage: ScopeUsage,
        stop_reason: StopReason | None,
        *,
        draining: bool = False,
    ) -> Report:
        """A report of the rows, with the campaign scope's ``usage`` in the ledger."""
        plan = self.plan
        by_class = self.running_by_class()
        return Report(
            name=plan.name,
            target=plan.target,
            verified=self.verified(),
            prior_verified=tuple(sorted(self.prior)),
            running=sum(by_class.values()),
            running_by_class=dict(sorted(by_class.items())),
            max_parallel=plan.max_parallel,
            class_limits=dict(plan.class_limits),
            rows=tuple(self._rows.values()),
            pending=tuple(self.keys("pending")),
            spent=usage.settled,
            held=usage.reserved + usage.uncertain,
            cap=plan.max_spend,
            stop_reason=stop_reason,
            draining=draining,
            updated=now(),
            ledger_scope=scope_name(usage.scope),
        )
