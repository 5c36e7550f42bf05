"""Dask as an :class:`~sluicegate.dask._bridge.Engine`, and the call that runs on a worker.

Everything that waits happens on the client's own event loop thread: the trio
thread only posts to it (``Client.map`` and ``loop.add_callback`` do not
block), and one small asyncio task per future waits there for the result and
hands it to the bridge.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar, final

import outcome
import trio
from dask.utils import funcname
from distributed import Client, Future
from distributed.protocol.pickle import dumps as _untyped_dumps

from ._bridge import Done
from ._errors import DaskError

__all__ = ["DaskEngine", "RemoteCancelled", "RemoteCall"]

logger = logging.getLogger("sluicegate")

R = TypeVar("R")

# What Dask pickles a task with (pickle, then cloudpickle); Dask leaves it untyped.
_dumps: Callable[[object], bytes] = _untyped_dumps

# What a cancelled Dask future raises. In distributed 2026.8 it is a subclass of
# concurrent.futures.CancelledError (an Exception); asyncio's, a BaseException
# that would slip past the runner, is caught too, whichever a release uses.
_CANCELLED = (concurrent.futures.CancelledError, asyncio.CancelledError)


class CarriedBaseException(DaskError):
    """A ``BaseException`` that is not an ``Exception``, carried from a worker to the caller.

    Private to the bridge: the worker raises it in place of what ``fn``
    raised (see :meth:`RemoteCall.__call__`), and the caller's side raises
    :meth:`rebuild` instead. It holds the original's class and ``args``
    (its ``repr()`` alone when they do not pickle), so it always pickles.
    """

    def __init__(self, kind: type[BaseException] | None, args: tuple[Any, ...], text: str) -> None:
        # Exceptions pickle as their class and args: all three go there.
        super().__init__(kind, args, text)
        self.kind = kind
        self.carried_args = args
        self.text = text

    @classmethod
    def of(cls, exc: BaseException) -> CarriedBaseException:
        kind: type[BaseException] | None = type(exc)
        args = exc.args
        # Dask's pickler logs what it cannot pickle at ERROR: here that is
        # a question, not a failure.
        with _quiet_here(_PICKLE_LOGGER):
            try:
                _dumps(args)
            except Exception:
                args = (str(exc),)
            try:
                _dumps(kind)
            except Exception:
                kind = None  # a class the caller could not import either
        return cls(kind, args, repr(exc))

    def __repr__(self) -> str:
        # What Dask's "Compute Failed" log line shows: the user's exception.
        return self.text

    __str__ = __repr__

    def rebuild(self) -> BaseException:
        """What ``fn`` raised, as its own type; a cancellation as :class:`RemoteCancelled`.

        A ``trio.Cancelled`` or ``asyncio.CancelledError`` raised again here
        would look like a cancellation of the caller's own scope.
        """
        kind = self.kind
        if kind is None:
            # As Dask sends an exception that does not pickle.
            return Exception(self.text)
        if issubclass(kind, (trio.Cancelled, *_CANCELLED)):
            return RemoteCancelled(f"the remote function raised {self.text} on its worker")
        try:
            return kind(*self.carried_args)
        except Exception:
            return Exception(self.text)


class RemoteCancelled(DaskError):
    """A run's work was cancelled on the cluster by something other than sluicegate.

    Someone called ``client.cancel``, the client closed, or the cluster
    lost the work. (When sluicegate cancels work because its run was
    cancelled, the run raises trio's ``Cancelled`` as usual.) Dask's own
    cancellation error is the ``__cause__``; whatever its base class in a
    given Dask release, this one is an ordinary ``Exception``, which the
    runner's fail-fast and a ``Retry`` handle like any other.

    Attributes:
        key: The Dask key of the cancelled task.
    """

    def __init__(self, message: str, key: object = None) -> None:
        super().__init__(message)
        self.key = key


async def _await(awaitable: Awaitable[R]) -> R:
    return await awaitable


@final
class RemoteCall:
    """``fn`` wrapped to run on a worker: what is pickled and sent.

    A plain ``fn`` runs in the worker's thread pool, as any Dask task. If
    calling ``fn`` returns a coroutine (``fn`` is an ``async def``), the
    coroutine runs to completion under ``trio.run`` in that same worker
    thread. A ``BaseException`` that is not an ``Exception`` leaves as a
    :class:`CarriedBaseException`, which the caller's side turns back.
    """

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, item: Any) -> Any:
        try:
            result = self.fn(item)
            if inspect.iscoroutine(result):
                return trio.run(_await, result)
            return result
        except BaseException as exc:
            if isinstance(exc, Exception):
                raise
            # Dask lets a KeyboardInterrupt or SystemExit through on purpose:
            # it closes the event loop of an in-process cluster (which the
            # client shares) and kills a worker process, so the item would
            # come back as KilledWorker, or never. Here it is only fn's answer
            # for this item: it crosses as an Exception and is raised again,
            # as its own type, on the caller's side.
            carried = CarriedBaseException.of(exc).with_traceback(exc.__traceback__)
        # Raised out here, with no __context__: Dask pickles that too (with
        # tblib), and the original may not pickle.
        raise carried

    def __repr__(self) -> str:
        return f"RemoteCall({self.fn!r})"


@final
class DaskEngine:
    """Submits through a :class:`distributed.Client` whose loop runs in its own thread."""

    def __init__(self, client: Client, *, reconnect_limit: str | None = None) -> None:
        self._client = client
        # How long the client waits for a lost scheduler, for the log line
        # that says so (None: not ours to tell, a caller's own client).
        self._reconnect_limit = reconnect_limit
        self._said_reconnecting = False
        loop = client.loop
        assert loop is not None, "a Client has its loop from construction on"
        self._loop = loop
        # asyncio keeps only weak references to tasks: hold them until done.
        self._watchers: set[asyncio.Task[None]] = set()

    def prepare(self, fn: Callable[[Any], Any]) -> RemoteCall:
        call = RemoteCall(fn)
        # Dask pickles the function with every batch; fail here, once and
        # before any item is sent, if it never can be.
        try:
            _dumps(call)
        except Exception as exc:
            raise TypeError(f"{fn!r} cannot be pickled to send to the cluster: {exc}") from exc
        return call

    def submit(
        self, call: Any, items: Sequence[Any], done: Sequence[Done], *, again: bool = False
    ) -> list[Future[Any]]:
        self._tell_reconnecting()
        if again:
            # Dask logged the batch's pickling failure with a full traceback
            # at ERROR; the item failing again here raises a clean TypeError
            # in its run, and a second traceback would only repeat the first.
            with _quiet_here(_PICKLE_LOGGER):
                futures = self._client.map(call, items, key=funcname(call.fn), pure=False)
        else:
            futures = self._client.map(call, items, key=funcname(call.fn), pure=False)
        self._loop.add_callback(self._watch, futures, done)
        return futures

    def _tell_reconnecting(self) -> None:
        """Say at once, once per loss, that runs now wait for a lost scheduler to return."""
        if self._client.status != "connecting":
            self._said_reconnecting = False
            return
        if self._said_reconnecting or self._reconnect_limit is None:
            return
        self._said_reconnecting = True
        scheduler = self._client.scheduler
        address = scheduler.address if scheduler is not None else "its address"
        logger.warning(
            "lost the Dask scheduler at %s: runs wait for it to come back (giving up after %s)",
            address,
            self._reconnect_limit,
        )

    def cancel(self, handles: Sequence[Any]) -> None:
        # On the loop thread client.cancel returns a coroutine, which the loop
        # runs; from here it would block until the scheduler answered.
        self._loop.add_callback(
            self._client.cancel, list(handles), reason="sluicegate: its run was cancelled"
        )

    # -- on the client's loop thread -------------------------------------------

    def _watch(self, futures: list[Future[Any]], done: Sequence[Done]) -> None:
        for future, callback in zip(futures, done, strict=True):
            task = asyncio.ensure_future(self._deliver(future, callback))
            self._watchers.add(task)
            task.add_done_callback(self._watchers.discard)

    async def _deliver(self, future: Future[Any], callback: Done) -> None:
        callback(await _outcome(future))


_PICKLE_LOGGER = logging.getLogger("distributed.protocol.pickle")


class _NotFromThread(logging.Filter):
    """Drops the records one thread logs; other threads' pass."""

    def __init__(self, thread: int) -> None:
        super().__init__()
        self._thread = thread

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self._thread


@contextlib.contextmanager
def _quiet_here(logger: logging.Logger) -> Iterator[None]:
    """Silence ``logger`` for the calling thread only (Dask's threads keep logging)."""
    muted = _NotFromThread(threading.get_ident())
    logger.addFilter(muted)
    try:
        yield
    finally:
        logger.removeFilter(muted)


async def _outcome(future: Future[Any]) -> outcome.Outcome[Any]:
    """The outcome of ``future``, holding no reference to it; never raises.

    A remote error is returned with the worker's traceback only: the frames
    of waiting here would keep ``future``, so its result on the cluster,
    alive for as long as the caller keeps the exception.
    """
    # On the loop thread these methods return coroutines; Dask leaves them untyped.
    waiting: Any = future
    try:
        error = await waiting.exception()
        if error is not None:
            if isinstance(error, CarriedBaseException):
                error = error.rebuild()
            return outcome.Error(error.with_traceback(await waiting.traceback()))
        return outcome.Value(await waiting.result())
    except _CANCELLED as exc:
        # The future was cancelled, or this watcher was (the loop is stopping).
        return outcome.Error(_cancelled(future, exc))
    except Exception as exc:
        # Fetching the result failed (a worker died with it, say); the run
        # must hear about it rather than wait forever.
        return outcome.Error(exc.with_traceback(None))


def _cancelled(future: Future[Any], exc: BaseException) -> RemoteCancelled:
    reason = getattr(exc, "reason", None) or "no reason given"
    error = RemoteCancelled(f"{future.key} was cancelled on the cluster ({reason})", future.key)
    error.__cause__ = exc.with_traceback(None)
    return error
