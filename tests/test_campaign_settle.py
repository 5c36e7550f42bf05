"""Settlement alone: what a job's end does to the campaign's reservations (no processes)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from sluicegate.campaign import MAX_AMOUNT, AmountTooLarge, Candidate, Ledger, Outcome, Plan, Row
from sluicegate.campaign._job import JobResult
from sluicegate.campaign._settle import Accounts

D = Decimal


TEN = D("10")


def plan(max_spend: Decimal = TEN) -> Plan:
    return Plan(
        name="camp",
        target=2,
        max_parallel=2,
        max_spend=max_spend,
        job="m:f",
        candidates=(Candidate("a", D("2")), Candidate("b", D("1"))),
    )


def accounts(tmp_path: Path, *, limit: Decimal = TEN, max_spend: Decimal = TEN) -> Accounts:
    ledger = Ledger.create(tmp_path / "ledger.db", limit)
    acc = Accounts(ledger, ("camp", "id1"), plan(max_spend))
    acc.open_scopes()
    return acc


def admitted(acc: Accounts, key: str) -> Row:
    candidate = acc.plan.candidate(key)
    reservation = acc.reserve_dispatch(candidate)
    assert reservation is not None
    return Row(key, "running", reservation_id=reservation, reserved=candidate.reservation)


def result(key: str, status: str = "verified", cost: str = "0", **more: object) -> JobResult:
    return JobResult(key, Outcome(status, cost=D(cost), **more))  # type: ignore[arg-type]


def states(acc: Accounts, key: str) -> list[str]:
    return [r.state for r in acc.ledger.reservations(acc.candidate_scope(key))]


def test_a_reported_cost_settles_the_dispatch(tmp_path: Path) -> None:
    acc = accounts(tmp_path)
    row = acc.settle_job(admitted(acc, "a"), result("a", cost="0.5"), missing="", exit_code=0)
    assert (row.status, row.cost, row.exit_code) == ("verified", D("0.5"), 0)
    assert acc.usage().settled == D("0.5") and acc.usage().reserved == 0


@pytest.mark.parametrize("cost", ["1e20", str(MAX_AMOUNT)])
def test_a_cost_the_ledger_cannot_record_blocks_the_job_and_holds_it_to_its_reservation(
    tmp_path: Path, cost: str
) -> None:
    # 1e20 is beyond any amount; MAX_AMOUNT fits alone but not on top of the rest.
    acc = accounts(tmp_path, limit=MAX_AMOUNT, max_spend=MAX_AMOUNT)
    a, b = admitted(acc, "a"), admitted(acc, "b")
    row = acc.settle_job(a, result("a", cost=cost), missing="", exit_code=0)
    assert row.status == "blocked"
    assert "a cost the ledger cannot record" in (row.reason or "")
    assert "settled at its full 2.00" in (row.reason or "")
    assert row.cost == D("2") and states(acc, "a") == ["settled"]
    # The campaign goes on: the next job settles normally.
    b = acc.settle_job(b, result("b", cost="0.25"), missing="", exit_code=0)
    assert b.status == "verified" and acc.usage().settled == D("2.25")


def test_no_result_holds_everything_and_a_late_one_is_imported(tmp_path: Path) -> None:
    acc = accounts(tmp_path)
    a = admitted(acc, "a")
    stage = acc.ledger.reserve((*acc.candidate_scope("a"), "build"), D("1"), note="stage build")
    lost = acc.settle_job(a, None, missing="it vanished", exit_code=-9)
    assert (lost.status, lost.reason, lost.awaiting_result) == ("uncertain", "it vanished", True)
    assert states(acc, "a") == ["uncertain", "uncertain"]
    assert acc.usage().uncertain == D("3")
    # The child had settled its stage before it wrote the result we then missed.
    acc.ledger.settle(stage, D("0.5"))
    late = acc.settle_job(lost, result("a", cost="0.25"), missing="", exit_code=None)
    assert (late.status, late.awaiting_result, late.cost) == ("verified", False, D("0.75"))
    assert acc.usage().uncertain == 0


def test_open_or_uncertain_stages_and_uncertain_cleanup(tmp_path: Path) -> None:
    acc = accounts(tmp_path)
    a = admitted(acc, "a")
    stage = acc.ledger.reserve((*acc.candidate_scope("a"), "x"), D("1"), note="stage x")
    acc.ledger.mark_uncertain(stage)  # what Budget.mark_uncertain does
    row = acc.settle_job(a, result("a"), missing="", exit_code=0)
    assert row.status == "uncertain" and not row.awaiting_result
    assert "1 stage reservation(s) open or uncertain" in (row.reason or "")
    b = acc.settle_job(
        admitted(acc, "b"),
        result("b", cleanup_uncertain=True, reason="vm?"),
        missing="",
        exit_code=0,
    )
    assert b.status == "uncertain" and b.reason == "the job reports its cleanup is uncertain: vm?"
    assert states(acc, "b") == ["uncertain"]


def test_by_hand_refuses_an_impossible_cost_before_settling_anything(tmp_path: Path) -> None:
    acc = accounts(tmp_path)
    lost = acc.settle_job(admitted(acc, "a"), None, missing="gone", exit_code=None)
    with pytest.raises(AmountTooLarge, match="cost must be at most"):
        acc.settle_by_hand(lost, "blocked", D("1e20"))
    assert states(acc, "a") == ["uncertain"]
    done = acc.settle_by_hand(lost, "blocked", D("0.5"))
    assert (done.status, done.cost, done.reconciled) == ("blocked", D("0.5"), True)


def test_a_campaign_touches_only_its_own_scope(tmp_path: Path) -> None:
    mine = accounts(tmp_path)
    theirs = Accounts(mine.ledger, ("camp", "id2"), mine.plan)
    theirs.open_scopes()
    held = admitted(theirs, "a")
    # "a" is pending in mine: an orphan of mine would be released, theirs is not.
    mine.release_orphans({"a", "b"})
    assert states(theirs, "a") == ["reserved"]
    orphan = mine.reserve_dispatch(mine.plan.candidate("a"))
    mine.release_orphans({"a"})
    assert states(mine, "a") == ["settled"] and orphan is not None
    assert held.reservation_id is not None


def test_a_job_that_never_began_gets_its_reservation_back_once(tmp_path: Path) -> None:
    acc = accounts(tmp_path)
    row = admitted(acc, "a")
    acc.ledger.mark_uncertain(row.reservation_id or 0)  # as a rerun before the fix left it
    assert acc.release_unstarted(row) and acc.release_unstarted(row)  # repeatable
    assert states(acc, "a") == ["settled"] and acc.usage().used == 0
    # A stage reservation proves its job began: nothing is given back.
    row = admitted(acc, "b")
    acc.ledger.reserve((*acc.candidate_scope("b"), "build"), D("1"), note="stage build")
    assert not acc.release_unstarted(row)
    assert states(acc, "b") == ["reserved", "reserved"]


def test_a_job_that_reported_no_cost_is_held_to_its_reservation(tmp_path: Path) -> None:
    acc = accounts(tmp_path)
    raised = JobResult("a", Outcome("blocked", reason="job raised X()"), cost_unknown=True)
    row = acc.settle_job(admitted(acc, "a"), raised, missing="", exit_code=0)
    assert (row.status, row.cost) == ("blocked", D("2"))
    assert row.reason == (
        "job raised X(); it reported no cost, so its dispatch reservation is "
        "settled at its full 2.00"
    )
    # Settled again (a controller killed before it recorded the row): the same.
    again = acc.settle_job(admitted_row_of(row), raised, missing="", exit_code=0)
    assert (again.status, again.cost, again.reason) == (row.status, row.cost, row.reason)
    assert states(acc, "a") == ["settled"]


def admitted_row_of(row: Row) -> Row:
    return Row(row.key, "running", reservation_id=row.reservation_id, reserved=row.reserved)
