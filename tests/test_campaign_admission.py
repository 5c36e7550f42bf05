"""Admission rules over generated panels, with children replaced by in-process fakes.

The real child process is covered by test_campaign.py; here the scheduler's
promises are checked on every report of many generated campaigns: the window
and class limits, target slots, the budget cap, no dispatch once a candidate
is uncertain, no key run twice, and a stop reason that matches the end state.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluicegate.campaign import Ledger, Outcome, Report, run_campaign
from sluicegate.campaign._convert import load_json, write_json_atomic
from sluicegate.campaign._job import JobRequest, JobResult

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

    def __init__(self, request: JobRequest, spec: Spec, runs: list[str]) -> None:
        self.returncode: int | None = None
        self._request = request
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
            cost = spec.reservation * spec.cost_share / 100
            outcome = Outcome(
                status="blocked" if spec.ending == "uncertain" else spec.ending,  # type: ignore[arg-type]
                cost=cost,
                cleanup_uncertain=spec.ending == "uncertain",
            )
            write_json_atomic(Path(self._request.result), JobResult(spec.key, outcome))
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
        request = load_json(command[-1], JobRequest)
        return FakeChild(request, by_key[request.key], runs)

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
