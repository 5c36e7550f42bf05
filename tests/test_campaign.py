"""Campaigns end to end: real child processes running a fake job (tests/campaign_jobs)."""

from __future__ import annotations

import ast
import fcntl
import json
import os
import shutil
import signal
import stat
import sys
import warnings
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import trio

from sluicegate.campaign import (
    CampaignError,
    CampaignFileError,
    CampaignLocked,
    Ledger,
    LedgerMissing,
    Report,
    read_report,
    reconcile,
    request_drain,
    run_campaign,
)
from sluicegate.campaign._freeze import JobCodeError, check_job_function
from sluicegate.campaign._launch import child_alive
from sluicegate.campaign._outdir import locked

D = Decimal
FAKE_JOB = Path(__file__).parent / "campaign_jobs" / "fakejob.py"
# Generous: it bounds a wait on child processes, and fails the test if exceeded.
PATIENCE_S = 30


def _all_exist(paths: tuple[str | Path, ...]) -> bool:
    return all(os.path.exists(p) for p in paths)


def _read(path: str | Path) -> str:
    with open(path) as f:
        return f.read()


async def wait_for_files(*paths: str | Path) -> None:
    """Wait until other processes have made ``paths``; fail after PATIENCE_S."""
    with trio.fail_after(PATIENCE_S):
        # Another process makes them, so there is no trio event to wait on.
        while not _all_exist(paths):  # noqa: ASYNC110
            await trio.sleep(0.01)


async def wait_for_gone(lock: Path) -> None:
    """Wait until no process holds a child's ``lock`` (it has died); fail after PATIENCE_S."""
    with trio.fail_after(PATIENCE_S):
        # A signalled process dies in its own time, and is not our child.
        while child_alive(lock):  # noqa: ASYNC110
            await trio.sleep(0.01)


def write_result(out: Path, key: str, status: str, cost: str) -> None:
    """Write ``key``'s ``result.json`` in ``out`` as its child would have."""
    result = {"key": key, "outcome": {"status": status, "cost": cost}}
    (out / "jobs" / key / "result.json").write_text(json.dumps(result))


class Watch:
    """An observer that records every report and wakes a test when one matches."""

    def __init__(self) -> None:
        self.reports: list[Report] = []
        self._waiting: list[tuple[Callable[[Report], bool], trio.Event]] = []

    def __call__(self, report: Report) -> None:
        self.reports.append(report)
        for predicate, event in self._waiting:
            if predicate(report):
                event.set()

    async def until(self, predicate: Callable[[Report], bool]) -> Report:
        if not (self.reports and predicate(self.reports[-1])):
            event = trio.Event()
            self._waiting.append((predicate, event))
            with trio.fail_after(PATIENCE_S):
                await event.wait()
        return self.reports[-1]


class Env:
    """A temporary campaign: a copy of the fake job, a ledger, a plan and an output dir."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "src").mkdir()
        self.job_file = root / "src" / "fakejob.py"
        shutil.copy(FAKE_JOB, self.job_file)
        self.ledger_path = root / "ledger.db"
        self.ledger = Ledger.create(self.ledger_path, D("100"))
        self.out = root / "out"
        self.plan_path = root / "plan.json"
        self._gates: dict[str, int] = {}
        self._opened: set[str] = set()

    def path(self, name: str) -> str:
        return str(self.root / name)

    def open_gate(self, name: str) -> None:
        """Let every job waiting on the gate ``name`` (and any later one) finish."""
        path = self.path(name)
        self._opened.add(path)
        fd = self._gates.pop(path, None)
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _close_gates(self, candidates: list[dict[str, Any]]) -> None:
        # A gated job blocks on a shared lock of the gate file; holding the
        # exclusive lock here keeps the gate shut until open_gate().
        for candidate in candidates:
            gate = candidate.get("options", {}).get("gate")
            if gate is None or gate in self._gates or gate in self._opened:
                continue
            fd = os.open(gate, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._gates[gate] = fd

    def write_plan(self, candidates: list[dict[str, Any]], **fields: Any) -> Path:
        plan: dict[str, Any] = {
            "name": "camp",
            # As many as there are candidates: a larger one warns.
            "target": len(candidates),
            "max_parallel": 2,
            "max_spend": "50",
            "job": "fakejob:run",
            "job_path": "src",
        }
        plan.update(fields)
        self._close_gates(candidates)
        plan["candidates"] = [{"reservation": "1", **c} for c in candidates]
        self.plan_path.write_text(json.dumps(plan))
        return self.plan_path

    async def run(self, watch: Watch | None = None) -> Report:
        return await run_campaign(
            self.plan_path, self.out, self.ledger_path, observer=watch, drain_poll_interval=0.02
        )

    def scope(self, *below: str) -> tuple[str, ...]:
        """The campaign's ledger scope (its name and the id in campaign.json), and below."""
        manifest = json.loads((self.out / "campaign.json").read_text())
        return (manifest["plan"]["name"], manifest["id"], *below)

    def runs(self) -> list[str]:
        path = Path(self.path("runs.log"))
        return path.read_text().split() if path.exists() else []


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def statuses(report: Report) -> dict[str, str]:
    return {row.key: row.status for row in report.rows}


