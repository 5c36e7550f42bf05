"""Evaluations on a Dask cluster: ``evaluate(..., dask=...)`` and ``sluicegate eval --dask``.

Most tests share one in-process ``LocalCluster`` (``processes=False``: it
starts in about 50 ms) and reach it by its address, so the file-upload path
runs too. In-process workers share this process's modules, so a test can
hold a rollout with a ``threading.Event`` (``tests/eval_envs/on_cluster.py``)
and see what the environment recorded. One test starts worker processes and
shows from the pids in the rows that rollouts ran there; two run the command
itself.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import pickle
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio
from distributed import Client

import dask
from eval_helpers import run_eval
from sluicegate import Drain, Task, Taskset
from sluicegate.dask import open_dask
from sluicegate.eval import evaluate
from sluicegate.eval._dask import RemoteAttempt, unpack
from sluicegate.eval._slots import Slot

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).parent.parent
ENVS = Path(__file__).parent / "eval_envs"
ARITHMETIC = f"{ROOT / 'examples' / 'arithmetic.py'}:env"

# distributed leaves its constructors untyped.
new_client: Callable[..., Client] = Client


@pytest.fixture
def envs(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``tests/eval_envs/on_cluster.py`` as the module ``on_cluster``, its state reset.

    Importable by name, so every ``on_cluster:NAME`` target and the test see
    one module (a file target would load a fresh copy each time).
    """
    monkeypatch.syspath_prepend(str(ENVS))
    module = importlib.import_module("on_cluster")
    module.STOPPED.clear()
    module.STARTED.clear()
    module.GATE.clear()
    module._attempts.clear()
    return module


def rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def record(out: Path) -> dict[str, Any]:
    return json.loads((out / "run.json").read_text())  # type: ignore[no-any-return]


def same(row: dict[str, Any]) -> tuple[Any, ...]:
    """What must not depend on where a rollout ran: not its timing, not its pid."""
    result = row["result"]
    if isinstance(result, dict):
        result = {key: value for key, value in result.items() if key != "pid"}
    error = row["error"]
    return (
        row["task_id"],
        row["rollout"],
        row["status"],
        json.dumps(result, sort_keys=True),
        row["score"],
        row["attempts"],
        None if error is None else (error["type"], error["message"]),
        tuple((earlier["type"], earlier["message"]) for earlier in row["earlier_errors"]),
        row["result_repr"],
    )


def by_slot(found: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(row["task_id"], row["rollout"]): row for row in found}


async def test_rows_are_those_of_a_local_run(
    dask_address: str, envs: ModuleType, tmp_path: Path
) -> None:
    settings: dict[str, Any] = {"rollouts": 2, "concurrency": 4}
    here = await evaluate("on_cluster:env", output_dir=tmp_path / "here", **settings)
    there = await evaluate(
        "on_cluster:env", output_dir=tmp_path / "there", dask=dask_address, **settings
    )
    assert sorted(map(same, rows(tmp_path / "there"))) == sorted(map(same, rows(tmp_path / "here")))
    # current_rollout() was set on the worker: each result names its own rollout.
    assert all(row["result"]["rollout"] == row["rollout"] for row in rows(tmp_path / "there"))
    assert (
        (there.ok, there.errors, there.scores)
        == (here.ok, here.errors, here.scores)
        == (
            16,
            0,
            {"score": 0.75},
        )
    )
    mine, theirs = record(tmp_path / "here"), record(tmp_path / "there")
    assert {**mine["config"], "output": None} == {**theirs["config"], "output": None}
    assert mine["counts"] == theirs["counts"]


async def test_a_file_target_gives_the_rows_of_a_local_run(
    dask_address: str, tmp_path: Path
) -> None:
    # examples/arithmetic.py answers at random, so compare what does not, and
    # check each score against its own result.
    here = await evaluate(ARITHMETIC, output_dir=tmp_path / "here", rollouts=2, concurrency=8)
    there = await evaluate(
        ARITHMETIC, output_dir=tmp_path / "there", rollouts=2, concurrency=8, dask=dask_address
    )
    assert there.ok == here.ok == 40

    def slots(out: Path) -> list[tuple[str, int, str]]:
        return sorted((row["task_id"], row["rollout"], row["status"]) for row in rows(out))

    assert slots(tmp_path / "there") == slots(tmp_path / "here")
    for row in rows(tmp_path / "there"):
        a = int(row["task_id"])  # task n is "n + (3n + 1)"
        assert row["score"] == (1.0 if row["result"]["answer"] == 4 * a + 1 else 0.0)
    assert there.scores["score"] == pytest.approx(
        sum(row["score"] for row in rows(tmp_path / "there")) / 40
    )
    # Sent to the workers, for a cluster that may not share this file system.
    with new_client(dask_address) as client:
        uploaded = client.run(
            lambda dask_worker: (Path(dask_worker.local_directory) / "arithmetic.py").is_file()
        )
    assert set(uploaded.values()) == {True}


