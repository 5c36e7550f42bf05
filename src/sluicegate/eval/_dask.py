"""Rollouts on a Dask cluster: ``evaluate(..., dask=...)`` and ``sluicegate eval --dask``.

Only the attempt moves. The controller keeps the plan, the window, retries,
the drain, resume and the results log; each attempt of a rollout is one
Dask task (through :mod:`sluicegate.dask`'s bridge) that runs
:func:`~._rollout.attempt_here` on a worker, under trio, and sends back what
it made. What crosses is small and ours to pickle:

* the function is a :class:`RemoteAttempt`, holding the ``TARGET`` as a
  string; a worker loads the environment from it once per process;
* the item is the pickled :class:`~._slots.Slot`, which carries the rollout
  index, so :func:`~._rollout.current_rollout` works on the worker;
* the answer is the pickled outcome: a :class:`~._rollout.Scored` or the
  attempt's exception, traceback included. Pickling both here, rather than
  letting Dask do it, turns whatever cannot cross into an error row that
  says so, and keeps rollout failures out of Dask's own error log.

This module imports :mod:`sluicegate.dask`, a layer below ``eval``: it is
imported only when an evaluation asks for a cluster, so the extra stays
optional.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import logging
import math
import os
import signal
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, final

import attrs
import outcome
import trio
from distributed import get_worker
from distributed.protocol.pickle import dumps as _untyped_dumps
from distributed.protocol.pickle import loads as _untyped_loads
from tblib import pickling_support  # type: ignore[import-untyped]  # distributed's own dependency

from .._retry import attempt
from ..dask import DaskBridge, RemoteRun, open_dask
from ._config import UsageError
from ._rollout import AttemptFn, Scored, attempt_here, rollout_of
from ._target import Parts, file_of, resolve_target

if TYPE_CHECKING:
    from ._slots import Slot

__all__ = ["CONNECT_TIMEOUT", "LOCAL", "RemoteAttempt", "check", "dask_setup", "on_dask", "unpack"]

logger = logging.getLogger("sluicegate")

# `--dask local`: an embedded LocalCluster for the length of the evaluation.
LOCAL = "local"

# `--dask-timeout`: seconds to wait for the scheduler at a `--dask ADDRESS`
# (None: open_dask's default). The command sets it around its trio.run;
# from Python, pass evaluate() a bridge opened with connect_timeout= instead.
CONNECT_TIMEOUT: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "sluicegate_dask_connect_timeout", default=None
)

# What Dask pickles with (pickle, then cloudpickle for what pickle refuses,
# such as classes defined in __main__); Dask leaves both untyped.
_dumps: Callable[[object], bytes] = _untyped_dumps
_loads: Callable[[bytes], Any] = _untyped_loads


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- on the worker ------------------------------------------------------------

# One environment per process and target, loaded by the first rollout that
# needs it. A controller whose process also hosts workers (a cluster with
# processes=False) puts its own environment here, so that they share it
# rather than import the file a second time under the same module name.
# Invariant: written under _loading only, by _environment_here() (a worker's
# first rollout) and on_dask() (the controller's own, which replaces any other).
_loaded: dict[tuple[str, str | None], Parts] = {}
_loading = threading.Lock()


def _environment_here(target: str, digest: str | None, uploads: str | None) -> Parts:
    """The environment ``target`` names, as this process sees it; loaded once.

    A file target is read from its own path when the file there is the one
    the controller has (same digest), else from the copy uploaded to this
    worker's directory.

    Raises:
        RuntimeError: naming the target and why it does not load here.
    """
    key = (target, digest)
    with _loading:
        parts = _loaded.get(key)
        if parts is None:
            try:
                parts = _loaded[key] = resolve_target(_where_here(target, digest, uploads))
            except Exception as exc:
                raise RuntimeError(
                    f"the environment {target} cannot be loaded on this worker "
                    f"(pid {os.getpid()}): {exc}"
                ) from exc
    return parts


def _where_here(target: str, digest: str | None, uploads: str | None) -> str:
    if digest is None:
        return target  # a module: imported by name
    where, _, attr = target.rpartition(":")
    own = Path(where)
    if own.is_file() and _digest(own) == digest:
        return target
    if uploads is not None:
        copy = Path(uploads, own.name)
        if copy.is_file() and _digest(copy) == digest:
            return f"{copy}:{attr}"
    raise FileNotFoundError(
        f"neither {where} nor an uploaded copy of it is on this worker with the "
        f"content the controller has"
    )


def _uploads() -> str | None:
    """Where ``Client.upload_file`` puts files on the worker running this task."""
    try:
        return str(get_worker().local_directory)
    except ValueError:  # not on a worker: called directly, in a test
        return None


def _pack(result: outcome.Value[Scored] | outcome.Error) -> bytes:
    """``result`` pickled for the controller; what cannot be pickled becomes an error."""
    if isinstance(result, outcome.Value):
        try:
            return _dumps(result)
        except Exception as exc:
            try:
                raise TypeError(
                    f"the result cannot be sent back from the worker: it does not pickle "
                    f"({type(exc).__name__}: {exc})"
                ) from None
            except TypeError as unsent:
                result = outcome.Error(unsent)
    error = result.error
    # tblib makes tracebacks picklable, so that the row keeps the worker's frames.
    pickling_support.install(error)
    try:
        packed = _dumps(result)
        _loads(packed)  # an exception may pickle and still not unpickle
    except Exception as exc:
        stand_in = RuntimeError(
            f"{type(error).__qualname__}: {error} (this exception cannot be sent back from "
            f"the worker: {type(exc).__name__}: {exc})"
        ).with_traceback(error.__traceback__)
        pickling_support.install(stand_in)
        packed = _dumps(outcome.Error(stand_in))
    return packed


@final
@attrs.frozen
class RemoteAttempt:
    """What each Dask task runs: one attempt of one rollout, on a worker.

    Small on purpose: Dask pickles it with every batch of tasks. The
    environment is loaded on the worker from ``target`` (once per process).

    Attributes:
        target: The ``TARGET``, a file's path made absolute.
        digest: The SHA-256 of a file target's content, None for a module.
        timeout: Seconds the attempt may run, timed on the worker, or None.
    """

    target: str
    digest: str | None = None
    timeout: float | None = None

    @property
    def __name__(self) -> str:
        """What Dask names its tasks after (the dashboard shows ``eval-rollout-<id>``)."""
        return "eval-rollout"

    def __call__(self, task: bytes) -> Coroutine[Any, Any, bytes]:
        """The attempt for ``task`` (a pickled slot), for the bridge to run under trio.

        Never raises: what the attempt made, failure included, comes back
        pickled (see :func:`unpack`).
        """
        # Read here, in the task's own thread, where Dask says which worker this is.
        return self._attempt(task, _uploads())

    async def _attempt(self, task: bytes, uploads: str | None) -> bytes:
        try:
            env = _environment_here(self.target, self.digest, uploads)
            slot: Slot = _loads(task)
        except Exception as exc:
            return _pack(outcome.Error(exc))
        with rollout_of(slot.rollout):
            # The timeout is kept here, where the attempt runs: the controller
            # cannot stop a running task, and time queued on the cluster is not
            # the attempt's.
            tried = await attempt(functools.partial(attempt_here, env, slot), limit=self.timeout)
        return _pack(tried.result)


def unpack(packed: bytes) -> Scored:
    """What a :class:`RemoteAttempt` sent back: its :class:`Scored`, or its exception raised.

    Raises:
        Exception: the attempt's own, with the worker's traceback; or a
            :class:`RuntimeError` if the answer does not unpickle here.
    """
    try:
        result: outcome.Value[Scored] | outcome.Error = _loads(packed)
    except Exception as exc:
        raise RuntimeError(
            f"what the worker sent back cannot be unpickled here ({type(exc).__name__}: {exc}); "
            f"is every module the result uses importable in this process?"
        ) from exc
    return result.unwrap()


# -- on the controller --------------------------------------------------------


@final
@attrs.frozen
class _OnCluster:
    """The :data:`~._rollout.AttemptFn` that sends each attempt to the cluster."""

    remote: RemoteRun[bytes, bytes]

    async def __call__(self, env: Parts, slot: Slot) -> Scored:
        try:
            task = _dumps(slot)
        except Exception as exc:
            raise TypeError(
                f"task {slot.task_id} cannot be sent to the cluster: it does not pickle "
                f"({type(exc).__name__}: {exc})"
            ) from None
        return unpack(await self.remote(task))


def check(dask: object, parts: Parts) -> None:
    """Refuse a ``dask=`` value, or an environment, that cannot run on a cluster.

    Raises:
        TypeError: ``dask`` is neither text nor a bridge.
        UsageError: naming what is wrong, before anything runs.
    """
    takes = "'local', a scheduler address or (from Python) an open_dask() bridge"
    if not isinstance(dask, (str, DaskBridge)):
        raise TypeError(f"--dask must be {takes}, not {dask!r}")
    if not dask:
        raise UsageError(f"--dask must be {takes}, not {dask!r}")
    if parts.target is None:
        raise UsageError(
            "--dask needs the environment as a TARGET string (path/to/file.py:NAME or "
            "package.module:NAME): an environment object cannot be loaded on a worker"
        )


def dask_setup(worker: object) -> None:
    """Dask's preload hook, run in each worker process of ``--dask local`` as it starts.

    A Ctrl-C on the terminal reaches every process in its group, the
    workers included; they leave it to the controller, which drains on the
    first and cancels on the second, and would lose the rollouts in flight
    if the workers died of it.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _local_cluster(concurrency: int) -> dict[str, Any]:
    # Enough threads for the window: each rollout holds a worker thread for
    # as long as it runs, awaiting included.
    workers = max(1, min(os.cpu_count() or 1, concurrency))
    return {
        "n_workers": workers,
        "threads_per_worker": math.ceil(concurrency / workers),
        "preload": [__name__],  # see dask_setup
    }