async def test_a_panel_runs_in_frozen_child_processes(env: Env) -> None:
    runs = env.path("runs.log")
    env.write_plan(
        [
            {"key": "a", "options": {"runs": runs, "cost": "0.25"}},
            {"key": "b", "options": {"runs": runs, "status": "blocked", "reason": "no"}},
            {"key": "c", "options": {"runs": runs, "status": "generated_unverified"}},
        ]
    )
    report = await env.run()
    assert statuses(report) == {"a": "verified", "b": "blocked", "c": "generated_unverified"}
    assert report.stop_reason == "panel_exhausted"
    assert (report.verified, report.running, report.pending) == (1, 0, ())
    assert sorted(env.runs()) == ["a", "b", "c"]
    a = report.row("a")
    assert a.cost == D("0.25") and a.exit_code == 0
    assert report.row("b").reason == "no"
    # The job ran from the campaign's frozen copy, in its own work dir.
    assert a.artifacts[1] == str((env.out / "code" / "fakejob.py").resolve())
    assert _read(a.artifacts[0]) == "a"
    assert report == read_report(env.out)
    # Each dispatch reservation was settled at the reported cost.
    assert env.ledger.usage(("camp",)).settled == D("0.25")
    assert env.ledger.usage(("camp",)).reserved == D(0)


async def test_async_jobs_and_bad_outcomes(env: Env) -> None:
    env.write_plan([{"key": "a"}, {"key": "b", "options": {"cost": "-1"}}], job="fakejob:arun")
    report = await env.run()
    assert statuses(report) == {"a": "verified", "b": "blocked"}
    assert report.row("a").reason == "async"
    assert "cost must be a non-negative Decimal" in (report.row("b").reason or "")


async def test_a_cost_the_ledger_cannot_record_blocks_that_job_and_the_campaign_goes_on(
    env: Env,
) -> None:
    gate = env.path("gate")
    env.write_plan(
        [
            {"key": "big", "reservation": "2", "options": {"cost": "1e20", "gate": gate}},
            {"key": "ok", "options": {"cost": "0.5", "gate": gate}},
            {"key": "later", "options": {"cost": "0.25"}},
            {"key": "stage", "options": {"stages": [["build", "1e20", "0"]]}},
        ],
        max_parallel=2,
    )
    watch = Watch()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(env.run, watch)
        await watch.until(lambda r: r.running == 2)  # both hold a reservation
        env.open_gate("gate")
    report = watch.reports[-1]
    assert statuses(report) == {
        "big": "blocked",
        "ok": "verified",
        "later": "verified",
        "stage": "blocked",
    }
    assert "AmountTooLarge" in (report.row("stage").reason or "")
    big = report.row("big")
    assert "the ledger cannot record" in (big.reason or "") and "1E+20" in (big.reason or "")
    assert big.cost == D("2")  # held to its dispatch reservation
    assert report.stop_reason == "panel_exhausted"
    # big and stage (which raised) are each held to their reservation: 2 + 0.5 + 0.25 + 1.
    assert report.spent == D("3.75") and report.held == 0
    assert (await env.run()).rows == report.rows  # a rerun reads it again, calmly


