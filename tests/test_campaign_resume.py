"""Resuming: a controller killed at any moment, children that outlive it, late results,
and a controller of another version. Real child processes running tests/campaign_jobs.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import signal
import sys
from decimal import Decimal
from pathlib import Path

import pytest
import trio

from sluicegate.campaign import CampaignError, read_report, reconcile, run_campaign
from sluicegate.campaign._launch import child_alive
from sluicegate.campaign._view import PlainView
from test_campaign import (
    PATIENCE_S,
    Env,
    Watch,
    _read,
    gated,
    kill_controller_once_running,
    statuses,
    wait_for_files,
    wait_for_gone,
    write_result,
)

D = Decimal


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


# A controller that dies (os._exit, as a SIGKILL would: no cleanup runs) at a
# chosen step of its first start, through run_campaign's `_step` seam.
_DIES_AT = """
import functools, os, sys, trio
from sluicegate.campaign import run_campaign

def step(name):
    if name == sys.argv[4]:
        os._exit(9)

trio.run(functools.partial(run_campaign, *sys.argv[1:4], _step=step))
"""


@pytest.mark.parametrize("moment", ["staging made", "code frozen", "manifest written"])
async def test_a_controller_killed_while_starting_leaves_a_directory_the_command_continues(
    env: Env, moment: str
) -> None:
    runs = env.path("runs.log")
    env.write_plan([{"key": "a", "options": {"runs": runs}}])
    args = [str(env.plan_path), str(env.out), str(env.ledger_path), moment]
    with trio.fail_after(PATIENCE_S):
        done = await trio.run_process([sys.executable, "-c", _DIES_AT, *args], check=False)
    assert done.returncode == 9
    assert not (env.out / "report.json").exists()
    # What each step left: the manifest only once it was written, never code/.
    assert (env.out / "campaign.json").exists() == (moment == "manifest written")
    assert not (env.out / "code").exists()
    assert len([p for p in env.out.iterdir() if p.name.startswith(".code")]) == 1
    report = await env.run()
    assert statuses(report) == {"a": "verified"} and env.runs() == ["a"]
    assert sorted(p.name for p in env.out.iterdir() if p.name.startswith(".code")) == []
    assert (env.out / "code" / "fakejob.py").is_file()


# A controller that dies once it has recorded an admission, before its child
# began the job: "launching" dies before launch() makes the job's directory;
# "spawn" dies in place of the spawn, holding the child's lock and logs;
# "spawned" dies after the spawn, before the report names the child's pid.
# "wait" says so in a file and waits, for the test to SIGKILL it there.
_DIES_ADMITTED = """
import functools, os, pathlib, signal, sys, trio
from sluicegate.campaign import run_campaign
from sluicegate.campaign._launch import spawn_process

moment = sys.argv[4]

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def step(name):
    if name == moment:
        die()

async def spawn(*args):
    if moment == "spawned":
        await spawn_process(*args)
    elif moment == "wait":
        pathlib.Path(sys.argv[5]).touch()
        await trio.sleep_forever()
    die()