async def _upload(bridge: DaskBridge, path: Path) -> None:
    upload = functools.partial(bridge.client.upload_file, str(path), load=False)
    try:
        await trio.to_thread.run_sync(upload)
    except Exception as exc:
        raise UsageError(
            f"--dask: cannot upload {path} to the workers: {type(exc).__name__}: {exc}"
        ) from exc


async def _check_threads(bridge: DaskBridge, concurrency: int) -> None:
    """Warn when the cluster cannot run ``concurrency`` rollouts at once."""
    threads = sum((await trio.to_thread.run_sync(bridge.client.nthreads)).values())
    if threads == 0:
        logger.warning("the Dask cluster has no workers yet: rollouts wait until one joins")
    elif threads < concurrency:
        logger.warning(
            "the Dask cluster has %d worker threads for -c %d: a rollout holds a thread "
            "while it runs, so the others wait in the cluster's queue",
            threads,
            concurrency,
        )


@asynccontextmanager
async def on_dask(
    dask: str | DaskBridge, parts: Parts, concurrency: int, limit: float | None
) -> AsyncIterator[AttemptFn]:
    """Open the cluster ``dask`` names and yield an attempt function that runs there.

    ``"local"`` starts an embedded ``LocalCluster`` with threads for
    ``concurrency`` rollouts, closed at the end; another string is a
    scheduler address; a :class:`~sluicegate.dask.DaskBridge` is used as it
    is; a scheduler address is waited for :data:`CONNECT_TIMEOUT` seconds.
    A file target is uploaded to the workers, except to the embedded
    cluster, which reads it where it is; a warning says when another
    cluster has fewer threads than ``concurrency``. Each attempt may run
    ``limit`` seconds on its worker (None: no limit).

    Raises:
        UsageError: the cluster cannot be started or reached, or the file
            cannot be uploaded.
    """
    target = parts.target
    assert target is not None, "check() refuses environments without a TARGET"
    path = file_of(target)
    digest = None if path is None else _digest(path)
    with _loading:
        _loaded[(target, digest)] = parts
    async with contextlib.AsyncExitStack() as stack:
        if isinstance(dask, DaskBridge):
            bridge = dask
        else:
            cluster = (
                open_dask(**_local_cluster(concurrency))
                if dask == LOCAL
                else open_dask(dask, connect_timeout=CONNECT_TIMEOUT.get())
            )
            try:
                bridge = await stack.enter_async_context(cluster)
            except Exception as exc:
                what = "start a local Dask cluster" if dask == LOCAL else f"connect to {dask}"
                raise UsageError(f"--dask: cannot {what}: {type(exc).__name__}: {exc}") from exc
        if dask != LOCAL:  # the embedded one shares our files and is sized for -c
            if path is not None:
                await _upload(bridge, path)
            await _check_threads(bridge, concurrency)
        remote: RemoteRun[bytes, bytes] = bridge.remote(RemoteAttempt(target, digest, limit))
        yield _OnCluster(remote)
