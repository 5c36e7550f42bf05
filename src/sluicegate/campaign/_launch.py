"""Launching children: one fresh ``python -I`` process per job, its logs, its lock, its end.

Each child holds a lock on ``jobs/KEY/child.lock`` for as long as it lives:
the controller takes the lock before the launch and hands the locked file to
the child, so there is no moment at which a live child is unlocked. The
operating system releases the lock when the child exits, whoever its parent
is. A controller resuming after a crash therefore knows, without guessing
from process ids, whether an earlier child still runs; if it does, the
controller adopts it (:class:`AdoptedChild`) and waits for it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

import trio

from ._convert import write_json_atomic
from ._job import JobRequest
from ._outdir import JobFiles, posix_fcntl

__all__ = [
    "TERMINATE_GRACE_S",
    "AdoptedChild",
    "Child",
    "Spawn",
    "child_alive",
    "launch",
    "process_start_time",
    "spawn_process",
    "stop",
]

# How long a child gets to exit after SIGTERM before it is killed.
TERMINATE_GRACE_S = 5.0

# -I drops PYTHONPATH, so a child would not find a sluicegate that is only on
# the parent's PYTHONPATH (a source checkout): it is handed the directory the
# parent imported sluicegate from. Third-party packages come from the
# interpreter's own site-packages, as -I leaves those in place.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_CHILD_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from sluicegate.campaign._child import main; sys.exit(main(sys.argv[1:]))"
)


class Child(Protocol):
    """What the controller needs of a child process (``trio.Process`` has it)."""

    @property
    def pid(self) -> int: ...

    async def wait(self) -> int | None:
        """Wait for the child to exit; its exit status, if it can be known."""
        ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


# Starts a child: (command, work dir, stdout fd, stderr fd, locked fd) -> the
# child. The child must inherit the locked fd, which is what makes it "alive".
Spawn = Callable[[list[str], Path, int, int, int], Awaitable[Child]]


async def spawn_process(
    command: list[str], cwd: Path, stdout: int, stderr: int, lock: int
) -> Child:
    """Start ``command`` as a child process with its output in the given files.

    The child inherits ``lock`` (a locked file descriptor) and keeps it open.
    """
    return await trio.lowlevel.open_process(
        command,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        pass_fds=(lock,),
        # Its own session: a Ctrl-C at the terminal reaches the controller,
        # which decides what happens to the children.
        start_new_session=True,
    )


def _open_private(path: Path) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    # O_CREAT's mode does not apply to a file left by an earlier attempt.
    os.fchmod(fd, 0o600)
    return fd


async def launch(files: JobFiles, request: JobRequest, spawn: Spawn = spawn_process) -> Child:
    """Start the child that runs ``request``, with private logs and its lock.

    Any earlier ``result.json`` and ``started`` file are removed first, so
    whatever the directory holds afterwards is this child's.

    Returns:
        The child, already running.

    Raises:
        OSError: it could not be started; ``BlockingIOError`` if an earlier
            child of this job still holds the lock.
    """
    fcntl = posix_fcntl()
    files.work.mkdir(parents=True, exist_ok=True)
    files.result.unlink(missing_ok=True)
    files.started.unlink(missing_ok=True)
    write_json_atomic(files.request, request, mode=0o600)
    command = [sys.executable, "-I", "-c", _CHILD_BOOT, _PACKAGE_ROOT, str(files.request.resolve())]
    lock = os.open(files.lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            exc.strerror = f"an earlier child still holds {files.lock}"
            raise
        stdout = _open_private(files.stdout)
        try:
            stderr = _open_private(files.stderr)
            try:
                return await spawn(command, files.work, stdout, stderr, lock)
            finally:
                os.close(stderr)
        finally:
            os.close(stdout)
    finally:
        # The child holds its own copy of the locked file; ours goes.
        os.close(lock)


def child_alive(lock: Path) -> bool:
    """Whether a child (or a process that inherited its lock) holds ``lock``."""
    fcntl = posix_fcntl()
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def process_start_time(pid: int) -> int | None:
    """When process ``pid`` started, as the OS counts it; None if it cannot be read.

    On Linux, clock ticks since boot (``/proc/PID/stat``, field 22): with the
    pid, it names one process, since an id is reused only by a later one.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from
    # the last ")". What follows starts at field 3.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


class AdoptedChild:
    """A child started by an earlier controller that is still running.

    Only a process's parent can learn its exit status, so :meth:`wait` waits
    for the child's lock instead and returns None.

    Args:
        pid: The child's process id, if it was recorded.
        process_start: Its start time as recorded (see :func:`process_start_time`).
        lock: Its ``child.lock``.
    """

    def __init__(self, pid: int | None, process_start: int | None, lock: Path) -> None:
        # Fixed: what was recorded of the child, and its lock.
        self._pid = pid
        self._start = process_start
        self._lock = lock

    @property
    def pid(self) -> int:
        return -1 if self._pid is None else self._pid

    def _wait_for_lock(self) -> None:
        fcntl = posix_fcntl()
        fd = os.open(self._lock, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        finally:
            os.close(fd)

    async def wait(self) -> None:
        # A blocked flock cannot be interrupted; if we are cancelled, the
        # thread is left to end when the child does.
        await trio.to_thread.run_sync(self._wait_for_lock, abandon_on_cancel=True)

    def _signal(self, sig: signal.Signals) -> None:
        if not child_alive(self._lock):
            return  # it has ended; wait() returns at once
        if self._pid is None or (
            self._start is not None and process_start_time(self._pid) != self._start
        ):
            raise ProcessLookupError(
                f"cannot tell which process holds {self._lock} (recorded pid {self._pid})"
            )
        os.kill(self._pid, sig)

    def terminate(self) -> None:
        """Send SIGTERM, if the process holding the lock is the recorded one.

        Raises:
            ProcessLookupError: the lock is held, but not (verifiably) by the
                recorded process; nothing was sent.
        """
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """Send SIGKILL, under the same condition as :meth:`terminate`."""
        self._signal(signal.SIGKILL)


async def stop(child: Child, grace: float = TERMINATE_GRACE_S) -> int | None:
    """Ask ``child`` to stop (SIGTERM), and kill it if it is still there after ``grace`` s.

    Returns:
        Its exit status, if known.

    Raises:
        ProcessLookupError: the child could not be signalled (an adopted child
            whose process cannot be identified); it may still run.
    """
    child.terminate()
    with trio.move_on_after(grace):
        return await child.wait()
    child.kill()
    return await child.wait()