trio.run(functools.partial(run_campaign, *sys.argv[1:4], _spawn=spawn, _step=step))
"""


async def _die_admitted(env: Env, moment: str) -> None:
    args = [str(env.plan_path), str(env.out), str(env.ledger_path), moment, env.path("waiting")]
    command = [sys.executable, "-c", _DIES_ADMITTED, *args]
    with trio.fail_after(PATIENCE_S):
        controller = await trio.lowlevel.open_process(command)
        try:
            if moment == "wait":
                await wait_for_files(env.path("waiting"))
                controller.kill()  # SIGKILL, from outside
        finally:
            assert await controller.wait() == -signal.SIGKILL
    row = read_report(env.out).row("a")
    assert (row.status, row.pid) == ("running", None)
    assert env.ledger.usage(env.scope()).reserved == D(1)


@pytest.mark.parametrize("moment", ["launching", "spawn", "wait"])
async def test_a_controller_killed_before_its_child_began_leaves_the_candidate_pending(
    env: Env, moment: str
) -> None:
    runs = env.path("runs.log")
    env.write_plan([{"key": "a", "options": {"runs": runs, "cost": "0.5"}}])
    await _die_admitted(env, moment)
    assert (env.out / "jobs" / "a").exists() == (moment != "launching")
    # Measured before the fix: a stayed uncertain for good (no result to
    # import, and every --as would lie about a job that never ran).
    shown = io.StringIO()
    view = PlainView(shown, start=read_report(env.out))
    report = await run_campaign(env.plan_path, env.out, env.ledger_path, observer=view)
    assert statuses(report) == {"a": "verified"} and env.runs() == ["a"]
    lines = [line.split(" ", 1)[1] for line in shown.getvalue().splitlines()]
    assert [line.split("  (")[0] for line in lines] == [
        "camp: 0 pending; left running by an earlier controller: a",
        "a: pending again, its job never began",
        "a: running",
        "a: verified, cost 0.50",
    ]
    usage = env.ledger.usage(env.scope())
    assert (usage.settled, usage.reserved, usage.uncertain) == (D("0.5"), D(0), D(0))
    # The first dispatch reservation was given back, the second settled.
    actuals = [r.actual for r in env.ledger.reservations(env.scope("a"))]
    assert actuals == [D(0), D("0.5")]


async def test_a_never_begun_job_left_uncertain_by_an_older_rerun_is_pending_again(
    env: Env,
) -> None:
    env.write_plan([{"key": "a", "options": {"runs": env.path("runs.log")}}])
    await _die_admitted(env, "spawn")
    # What a rerun before the fix made of it: uncertain, awaiting a result
    # that can never come, its reservation held as uncertain.
    path = env.out / "report.json"
    report = json.loads(path.read_text())
    [row] = report["rows"]
    row.update(status="uncertain", awaiting_result=True)
    path.write_text(json.dumps(report))
    env.ledger.mark_uncertain(row["reservation_id"])
    assert statuses(await env.run()) == {"a": "verified"} and env.runs() == ["a"]
    assert env.ledger.usage(env.scope()).uncertain == 0


async def test_a_child_that_began_its_job_unrecorded_stays_uncertain(env: Env) -> None:
    # The controller died after the spawn, before recording the pid; the
    # child began the job and died without a result: it may have spent.
    env.write_plan([{"key": "a", "options": {"runs": env.path("runs.log"), "crash": 3}}])
    await _die_admitted(env, "spawned")
    await wait_for_files(env.path("runs.log"))
    await wait_for_gone(env.out / "jobs" / "a" / "child.lock")
    report = await env.run()
    assert statuses(report) == {"a": "uncertain"} and env.runs() == ["a"]
    assert "controller stopped while it ran" in (report.row("a").reason or "")
    assert env.ledger.usage(env.scope()).uncertain == D(1)


async def test_a_directory_holding_someone_elses_code_is_refused(env: Env) -> None:
    env.write_plan([{"key": "a"}])
    (env.out / "code").mkdir(parents=True)
    with pytest.raises(CampaignError, match="holds a code/ that no campaign made"):
        await env.run()


async def test_a_child_that_outlives_its_controller_is_adopted_and_waited_for(env: Env) -> None:
    b = {"key": "b", "options": {"runs": env.path("runs.log")}}
    env.write_plan([gated(env, "a"), b], max_parallel=1)
    await kill_controller_once_running(env, "a")
    pid = int(_read(env.path("started-a")))
    watch = Watch()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(env.run, watch)
        first = await watch.until(lambda r: True)
        # Still running, not guessed uncertain; it fills the one place, so b waits.
        assert statuses(first) == {"a": "running", "b": "pending"}
        assert first.row("a").pid == pid
        env.open_gate("gate-a")
    final = watch.reports[-1]
    assert statuses(final) == {"a": "verified", "b": "verified"}
    assert max(r.running for r in watch.reports) == 1
    assert env.runs() == ["a", "b"]  # a ran once, in the first controller's child
    assert final.row("a").exit_code is None  # only its parent could learn it
    assert env.ledger.usage(env.scope()).uncertain == 0


async def test_stopping_a_resumed_controller_stops_its_adopted_child(env: Env) -> None:
    env.write_plan([gated(env, "a")])
    await kill_controller_once_running(env, "a")
    watch = Watch()
    with trio.fail_after(PATIENCE_S):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(env.run, watch)
                await watch.until(lambda r: r.running == 1)
                scope.cancel()  # what a second SIGINT does
    row = read_report(env.out).row("a")
    if row.process_start is None:
        pytest.skip("no /proc: an adopted child cannot be identified here")
    assert row.status == "uncertain" and row.awaiting_result
    assert "stopped" in (row.reason or "")
    assert not child_alive(env.out / "jobs" / "a" / "child.lock")
    env.open_gate("gate-a")


async def test_a_result_written_after_its_row_went_uncertain_is_imported_by_a_rerun(
    env: Env,
) -> None:
    env.write_plan([{"key": "a", "options": {"crash": 3}}, {"key": "b"}], max_parallel=1)
    first = await env.run()
    assert statuses(first) == {"a": "uncertain", "b": "pending"}
    assert first.row("a").awaiting_result
    # As if the job had written it late (a child nobody could stop, say).
    write_result(env.out, "a", "verified", "0.5")
    final = await env.run()
    assert statuses(final) == {"a": "verified", "b": "verified"}
    assert final.row("a").cost == D("0.5") and not final.row("a").awaiting_result
    assert env.ledger.usage(env.scope()).uncertain == 0


async def test_reconcile_imports_a_late_result_and_refuses_while_the_child_runs(
    env: Env,
) -> None:
    env.write_plan([{"key": "a", "options": {"crash": 3}}, {"key": "b"}], max_parallel=1)
    await env.run()
    with pytest.raises(CampaignError, match="no result to import"):
        reconcile(env.out, "a")
    lock = os.open(env.out / "jobs" / "a" / "child.lock", os.O_RDWR)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as a child still running would
        with pytest.raises(CampaignError, match="still runs"):
            reconcile(env.out, "a", "blocked")
    finally:
        os.close(lock)
    write_result(env.out, "a", "generated_unverified", "0.25")
    report = reconcile(env.out, "a")
    row = report.row("a")
    assert (row.status, row.cost, row.reconciled) == ("generated_unverified", D("0.25"), True)
    assert report.stop_reason == "reconciled"
    assert statuses(await env.run()) == {"a": "generated_unverified", "b": "verified"}


async def test_another_controller_is_refused_unless_upgrade_is_allowed(env: Env) -> None:
    env.write_plan([{"key": "a"}, {"key": "b", "options": {"status": "blocked"}}], target=2)
    await env.run()
    path = env.out / "campaign.json"
    manifest = json.loads(path.read_text())
    mine = manifest["controller"]
    # The directory as another sluicegate (version or source) left it.
    other = {"version": "0.0.1", "source_hash": "sha256:" + "0" * 64}
    path.write_text(json.dumps({**manifest, "controller": other}))
    with pytest.raises(CampaignError) as info:
        await env.run()
    message = str(info.value)
    assert "was started by sluicegate 0.0.1 (sha256:000000000000)" in message
    assert f"this is sluicegate {mine['version']} ({mine['source_hash'][:19]})" in message
    assert "--allow-upgrade" in message
    await run_campaign(env.plan_path, env.out, env.ledger_path, allow_upgrade=True)
    manifest = json.loads(path.read_text())
    assert manifest["controller"] == mine
    assert manifest["upgrades"] == [other]
    # A directory from before versions were recorded needs the same consent.
    del manifest["controller"]
    path.write_text(json.dumps(manifest))
    with pytest.raises(CampaignError, match="did not record its version"):
        await env.run()
