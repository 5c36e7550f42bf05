"""Admission rules over generated panels, with children replaced by in-process fakes.

The real child process is covered by test_campaign.py; here the scheduler's
promises are checked on every report of many generated campaigns: the window
and class limits, target slots, the budget cap, no dispatch once a candidate
is uncertain, no key run twice, and a stop reason that matches the end state.
Then :class:`Admission` alone, over a panel and an in-memory budget.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluicegate import Drain
from sluicegate.campaign import Candidate, Ledger, Plan, Report, Row, run_campaign
from sluicegate.campaign._admission import Admission
from sluicegate.campaign._panel import Panel
from sluicegate.campaign._state import RowStatus

FAKE_JOB = Path(__file__).parent / "campaign_jobs" / "fakejob.py"
ENDINGS = ("verified", "generated_unverified", "blocked", "uncertain", "crash")


@attrs.frozen
class Spec:
    key: str
    resource_class: str | None
    reservation: Decimal
    cost_share: int  # the job's cost, in percent of its reservation
    ending: str
    duration: int


class FakeChild:
    """Stands in for a child process: 'runs' the job during wait()."""

    pid = 1  # never signalled: terminate() and kill() only record

    def __init__(self, result: Path, spec: Spec, runs: list[str]) -> None:
        self.returncode: int | None = None
        self._result = result
        self._spec = spec
        runs.append(spec.key)

    async def wait(self) -> int:
        if self.returncode is None:
            # Checkpoints, not sleeps: ledger calls run in threads, and a mock
            # clock would spin while they do. Interleavings still vary.
            for _ in range(self._spec.duration):
                await trio.lowlevel.checkpoint()
            spec = self._spec
            if spec.ending == "crash":
                self.returncode = 1
                return 1
            # result.json, as a child writes it.
            outcome = {
                "status": "blocked" if spec.ending == "uncertain" else spec.ending,
                "cost": str(spec.reservation * spec.cost_share / 100),
                "cleanup_uncertain": spec.ending == "uncertain",
            }
            await trio.Path(self._result).write_text(
                json.dumps({"key": spec.key, "outcome": outcome})
            )
            self.returncode = 0
        return self.returncode

    def terminate(self) -> None:
        self.returncode = -15

    def kill(self) -> None:
        self.returncode = -9


specs = st.builds(
    Spec,
    key=st.just(""),
    resource_class=st.sampled_from([None, "gpu", "cpu"]),
    reservation=st.decimals(min_value=0, max_value=3, places=2),
    cost_share=st.integers(0, 100),
    ending=st.sampled_from(ENDINGS),
    duration=st.integers(0, 30),
)


@pytest.mark.filterwarnings("ignore:target .* cannot be reached")
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    panel=st.lists(specs, min_size=1, max_size=7),
    target=st.integers(1, 5),
    max_parallel=st.integers(1, 3),
    gpu_limit=st.integers(1, 2),
    cap=st.decimals(min_value=0, max_value=8, places=1),
)
def test_admission_keeps_every_rule(
    panel: list[Spec], target: int, max_parallel: int, gpu_limit: int, cap: Decimal
) -> None:
    panel = [attrs.evolve(spec, key=f"k{i}") for i, spec in enumerate(panel)]
    by_key = {spec.key: spec for spec in panel}
    reports: list[Report] = []
    runs: list[str] = []

    async def spawn(
        command: list[str], cwd: Path, stdout: int, stderr: int, lock: int
    ) -> FakeChild:
        # request.json, as the controller wrote it for the child.
        request = json.loads(await trio.Path(command[-1]).read_text())
        return FakeChild(Path(request["result"]), by_key[request["key"]], runs)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "src").mkdir()
        shutil.copy(FAKE_JOB, root / "src" / "fakejob.py")
        ledger = Ledger.create(root / "ledger.db", Decimal("100"))
        plan: dict[str, Any] = {
            "name": "camp",
            "target": target,
            "max_parallel": max_parallel,
            "class_limits": {"gpu": gpu_limit, "cpu": 3},
            "max_spend": str(max(cap, max(s.reservation for s in panel))),
            "job": "fakejob:run",
            "job_path": "src",
            "candidates": [
                {
                    "key": s.key,
                    "reservation": str(s.reservation),
                    "resource_class": s.resource_class,
                }
                for s in panel
            ],
        }
        cap = Decimal(plan["max_spend"])
        (root / "plan.json").write_text(json.dumps(plan))

        async def main() -> Report:
            return await run_campaign(
                root / "plan.json",
                root / "out",
                ledger.path,
                observer=reports.append,
                drain_poll_interval=3600,  # no drain here
                _spawn=spawn,
            )

        final = trio.run(main)
        usage = ledger.usage(("camp",))

    frozen_after_uncertain: set[str] | None = None
    for report in reports:
        assert report.running <= max_parallel
        assert report.running_by_class.get("gpu", 0) <= gpu_limit
        assert report.running == 0 or report.verified + report.running <= target
        assert report.spent + report.held <= cap
        dispatched = {r.key for r in report.rows if r.status != "pending"}
        if frozen_after_uncertain is not None:
            assert dispatched == frozen_after_uncertain, "dispatched after an uncertain result"
        elif any(r.status == "uncertain" for r in report.rows):
            frozen_after_uncertain = dispatched

    assert sorted(runs) == sorted(set(runs)), "a key ran twice"
    rows = {r.key: r for r in final.rows}
    for key in runs:
        ending = by_key[key].ending
        expected = "uncertain" if ending in ("uncertain", "crash") else ending
        assert rows[key].status == expected
    assert usage.reserved == 0
    assert usage.uncertain == sum(
        (by_key[k].reservation for k in runs if rows[k].status == "uncertain"), Decimal(0)
    )
    if any(r.status == "uncertain" for r in final.rows):
        assert final.stop_reason == "reconciliation_required"
    elif final.verified >= target:
        assert final.stop_reason == "target_reached"
    elif not final.pending:
        assert final.stop_reason == "panel_exhausted"
    else:
        assert final.stop_reason == "budget_exhausted"
        room = cap - usage.used
        assert all(by_key[k].reservation > room for k in final.pending)


# -- admission alone: a panel, an in-memory budget, no ledger, no processes ------------


class Budget:
    """Reservations against one cap, in memory."""

    def __init__(self, cap: Decimal) -> None:
        self.cap = cap
        self.held: dict[int, Decimal] = {}
        self.released: list[int] = []

    async def reserve(self, candidate: Candidate) -> int | None:
        await trio.lowlevel.checkpoint()
        if sum(self.held.values(), Decimal(0)) + candidate.reservation > self.cap:
            return None
        rid = len(self.held) + len(self.released) + 1
        self.held[rid] = candidate.reservation
        return rid

    async def release(self, rid: int) -> None:
        self.held.pop(rid)
        self.released.append(rid)


def _panel(candidates: list[Candidate], target: int, **limits: int) -> Panel:
    plan = Plan(
        name="p",
        target=target,
        max_parallel=9,
        max_spend=Decimal(100),
        job="m:f",
        candidates=tuple(candidates),
        class_limits=limits,
    )
    rows = {c.key: Row(c.key, "pending", resource_class=c.resource_class) for c in candidates}
    return Panel(plan, (), rows)


def _admission(
    panel: Panel,
    budget: Budget,
    drain: Drain | None = None,
    reserve: Callable[[Candidate], Awaitable[int | None]] | None = None,
) -> Admission:
    async def record(row: Row) -> None:
        panel.set(row)

    return Admission(
        panel,
        drain or Drain(),
        reserve=reserve or budget.reserve,
        release=budget.release,
        record=record,
    )


def _finish(panel: Panel, key: str, status: RowStatus = "verified") -> None:
    panel.set(attrs.evolve(panel[key], status=status))


async def test_admission_walks_the_panel_in_order_within_class_limits() -> None:
    c = Candidate
    one = Decimal(1)
    panel = _panel(
        [c("g1", one, resource_class="gpu"), c("g2", one, resource_class="gpu"), c("x", one)],
        target=3,
        gpu=1,
    )
    admission = _admission(panel, Budget(Decimal(10)))
    source = admission.candidates()
    assert (await source.__anext__()).key == "g1"
    # g2 waits for the GPU class; the unclassed x further down goes first.
    assert (await source.__anext__()).key == "x"
    assert panel.running_by_class() == {"gpu": 1, "-": 1}
    async with trio.open_nursery() as nursery:
        got: list[str] = []

        async def pull() -> None:
            got.append((await source.__anext__()).key)

        nursery.start_soon(pull)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []  # nothing admissible: it waits for the panel to change
        _finish(panel, "g1")
    assert got == ["g2"]
    _finish(panel, "x")
    _finish(panel, "g2")
    with pytest.raises(StopAsyncIteration):
        await source.__anext__()
    assert admission.end_reason == "target_reached"


async def test_target_slots_count_running_jobs_and_unverified_ones_free_theirs() -> None:
    panel = _panel([Candidate(k, Decimal(1)) for k in "abc"], target=1)
    admission = _admission(panel, Budget(Decimal(10)))
    source = admission.candidates()
    assert (await source.__anext__()).key == "a"
    assert admission.next_candidate() is None  # 0 verified + 1 running = target
    _finish(panel, "a", "blocked")
    assert (await source.__anext__()).key == "b"
    _finish(panel, "b")
    with pytest.raises(StopAsyncIteration):
        await source.__anext__()
    assert admission.end_reason == "target_reached" and panel["c"].status == "pending"


async def test_a_refused_candidate_is_skipped_then_tried_after_a_completion() -> None:
    panel = _panel(
        [Candidate("a", Decimal(3)), Candidate("big", Decimal(5)), Candidate("s", Decimal(1))],
        target=3,
    )
    budget = Budget(Decimal(6))
    admission = _admission(panel, budget)
    source = admission.candidates()
    assert [(await source.__anext__()).key for _ in range(2)] == ["a", "s"]
    _finish(panel, "a")
    budget.held.clear()  # a settled, spending nothing
    # big was refused before a completion; it is tried again after it.
    assert (await source.__anext__()).key == "big"
    _finish(panel, "s")
    _finish(panel, "big")
    with pytest.raises(StopAsyncIteration):
        await source.__anext__()


async def test_nothing_running_and_every_pending_refused_is_budget_exhausted() -> None:
    panel = _panel([Candidate("a", Decimal(5))], target=1)
    admission = _admission(panel, Budget(Decimal(1)))
    assert [c async for c in admission.candidates()] == []
    assert admission.end_reason == "budget_exhausted"


async def test_a_drain_during_the_reservation_gives_it_back() -> None:
    panel = _panel([Candidate("a", Decimal(1))], target=1)
    drain = Drain()
    budget = Budget(Decimal(5))

    calls = []

    async def reserve_then_drain(candidate: Candidate) -> int | None:
        calls.append(candidate.key)
        assert len(calls) == 1, "reserved again after the drain"
        rid = await Budget.reserve(budget, candidate)
        drain.request("test")
        return rid

    admission = _admission(panel, budget, drain, reserve=reserve_then_drain)
    assert [c async for c in admission.candidates()] == []
    assert budget.released == [1] and panel["a"].status == "pending"
    assert admission.end_reason is None  # the campaign says "drained"