async def test_class_limit_holds_while_a_later_cpu_candidate_starts(env: Env) -> None:
    gate = env.path("gate")
    env.write_plan(
        [
            {"key": "g1", "resource_class": "gpu", "options": {"gate": gate}},
            {"key": "g2", "resource_class": "gpu", "options": {"gate": gate}},
            {"key": "c1", "resource_class": "cpu", "options": {"gate": gate}},
            {"key": "c2", "options": {"gate": gate}},
        ],
        max_parallel=3,
        class_limits={"gpu": 1, "cpu": 2},
    )
    watch = Watch()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(env.run, watch)
        seen = await watch.until(lambda r: r.running == 3)
        env.open_gate("gate")
    assert statuses(seen) == {"g1": "running", "g2": "pending", "c1": "running", "c2": "running"}
    assert seen.running_by_class == {"-": 1, "cpu": 1, "gpu": 1}
    assert max(r.running_by_class.get("gpu", 0) for r in watch.reports) == 1
    assert max(r.running for r in watch.reports) == 3
    assert watch.reports[-1].verified == 4


async def test_target_slots_are_reserved_for_running_jobs(env: Env) -> None:
    # Two verified results from an earlier campaign; the target is three.
    prior = env.root / "prior.json"
    prior.write_text(json.dumps({"key": "old1", "outcome": {"status": "verified"}}))
    prior2 = env.root / "prior2.json"
    prior2.write_text(json.dumps({"key": "b", "outcome": {"status": "verified", "cost": "1"}}))
    runs = env.path("runs.log")
    env.write_plan(
        [
            {"key": "a", "options": {"runs": runs, "gate": env.path("gate"), "status": "blocked"}},
            {"key": "b", "options": {"runs": runs}},
            {"key": "c", "options": {"runs": runs}},
            {"key": "d", "options": {"runs": runs}},
        ],
        target=3,
        max_parallel=3,
        prior=["prior.json", "prior2.json"],
    )
    watch = Watch()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(env.run, watch)
        first = await watch.until(lambda r: r.running == 1)
        env.open_gate("gate")
    # 2 verified + 1 running = target: nothing else ran beside "a" until it ended unverified.
    assert first.verified == 2 and first.pending == ("c", "d")
    assert statuses(first)["b"] == "prior_verified"
    assert max(r.running for r in watch.reports) == 1
    final = watch.reports[-1]
    assert statuses(final) == {
        "a": "blocked",
        "b": "prior_verified",
        "c": "verified",
        "d": "pending",
    }
    assert final.stop_reason == "target_reached" and final.verified == 3
    assert env.runs() == ["a", "c"]


async def test_budget_refusal_skips_to_a_cheaper_candidate(env: Env) -> None:
    env.write_plan(
        [
            {"key": "first", "reservation": "3", "options": {"cost": "3"}},
            {"key": "big", "reservation": "6"},
            {"key": "small", "reservation": "2", "options": {"cost": "1"}},
        ],
        max_spend="8",
        max_parallel=2,
    )
    report = await env.run()
    # big (6) never fits beside first's 3 of 8; small, later in the panel, did.
    assert statuses(report) == {"first": "verified", "big": "pending", "small": "verified"}
    assert report.stop_reason == "budget_exhausted"
    assert report.spent == D("4") and report.held == D(0)


async def test_an_overrun_blocks_later_dispatch(env: Env) -> None:
    env.write_plan(
        [
            {"key": "a", "options": {"cost": "2", "stages": [["build", "1", "5"]]}},
            {"key": "b", "reservation": "0"},
        ],
        max_spend="6",
        max_parallel=1,
    )
    report = await env.run()
    # a's stage overran: 5 + 2 > 6, so even a zero reservation is refused.
    assert report.row("a").cost == D("7")
    assert statuses(report) == {"a": "verified", "b": "pending"}
    assert report.stop_reason == "budget_exhausted"
    assert env.ledger.usage(env.scope()).remaining == D("-1")


async def test_uncertain_keeps_its_hold_stops_dispatch_until_reconciled(env: Env) -> None:
    env.write_plan(
        [
            {"key": "a", "reservation": "2", "options": {"uncertain": True, "reason": "vm?"}},
            {"key": "b", "reservation": "2", "options": {"crash": 3}},
            {"key": "c"},
        ],
    )
    report = await env.run()
    assert statuses(report) == {"a": "uncertain", "b": "uncertain", "c": "pending"}
    assert report.stop_reason == "reconciliation_required"
    assert "cleanup is uncertain: vm?" in (report.row("a").reason or "")
    assert "status 3" in (report.row("b").reason or "")
    assert env.ledger.usage(("camp",)).uncertain == D("4")
    # A rerun dispatches nothing while anything is uncertain.
    again = await env.run()
    assert statuses(again)["c"] == "pending"
    assert again.stop_reason == "reconciliation_required"

    with pytest.raises(CampaignError, match="not uncertain"):
        reconcile(env.out, "c", "blocked")
    reconcile(env.out, "a", "verified", D("1.5"))
    mid = reconcile(env.out, "b", "blocked")
    assert mid.row("a").reconciled and mid.row("a").cost == D("1.5")
    assert mid.row("b").cost == D("2")  # held in full, then settled in full
    assert mid.stop_reason == "reconciled" and mid.verified == 1
    final = await env.run()
    assert statuses(final) == {"a": "verified", "b": "blocked", "c": "verified"}
    assert final.stop_reason == "panel_exhausted"
    assert env.ledger.usage(("camp",)).uncertain == D(0)