def test_a_worker_without_the_file_loads_the_uploaded_copy(tmp_path: Path) -> None:
    # What a worker on another machine does: the controller's path is not
    # there, the uploaded copy is.
    uploads = tmp_path / "worker"
    uploads.mkdir()
    source = ENVS / "on_cluster.py"
    shutil.copy(source, uploads / "on_cluster.py")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    slot = Slot("1", 1, Task(input="0", id="1"))
    gone = tmp_path / "elsewhere" / "on_cluster.py"
    found = RemoteAttempt(f"{gone}:env", digest)._attempt(pickle.dumps(slot), str(uploads))
    scored = unpack(trio.run(lambda: found))
    assert scored.result["rollout"] == 1
    assert scored.score == 0.5

    # An uploaded copy that differs from the controller's file is not used.
    (uploads / "on_cluster.py").write_text("raise SystemExit\n")
    other = RemoteAttempt(f"{gone}:other", digest)._attempt(pickle.dumps(slot), str(uploads))
    with pytest.raises(RuntimeError, match="cannot be loaded on this worker") as raised:
        unpack(trio.run(lambda: other))
    assert "content the controller has" in str(raised.value)


async def test_errors_keep_their_traceback_and_what_cannot_cross_is_an_error_row(
    dask_address: str, envs: ModuleType, tmp_path: Path
) -> None:
    await evaluate("on_cluster:mixed", output_dir=tmp_path / "here", fail_on_error=10)
    there = await evaluate(
        "on_cluster:mixed", output_dir=tmp_path / "there", fail_on_error=10, dask=dask_address
    )
    assert there.stop_reason == "completed"
    mine, theirs = by_slot(rows(tmp_path / "here")), by_slot(rows(tmp_path / "there"))
    for task in ("1", "3"):  # plain tasks
        assert same(theirs[task, 0]) == same(mine[task, 0])
    # The run's own error: the same row, with the worker's frames.
    failed = theirs["2", 0]
    assert same(failed) == same(mine["2", 0])
    assert failed["error"]["message"] == "task 2 fails on purpose"
    assert "in fails_here" in failed["error"]["traceback"]
    assert "on_cluster.py" in failed["error"]["traceback"]
    # A result that cannot be pickled: written as its repr() here, an error there.
    assert mine["4", 0]["result_repr"] is True
    assert theirs["4", 0]["error"]["type"] == "TypeError"
    assert "cannot be sent back from the worker" in theirs["4", 0]["error"]["message"]
    # An exception that cannot be pickled: named, with the reason.
    assert mine["5", 0]["error"]["type"] == "Holding"
    bad = theirs["5", 0]["error"]
    assert bad["type"] == "RuntimeError"
    assert bad["message"].startswith("Holding: it holds a lock (this exception cannot be sent")
    assert "on_cluster.py" in bad["traceback"]

    # A task that cannot be pickled never leaves: an error row says why.
    locked = await evaluate(
        "on_cluster:locked", output_dir=tmp_path / "locked", fail_on_error=10, dask=dask_address
    )
    assert (locked.ok, locked.errors) == (1, 1)
    unsent = by_slot(rows(tmp_path / "locked"))["2", 0]["error"]
    assert unsent["type"] == "TypeError"
    assert unsent["message"].startswith("task 2 cannot be sent to the cluster: it does not pickle")


async def test_retries_are_those_of_a_local_run(
    dask_address: str, envs: ModuleType, tmp_path: Path
) -> None:
    here = await evaluate("on_cluster:flaky", output_dir=tmp_path / "here", retries=1, rollouts=2)
    envs._attempts.clear()
    there = await evaluate(
        "on_cluster:flaky", output_dir=tmp_path / "there", retries=1, rollouts=2, dask=dask_address
    )
    assert here.ok == there.ok == 4
    theirs = by_slot(rows(tmp_path / "there"))
    assert sorted(map(same, theirs.values())) == sorted(map(same, rows(tmp_path / "here")))
    assert theirs["1", 1]["attempts"] == 2
    assert theirs["1", 1]["earlier_errors"][0]["type"] == "ConnectionError"


