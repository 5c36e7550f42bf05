"""Admission: which candidate runs next, and when nothing ever will.

:class:`Admission` is the source the campaign hands to
:func:`sluicegate.run_stream`. It walks the pending candidates in plan order
and yields the first one that

1. has room in its resource class,
2. fits a target slot (``target - verified - running > 0``), and
3. gets its dispatch reservation from the ledger.

A refused reservation skips to a later candidate; refused candidates are
tried again after the next completion. When nothing is admissible it waits
for the panel to change, and it ends when nothing can ever be admitted. The
window (``max_parallel``) is the runner's to keep, not counted here.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable

import attrs
import trio

from .._runner import Drain
from ._panel import Panel, now
from ._plan import Candidate
from ._state import Row, StopReason

__all__ = ["Admission"]


class Admission:
    """The campaign's source: candidates, each yielded with its reservation made.

    Args:
        panel: The campaign's rows; admission reads every count from it.
        drain: Once requested, nothing more is admitted.
        reserve: Makes a candidate's dispatch reservation; returns its id, or
            None if the ledger refuses it.
        release: Gives back a reservation made for a candidate that is then
            not admitted after all.
        record: Records a row (in the panel and the report); called with the
            ``running`` row of each admitted candidate before it is yielded,
            so the report shows the reservation before any child starts.
    """

    def __init__(
        self,
        panel: Panel,
        drain: Drain,
        *,
        reserve: Callable[[Candidate], Awaitable[int | None]],
        release: Callable[[int], Awaitable[None]],
        record: Callable[[Row], Awaitable[None]],
    ) -> None:
        # Fixed: the rows it reads, the drain it obeys, and the campaign's verbs
        # it acts through (it changes a row only through ``record``).
        self.panel = panel
        self.drain = drain
        self._reserve = reserve
        self._release = release
        self._record = record
        # key -> panel.completions when its reservation was refused; written
        # only by candidates(). A refused key is tried again once a job ends.
        self._refused: dict[str, int] = {}
        # Written only by candidates(), once, when it ends on its own.
        self.end_reason: StopReason | None = None
        """Why the source ended, once it has; None while it runs or if it was closed."""

    def _refused_now(self, key: str) -> bool:
        return self._refused.get(key) == self.panel.completions

    def next_candidate(self) -> Candidate | None:
        """The first pending candidate, in plan order, that may be tried now."""
        if self.panel.slots() <= 0:
            return None
        for candidate in self.panel.plan.candidates:
            if (
                self.panel[candidate.key].status == "pending"
                and not self._refused_now(candidate.key)
                and self.panel.has_room(candidate)
            ):
                return candidate
        return None

    def _ended(self) -> StopReason | None:
        panel = self.panel
        if panel.has("uncertain"):
            return "reconciliation_required"
        if panel.verified() >= panel.plan.target:
            return "target_reached"
        if not panel.has("pending"):
            return "panel_exhausted"
        return None

    def _still_admissible(self) -> bool:
        """Whether a candidate chosen before an await may still be admitted."""
        return not (self.drain.requested or self._ended() is not None or self.panel.slots() <= 0)

    async def candidates(self) -> AsyncGenerator[Candidate, None]:
        """Yield candidates as they become admissible, each with its reservation made."""
        while True:
            if self.drain.requested:
                # The runner pulls no more after a drain; a pull already under
                # way ends here rather than reserving again.
                return
            self.end_reason = self._ended()
            if self.end_reason is not None:
                return
            candidate = self.next_candidate()
            if candidate is None:
                if self.panel.running() == 0:
                    # Nothing running can free a class, a slot or money: the
                    # pending candidates are all refused by the budget.
                    self.end_reason = "budget_exhausted"
                    return
                await self.panel.changed()
                continue
            # Shielded: once the ledger holds the money, the row must say so
            # before anything can interrupt us.
            with trio.CancelScope(shield=True):
                reservation = await self._reserve(candidate)
                if reservation is None:
                    self._refused[candidate.key] = self.panel.completions
                    continue
                if not self._still_admissible():
                    # A completion or a drain arrived while the ledger was busy.
                    await self._release(reservation)
                    continue
                row = attrs.evolve(
                    self.panel[candidate.key],
                    status="running",
                    reservation_id=reservation,
                    reserved=candidate.reservation,
                    started=now(),
                )
                await self._record(row)
            yield candidate