async def test_open_stage_reservations_or_a_raising_job(env: Env) -> None:
    env.write_plan(
        [
            {"key": "a", "options": {"leave_open": "tests"}},
            {"key": "b", "reservation": "2", "options": {"fail": "boom"}},
            {"key": "c", "reservation": "3", "options": {"returns": 42}},
        ],
        max_parallel=3,  # all at once: none waits behind a's uncertain end
    )
    report = await env.run()
    assert statuses(report) == {"a": "uncertain", "b": "blocked", "c": "blocked"}
    assert "left 1 stage reservation(s) open" in (report.row("a").reason or "")
    assert "RuntimeError: boom" in (env.out / "jobs" / "b" / "stderr.log").read_text()
    assert env.ledger.usage(env.scope("a")).uncertain == D("1.5")
    # They may have spent before they broke off, and said nothing of what:
    # each is held to its dispatch reservation (it was settled at 0 before).
    b, c = report.row("b"), report.row("c")
    assert (b.cost, c.cost) == (D("2"), D("3"))
    assert b.reason == (
        "job raised RuntimeError('boom'); it reported no cost, so its dispatch "
        "reservation is settled at its full 2.00"
    )
    assert (c.reason or "").startswith("job returned 42, not an Outcome; it reported no cost")
    assert env.ledger.usage(env.scope()).settled == D("5")


async def test_drain_lets_running_jobs_finish_and_sticks(env: Env) -> None:
    gate = env.path("gate")
    env.write_plan([{"key": k, "options": {"gate": gate}} for k in "abcd"], max_parallel=2)
    watch = Watch()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(env.run, watch)
        await watch.until(lambda r: r.running == 2)
        request_drain(env.out)
        await watch.until(lambda r: r.draining)
        env.open_gate("gate")
    final = watch.reports[-1]
    assert final.stop_reason == "drained"
    assert statuses(final) == {"a": "verified", "b": "verified", "c": "pending", "d": "pending"}
    assert max(r.running for r in watch.reports) == 2
    # While the drain file exists, a rerun admits nothing.
    again = await env.run()
    assert again.stop_reason == "drained" and again.pending == ("c", "d")
    (env.out / "drain-request.json").unlink()
    assert (await env.run()).stop_reason == "target_reached"


_CONTROLLER = """
import sys, trio
from sluicegate.campaign import run_campaign
trio.run(run_campaign, sys.argv[1], sys.argv[2], sys.argv[3])
"""


def gated(env: Env, key: str, **options: object) -> dict[str, object]:
    """A candidate that logs its run, says it started, and waits at its own gate."""
    options.update(
        runs=env.path("runs.log"),
        gate=env.path(f"gate-{key}"),
        started=env.path(f"started-{key}"),
    )
    return {"key": key, "options": options}


async def kill_controller_once_running(env: Env, *keys: str) -> None:
    """Start a controller in a process and SIGKILL it once ``keys`` run with a pid."""
    args = [str(env.plan_path), str(env.out), str(env.ledger_path)]
    controller = await trio.lowlevel.open_process([sys.executable, "-c", _CONTROLLER, *args])
    try:
        await wait_for_files(*(env.path(f"started-{k}") for k in keys))
        with trio.fail_after(PATIENCE_S):
            # The report names each child's pid soon after its launch.
            while any(read_report(env.out).row(k).pid is None for k in keys):  # noqa: ASYNC110
                await trio.sleep(0.01)
    finally:
        controller.kill()
        await controller.wait()