async def test_a_timeout_stops_the_rollout_on_its_worker(
    dask_address: str, envs: ModuleType, tmp_path: Path
) -> None:
    settings: dict[str, Any] = {"timeout": 0.5, "fail_on_error": 2}
    here = await evaluate("on_cluster:slow", output_dir=tmp_path / "here", **settings)
    assert envs.STOPPED == ["1"]
    there = await evaluate(
        "on_cluster:slow", output_dir=tmp_path / "there", dask=dask_address, **settings
    )
    # Bounded where it ran: the worker's rollout ended, not only our wait for it.
    assert envs.STOPPED == ["1", "1"]
    assert (here.ok, here.errors) == (there.ok, there.errors) == (1, 1)
    mine, theirs = by_slot(rows(tmp_path / "here")), by_slot(rows(tmp_path / "there"))
    assert same(theirs["1", 0]) == same(mine["1", 0])
    assert theirs["1", 0]["error"]["type"] == "TimeoutError"
    assert theirs["1", 0]["error"]["message"] == "attempt took longer than 0.5 s"


async def test_time_queued_on_the_cluster_is_not_the_attempts(
    envs: ModuleType, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # One thread: while the gate holds it, the other five rollouts wait in the
    # cluster's queue for longer than the timeout, and still pass.
    async with (
        open_dask(
            processes=False, n_workers=1, threads_per_worker=1, dashboard_address=":0"
        ) as bridge,
        trio.open_nursery() as nursery,
    ):
        reports = []

        async def run() -> None:
            reports.append(
                await evaluate(
                    "on_cluster:gated",
                    output_dir=tmp_path / "out",
                    concurrency=6,
                    timeout=1.0,
                    fail_on_error=2,
                    dask=bridge,
                )
            )

        nursery.start_soon(run)
        await trio.to_thread.run_sync(envs.STARTED.wait)
        await trio.sleep(1.5)  # real time: longer than the timeout
        envs.GATE.set()
    [report] = reports
    assert (report.ok, report.errors) == (5, 1)
    assert "the Dask cluster has 1 worker threads for -c 6" in caplog.text
    found = by_slot(rows(tmp_path / "out"))
    assert found["1", 0]["error"]["type"] == "TimeoutError"  # it ran too long
    # The others were out for longer than the timeout, but ran only briefly.
    assert all(found[str(task), 0]["duration_s"] > 1.0 for task in range(2, 7))


async def test_a_drain_lets_rollouts_finish_and_a_resume_completes(
    dask_address: str, envs: ModuleType, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    drain = Drain()
    reports = []

    async def run() -> None:
        reports.append(
            await evaluate(
                "on_cluster:gated", output_dir=out, concurrency=1, drain=drain, dask=dask_address
            )
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.to_thread.run_sync(envs.STARTED.wait)
        drain.request("enough")
        envs.GATE.set()
    [report] = reports
    assert report.stop_reason == "interrupted"
    assert [(row["task_id"], row["status"]) for row in rows(out)] == [("1", "ok")]

    resumed = await evaluate(output_dir=out, resume=True, dask=dask_address)
    assert resumed.stop_reason == "completed"
    assert sorted(row["task_id"] for row in rows(out)) == ["1", "2", "3", "4", "5", "6"]
    assert record(out)["counts"]["resumed"] == 1


async def test_refused_before_anything_runs(dask_address: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    adaptive = f"{ROOT / 'examples' / 'adaptive.py'}:env"
    with pytest.raises(ValueError, match="--dask cannot run a SampleSource"):
        await evaluate(adaptive, num_tasks=2, output_dir=out, dask=dask_address)

    class Inline:
        taskset = Taskset.from_iterable([1])

        async def run(self, task: object) -> object:
            return task

    with pytest.raises(ValueError, match="needs the environment as a TARGET string"):
        await evaluate(Inline(), output_dir=out, dask=dask_address)
    for wrong, error in (("", ValueError), (3, TypeError)):
        with pytest.raises(error, match="--dask must be 'local', a scheduler address"):
            await evaluate(ARITHMETIC, output_dir=out, dask=wrong)  # type: ignore[arg-type]
    with (
        dask.config.set({"distributed.comm.timeouts.connect": "0.2s"}),
        pytest.raises(ValueError, match=r"--dask: cannot connect to tcp://127\.0\.0\.1:9"),
    ):
        await evaluate(ARITHMETIC, output_dir=out, dask="tcp://127.0.0.1:9")
    assert not out.exists()


async def test_the_environment_runs_in_worker_processes(tmp_path: Path) -> None:
    target = f"{ENVS / 'on_cluster.py'}:env"
    report = await evaluate(target, output_dir=tmp_path / "out", concurrency=2, dask="local")
    assert report.ok == 8
    pids = {row["result"]["pid"] for row in rows(tmp_path / "out")}
    assert os.getpid() not in pids
    assert 1 <= len(pids) <= 2  # the embedded cluster: one process per core, at most -c


# -- the command --------------------------------------------------------------

# A local cluster takes longer to start than the other eval commands' 60 s allow for.
sluicegate = partial(run_eval, limit=90)


def test_eval_dask_local_gives_the_rows_of_a_local_run(tmp_path: Path) -> None:
    argv = (ARITHMETIC, "-n", "6", "-r", "2", "-c", "4", "--display", "none")
    here = sluicegate(tmp_path, *argv, "-o", "here")
    there = sluicegate(tmp_path, *argv, "-o", "there", "--dask", "local")
    assert here.returncode == there.returncode == 0, there.stderr
    assert "Traceback" not in there.stderr

    def slots(out: Path) -> list[tuple[str, int, str]]:
        return sorted((row["task_id"], row["rollout"], row["status"]) for row in rows(out))

    assert slots(tmp_path / "there") == slots(tmp_path / "here")
    assert len(slots(tmp_path / "there")) == 12
    for row in rows(tmp_path / "there"):
        assert row["score"] == (
            1.0 if row["result"]["answer"] == 4 * int(row["task_id"]) + 1 else 0.0
        )
    mine, theirs = record(tmp_path / "here"), record(tmp_path / "there")
    assert {**mine["config"], "output": None} == {**theirs["config"], "output": None}


def test_eval_dask_local_drains_on_sigint_and_resumes(tmp_path: Path) -> None:
    # Task 3, on a worker process, signals the controller once and finishes.
    target = f"{ENVS / 'on_cluster.py'}:signals"
    argv = ("-c", "2", "--display", "none", "--dask", "local")
    done = sluicegate(tmp_path, target, "-o", "out", *argv, EVAL_SIGINT_AT="3")
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    out = tmp_path / "out"
    assert record(out)["stop_reason"] == "interrupted"
    before = {row["task_id"] for row in rows(out)}
    assert "3" in before  # in flight when the signal came, and finished
    assert len(before) < 12

    resumed = sluicegate(tmp_path, "--resume", "out", *argv)
    assert resumed.returncode == 0, resumed.stderr
    keys = sorted(int(row["task_id"]) for row in rows(out) if row["status"] == "ok")
    assert keys == list(range(1, 13))
    assert record(out)["counts"]["resumed"] == len(before)


def test_a_rollout_raising_system_exit_fails_the_run_as_it_does_locally(tmp_path: Path) -> None:
    # Dask lets a SystemExit kill its worker; the rollout's own failure must
    # come back instead, and be judged as a local run judges it.
    target = f"{ENVS / 'base_exit.py'}:env"
    argv = (target, "-c", "2", "--display", "none")
    here = sluicegate(tmp_path, *argv, "-o", "here")
    there = sluicegate(tmp_path, *argv, "-o", "there", "--dask", "local")
    assert here.returncode == there.returncode == 1, there.stderr
    assert "sluicegate eval: failed: SystemExit: 4" in there.stderr
    assert "KilledWorker" not in there.stderr
    assert record(tmp_path / "there")["error"] == record(tmp_path / "here")["error"]


def test_an_unreachable_scheduler_is_named_at_once_and_given_up_after_dask_timeout(
    tmp_path: Path,
) -> None:
    # Nothing listens on port 9: without --dask-timeout Dask would wait 30 s in silence.
    argv = (ARITHMETIC, "-n", "2", "--display", "plain", "-o", "out")
    done = sluicegate(tmp_path, *argv, "--dask", "tcp://127.0.0.1:9", "--dask-timeout", "0.5")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == (
        "sluicegate eval: connecting to the Dask scheduler at tcp://127.0.0.1:9 "
        "(giving up after 0.5 s)"
    )
    assert lines[-1].startswith(
        "sluicegate eval: error: --dask: cannot connect to tcp://127.0.0.1:9"
    )
    assert "after 0.5 s" in lines[-1]
    refused = sluicegate(tmp_path, *argv, "--dask", "local", "--dask-timeout", "1")
    assert refused.returncode == 2
    assert "--dask-timeout needs --dask ADDRESS" in refused.stderr
    bad = sluicegate(tmp_path, *argv, "--dask", "tcp://127.0.0.1:9", "--dask-timeout", "0")
    assert bad.returncode == 2
    assert "--dask-timeout: must be a number of seconds > 0" in bad.stderr
