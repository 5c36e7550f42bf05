"""Launching children alone: real processes, their locks, adoption and stopping."""

from __future__ import annotations

import fcntl
import os
import signal
import stat
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from sluicegate.campaign._job import JobRequest
from sluicegate.campaign._launch import (
    AdoptedChild,
    Child,
    child_alive,
    launch,
    process_start_time,
    spawn_process,
    stop,
)
from sluicegate.campaign._outdir import JobFiles
from test_campaign import PATIENCE_S, wait_for_files

# Waits on a shared lock of the gate file (the test holds it exclusively);
# with "deaf", it ignores SIGTERM first.
_CHILD = """
import fcntl, os, signal, sys
if "deaf" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(sys.argv[1] + ".deaf", "w").close()
signal.alarm(60)
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_SH)
print("through the gate")
"""


def files_and_request(tmp_path: Path) -> tuple[JobFiles, JobRequest]:
    files = JobFiles(tmp_path / "jobs" / "k")
    request = JobRequest(
        key="k",
        job="m:f",
        options={},
        work_dir=str(files.work),
        code_dir=str(tmp_path),
        ledger=str(tmp_path / "ledger.db"),
        scope=("c", "k"),
        result=str(files.result),
        started=str(files.started),
    )
    return files, request


def spawner(
    gate: Path, *extra: str
) -> Callable[[list[str], Path, int, int, int], Awaitable[Child]]:
    """launch()'s spawn, running _CHILD instead of a job: the launch around it is real."""

    async def spawn(command: list[str], cwd: Path, stdout: int, stderr: int, lock: int) -> Child:
        script = [sys.executable, "-c", _CHILD, str(gate), *extra]
        return await spawn_process(script, cwd, stdout, stderr, lock)

    return spawn


class Gate:
    """The exclusive lock a gated child waits on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def open(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


async def test_a_child_holds_its_lock_from_its_launch_to_its_end(tmp_path: Path) -> None:
    gate = Gate(tmp_path / "gate")
    files, request = files_and_request(tmp_path)
    old = os.umask(0)
    try:
        child = await launch(files, request, spawner(gate.path))
    finally:
        os.umask(old)
    try:
        # No moment without the lock: the controller took it before the launch.
        assert child_alive(files.lock)
        for path in (files.stdout, files.stderr, files.request):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        with pytest.raises(BlockingIOError, match="an earlier child still holds"):
            await launch(files, request, spawner(gate.path))
        gate.open()
        with trio.fail_after(PATIENCE_S):
            assert await child.wait() == 0
        assert not child_alive(files.lock)
        assert files.stdout.read_text() == "through the gate\n"
    finally:
        gate.open()
        with trio.move_on_after(PATIENCE_S):
            await stop(child)


async def test_an_adopted_child_is_waited_for_by_its_lock(tmp_path: Path) -> None:
    gate = Gate(tmp_path / "gate")
    files, request = files_and_request(tmp_path)
    child = await launch(files, request, spawner(gate.path))
    adopted = AdoptedChild(child.pid, process_start_time(child.pid), files.lock)
    done = trio.Event()

    async def wait_adopted() -> None:
        await adopted.wait()  # returns None: only a parent learns the status
        done.set()

    with trio.fail_after(PATIENCE_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_adopted)
            await trio.testing.wait_all_tasks_blocked()
            assert not done.is_set() and child_alive(files.lock)
            gate.open()
            await child.wait()
    assert done.is_set()


async def test_an_adopted_child_is_signalled_only_if_it_is_the_recorded_process(
    tmp_path: Path,
) -> None:
    gate = Gate(tmp_path / "gate")
    files, request = files_and_request(tmp_path)
    child = await launch(files, request, spawner(gate.path))
    try:
        start = process_start_time(child.pid)
        if start is None:
            pytest.skip("no /proc: process start times cannot be read here")
        assert process_start_time(child.pid) == start
        for pid, when in ((None, None), (child.pid, start + 1)):
            with pytest.raises(ProcessLookupError, match="cannot tell which process"):
                AdoptedChild(pid, when, files.lock).terminate()
        with trio.fail_after(PATIENCE_S):
            assert await stop(AdoptedChild(child.pid, start, files.lock)) is None
            assert await child.wait() == -signal.SIGTERM
        assert not child_alive(files.lock)
        # Once it has ended, there is nothing to signal and nothing to refuse.
        AdoptedChild(None, None, files.lock).terminate()
    finally:
        gate.open()


async def test_stop_kills_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    gate = Gate(tmp_path / "gate")
    files, request = files_and_request(tmp_path)
    child = await launch(files, request, spawner(gate.path, "deaf"))
    try:
        await wait_for_files(tmp_path / "gate.deaf")
        with trio.fail_after(PATIENCE_S):
            assert await stop(child, grace=0.1) == -signal.SIGKILL
    finally:
        gate.open()


def test_start_times_of_processes_that_do_not_exist() -> None:
    assert process_start_time(2**22 + 12345) is None
    if Path("/proc/self/stat").exists():
        assert process_start_time(os.getpid()) is not None