async def test_resume_after_the_controller_is_killed(env: Env) -> None:
    env.write_plan([gated(env, k) for k in "abc"], max_parallel=2)
    await kill_controller_once_running(env, "a", "b")
    assert statuses(read_report(env.out)) == {"a": "running", "b": "running", "c": "pending"}
    # Child a finishes on its own after the controller died; child b dies without a result.
    env.open_gate("gate-a")
    await wait_for_files(env.out / "jobs" / "a" / "result.json")
    os.kill(int(_read(env.path("started-b"))), signal.SIGKILL)
    await wait_for_gone(env.out / "jobs" / "b" / "child.lock")

    report = await env.run()
    assert statuses(report) == {"a": "verified", "b": "uncertain", "c": "pending"}
    assert "controller stopped" in (report.row("b").reason or "")
    assert report.stop_reason == "reconciliation_required"
    states = {r.scope[-1]: r.state for r in env.ledger.reservations(env.scope())}
    assert states == {"a": "settled", "b": "uncertain"}
    assert sorted(env.runs()) == ["a", "b"]  # nothing ran twice, nothing new started

    reconcile(env.out, "b", "blocked", D("0"))
    env.open_gate("gate-c")
    final = await env.run()
    assert statuses(final) == {"a": "verified", "b": "blocked", "c": "verified"}
    assert sorted(env.runs()) == ["a", "b", "c"]


async def test_two_directories_with_one_plan_name_record_every_cost(env: Env) -> None:
    # Measured before the fix: the jobs really spent 5 against a cap of 3, and
    # the ledger showed 3 (directory B settled A's live holds at 0).
    runs = env.path("runs.log")
    env.write_plan(
        [gated(env, k, cost="1") for k in "ab"]
        + [{"key": k, "options": {"runs": runs, "cost": "1"}} for k in "cde"],
        max_spend="3",
        max_parallel=2,
    )
    out_a, out_b = env.out, env.root / "out-b"
    await kill_controller_once_running(env, "a", "b")
    env.open_gate("gate-a")
    env.open_gate("gate-b")
    await wait_for_files(out_a / "jobs" / "a" / "result.json", out_a / "jobs" / "b" / "result.json")
    env.out = out_b
    b = await env.run()
    env.out = out_a
    a = await env.run()
    real = D(len(env.runs()))
    assert env.ledger.usage(("camp",)).settled == real
    assert a.spent <= 3 and b.spent <= 3


async def test_stale_job_code_and_changed_plans_are_refused(env: Env) -> None:
    env.write_plan([{"key": "a"}])
    assert (await env.run()).verified == 1
    frozen = env.out / "code" / "fakejob.py"
    assert not os.access(frozen, os.W_OK) or os.geteuid() == 0
    # The identical command again: nothing reruns.
    assert (await env.run()).verified == 1

    env.job_file.write_text(env.job_file.read_text() + "\n# edited\n")
    with pytest.raises(CampaignError, match="stale job code"):
        await env.run()
    shutil.copy(FAKE_JOB, env.job_file)
    assert (await env.run()).verified == 1

    env.write_plan([{"key": "a"}, {"key": "b"}])
    with pytest.raises(CampaignError, match="new output directory"):
        await env.run()


async def test_a_reservation_made_just_before_a_crash_is_released(env: Env) -> None:
    env.write_plan([{"key": "a"}, {"key": "b", "reservation": "2"}], target=1)
    assert (await env.run()).stop_reason == "target_reached"
    # As if a controller reserved for b and died before recording it: no
    # child can have started, since the report is written before any launch.
    orphan = env.ledger.reserve(env.scope("b"), D("2"), note="dispatch")
    stage = env.ledger.reserve(env.scope("a", "x"), D("1"), note="stage x")
    assert (await env.run()).pending == ("b",)
    states = {r.id: (r.state, r.actual) for r in env.ledger.reservations(("camp",))}
    assert states[orphan] == ("settled", D(0))
    assert states[stage] == ("reserved", None)  # not a dispatch: left alone


async def test_an_earlier_report_counts_as_prior(env: Env) -> None:
    runs = env.path("runs.log")
    env.write_plan([{"key": "a", "options": {"runs": runs}}])
    await env.run()
    env.write_plan(
        [{"key": "a", "options": {"runs": runs}}, {"key": "b", "options": {"runs": runs}}],
        name="camp2",
        target=2,
        prior=["out/report.json"],
    )
    env.out = env.root / "out2"
    report = await env.run()
    assert statuses(report) == {"a": "prior_verified", "b": "verified"}
    assert report.prior_verified == ("a",) and report.verified == 2
    assert report.stop_reason == "target_reached"
    assert env.runs() == ["a", "b"]


