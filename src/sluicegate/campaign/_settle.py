"""Settlement: a campaign's reservations in the ledger, and what each job's end does to them.

:class:`Accounts` is the campaign's only way into the ledger, and it works
only under the campaign's own scope (``(plan name, id)``): it cannot touch
the holds of another campaign, even one running a plan of the same name.

Every method is a short blocking call (one or a few SQLite transactions);
the controller makes them through ``trio.to_thread.run_sync``.
"""

from __future__ import annotations

from decimal import Decimal

import attrs

from ._job import JobResult, OutcomeStatus
from ._ledger import (
    AmountTooLarge,
    BudgetRefused,
    Ledger,
    Reservation,
    ScopeUsage,
    amount_problem,
    format_money,
)
from ._panel import now
from ._plan import Candidate, Plan
from ._state import Row

__all__ = ["DISPATCH", "Accounts"]

# The note of a dispatch reservation; stage reservations say "stage NAME".
DISPATCH = "dispatch"


class Accounts:
    """One campaign's side of the ledger.

    Args:
        ledger: The shared ledger.
        scope: The campaign's scope (see :attr:`Manifest.scope`).
        plan: Its plan, for the limits of the campaign and candidate scopes.
    """

    def __init__(self, ledger: Ledger, scope: tuple[str, ...], plan: Plan) -> None:
        # Fixed; the state is the ledger's.
        self.ledger = ledger
        self.scope = scope
        self.plan = plan

    def candidate_scope(self, key: str) -> tuple[str, ...]:
        """The scope of ``key``'s candidate; its job's stages nest below it."""
        return (*self.scope, key)

    def open_scopes(self) -> None:
        """Create the campaign's and its candidates' scopes with their limits."""
        scopes: list[tuple[tuple[str, ...], Decimal | None]] = [(self.scope, self.plan.max_spend)]
        scopes += [(self.candidate_scope(c.key), c.max_spend) for c in self.plan.candidates]
        self.ledger.open_scopes(scopes)

    def usage(self) -> ScopeUsage:
        """What the campaign's scope holds."""
        return self.ledger.usage(self.scope)

    def reserve_dispatch(self, candidate: Candidate) -> int | None:
        """Hold ``candidate``'s dispatch reservation; None if a limit refuses it."""
        try:
            return self.ledger.reserve(
                self.candidate_scope(candidate.key), candidate.reservation, note=DISPATCH
            )
        except BudgetRefused:
            return None

    def release(self, reservation: int) -> None:
        """Settle a reservation whose job never started at zero."""
        self.ledger.settle(reservation, Decimal(0))

    def release_orphans(self, pending: set[str]) -> None:
        """Release dispatch reservations of ``pending`` candidates.

        One is left when a controller died after reserving and before
        recording the admission; no child can have started, because the
        report is written before any launch.
        """
        for r in self.ledger.reservations(self.scope):
            key = r.scope[len(self.scope)] if len(r.scope) == len(self.scope) + 1 else None
            if key in pending and r.note == DISPATCH and r.state == "reserved":
                self.ledger.settle(r.id, Decimal(0))

    def release_unstarted(self, row: Row) -> bool:
        """Give back the dispatch reservation of ``row``, whose job never began.

        Safe to repeat: a reservation already settled is left as it is.

        Returns:
            Whether it was released. Not if the candidate's scope holds a
            stage reservation: only its job could have made one, so the job
            did begin; then nothing is changed.
        """
        reservations = self.ledger.reservations(self.candidate_scope(row.key))
        if any(r.note != DISPATCH for r in reservations):
            return False
        for r in reservations:
            if r.id == row.reservation_id and r.state != "settled":
                self.ledger.settle(r.id, Decimal(0))
        return True

    def _open(self, key: str, dispatch: int | None) -> tuple[list[Reservation], str | None]:
        """Open stage reservations of ``key``, and the state of its dispatch one."""
        reservations = self.ledger.reservations(self.candidate_scope(key))
        stages = [r for r in reservations if r.state != "settled" and r.id != dispatch]
        state = next((r.state for r in reservations if r.id == dispatch), None)
        return stages, state

    def settle_job(
        self, row: Row, result: JobResult | None, *, missing: str, exit_code: int | None
    ) -> Row:
        """Settle the reservations of a job that ended (or vanished) and return its row.

        * No result: ``uncertain``, awaiting one (``missing`` says why).
        * The job reports its cleanup uncertain, or leaves a stage reservation
          open or uncertain: ``uncertain``.
        * A job that reported no cost (``result.cost_unknown``: it raised)
          may have spent: its dispatch reservation is settled at its full
          amount, and its reason says so.
        * Otherwise the dispatch reservation is settled at the reported cost.
          A cost the ledger cannot store (above
          :data:`~sluicegate.campaign.MAX_AMOUNT`, or bringing its total
          there) makes the job ``blocked``, with that reason, and settles the
          dispatch reservation at its full amount.

        An uncertain job's open reservations are marked uncertain: they stay held.
        """
        key = row.key
        dispatch = row.reservation_id
        stages, dispatch_state = self._open(key, dispatch)
        why: str | None = None
        if result is None:
            why = missing
        elif result.outcome.cleanup_uncertain:
            why = "the job reports its cleanup is uncertain"
            if result.outcome.reason:
                why += f": {result.outcome.reason}"
        elif stages:
            why = f"the job left {len(stages)} stage reservation(s) open or uncertain"
        new = row if result is None else row.with_outcome(result.outcome)
        if why is not None:
            for r in stages:
                if r.state == "reserved":
                    self.ledger.mark_uncertain(r.id)
            if dispatch is not None and dispatch_state == "reserved":
                self.ledger.mark_uncertain(dispatch)
            new = attrs.evolve(new, status="uncertain", reason=why, awaiting_result=result is None)
        elif result is not None and result.cost_unknown:
            # It raised (or returned no Outcome) and may have spent before:
            # settling at zero would under-record, so it is held to what it
            # was allowed to spend.
            if dispatch is not None and dispatch_state != "settled":
                self.ledger.settle(dispatch, row.reserved or Decimal(0))
            reason = (
                f"{result.outcome.reason}; it reported no cost, so its dispatch "
                f"reservation is settled at its full {format_money(row.reserved)}"
            )
            new = attrs.evolve(new, reason=reason)
        elif dispatch is not None and dispatch_state != "settled":
            assert result is not None
            cost = result.outcome.cost
            problem = amount_problem(cost)
            if problem is None:
                try:
                    self.ledger.settle(dispatch, cost)
                except AmountTooLarge as exc:
                    problem = str(exc)
            if problem is not None:
                # Unrecordable: hold the job to what it was allowed to spend.
                self.ledger.settle(dispatch, row.reserved or Decimal(0))
                reason = (
                    f"the job reported a cost the ledger cannot record ({problem}); its "
                    f"dispatch reservation is settled at its full {format_money(row.reserved)}"
                )
                new = attrs.evolve(new, status="blocked", reason=reason)
        if result is not None:
            new = attrs.evolve(new, awaiting_result=False)
        cost_so_far = self.ledger.usage(self.candidate_scope(key)).settled
        return attrs.evolve(new, cost=cost_so_far, exit_code=exit_code, finished=now())

    def settle_by_hand(self, row: Row, status: OutcomeStatus, cost: Decimal | None) -> Row:
        """Resolve an uncertain job as ``status``: ``campaign reconcile --as``.

        Its dispatch reservation is settled at ``cost`` (at its full amount
        when None); stage reservations left open at their full amount.

        Raises:
            AmountTooLarge: ``cost`` is more than the ledger can store;
                nothing was settled.
        """
        if cost is not None:
            problem = amount_problem(cost)
            if problem is not None:
                raise AmountTooLarge(f"cost {problem}")
        for r in self.ledger.reservations(self.candidate_scope(row.key)):
            if r.state == "settled":
                continue
            actual = cost if r.id == row.reservation_id and cost is not None else r.amount
            self.ledger.settle(r.id, actual)
        return attrs.evolve(
            row,
            status=status,
            cost=self.ledger.usage(self.candidate_scope(row.key)).settled,
            reason=f"{row.reason}; reconciled as {status}",
            reconciled=True,
            awaiting_result=False,
        )