async def test_one_controller_per_directory(env: Env) -> None:
    env.write_plan([{"key": "a"}])
    env.out.mkdir()
    with locked(env.out), pytest.raises(CampaignLocked):
        await env.run()
    assert not (env.out / "report.json").exists()


async def test_missing_ledger_and_bad_plan_fail_before_any_work(env: Env) -> None:
    env.write_plan([{"key": "a"}])
    with pytest.raises(LedgerMissing, match="ledger init"):
        await run_campaign(env.plan_path, env.out, env.root / "nope.db")
    env.write_plan([{"key": "a", "reservation": 1.5}], target="x")
    with pytest.raises(CampaignFileError) as info:
        await env.run()
    assert any("plan.target" in p for p in info.value.problems)
    assert any("plan.candidates[0].reservation" in p for p in info.value.problems)
    assert not env.out.exists()


@pytest.mark.parametrize("job", ["nosuchpackage:run", "fakejob.missing:run", "fakejob:nofunc"])
async def test_a_missing_job_is_refused_leaving_nothing_behind(env: Env, job: str) -> None:
    env.write_plan([{"key": "a"}], job=job)
    with pytest.raises(CampaignError, match=job.split(":")[0].split(".")[-1]):
        await env.run()
    assert not env.out.exists()
    assert env.ledger.scopes()[1:] == []  # nor any ledger scope


async def test_an_unreachable_target_warns_at_start(env: Env) -> None:
    env.write_plan([{"key": "a"}, {"key": "b"}], target=5)
    with pytest.warns(UserWarning, match=r"target 5 cannot be reached: .* 2 distinct key"):
        report = await env.run()
    assert report.verified == 2 and report.stop_reason == "panel_exhausted"


async def test_a_refused_start_does_not_warn_of_an_unreachable_target(env: Env) -> None:
    env.write_plan([{"key": "a"}], target=5)
    with pytest.warns(UserWarning, match="cannot be reached"):
        await env.run()
    other = Ledger.create(env.root / "other.db", D("1"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would fail the test
        with locked(env.out), pytest.raises(CampaignLocked):
            await env.run()
        with pytest.raises(CampaignError, match="was started with the ledger"):
            await run_campaign(env.plan_path, env.out, other.path)


def test_the_campaign_example_uses_only_public_names() -> None:
    examples = Path(__file__).resolve().parent.parent / "examples" / "campaign"
    for path in sorted(examples.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith("sluicegate"):
                    private = [part for part in name.split(".") if part.startswith("_")]
                    assert not private, f"{path.name} imports {name}"


async def test_child_logs_are_private(env: Env) -> None:
    env.write_plan([{"key": "a", "options": {"say": "hello"}}])
    old = os.umask(0)  # even a permissive umask must not widen the logs
    try:
        await env.run()
    finally:
        os.umask(old)
    job_dir = env.out / "jobs" / "a"
    for name in ("stdout.log", "stderr.log", "request.json", "result.json"):
        assert stat.S_IMODE((job_dir / name).stat().st_mode) == 0o600, name
    assert "out: hello" in (job_dir / "stdout.log").read_text()
    assert "err: hello" in (job_dir / "stderr.log").read_text()


def test_the_job_function_is_found_without_importing(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise SystemExit('never imported')\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "jobs.py").write_text(
        "import os\n"
        "from json import dumps as dumped\n"
        "async def run(request, ctx): ...\n"
        "def helper(): ...\n"
        "alias = helper\n"
        "try:\n    from fast import thing\nexcept ImportError:\n    thing = None\n"
        "class Job:\n    def method(self): ...\n"
        "def __getattr__(name): return run\n"
        "globals()['made'] = run\n"
    )
    for name in ("run", "helper", "alias", "dumped", "thing", "Job", "os"):
        check_job_function(f"pkg.sub.jobs:{name}", pkg)
    for name in ("nofunc", "method", "made"):
        with pytest.raises(JobCodeError, match=f"defines no '{name}'"):
            check_job_function(f"pkg.sub.jobs:{name}", pkg)
    with pytest.raises(JobCodeError, match=r"no module 'pkg\.missing'"):
        check_job_function("pkg.missing:run", pkg)
    single = tmp_path / "single.py"
    single.write_text("def run(request, ctx): ...\n")
    check_job_function("single:run", single)
    with pytest.raises(JobCodeError, match="not a package"):
        check_job_function("single.sub:run", single)
