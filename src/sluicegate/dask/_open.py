"""``open_dask``: a Dask client for the length of a block, and ``remote(fn)`` runs on it."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar, final, overload

import trio
from distributed import Client, LocalCluster

from .._checks import check_seconds
from ._bridge import Bridge
from ._engine import DaskEngine

__all__ = ["DaskBridge", "RemoteRun", "open_dask"]

logger = logging.getLogger("sluicegate")

T = TypeVar("T")
R = TypeVar("R")


@final
class RemoteRun(Generic[T, R]):
    """The async ``run(item)`` that :meth:`DaskBridge.remote` returns.

    Attributes:
        fn: The function each item is run through on the cluster.
    """

    __slots__ = ("_bridge", "_call", "fn")

    fn: Callable[[T], Any]

    def __init__(self, bridge: Bridge, call: Hashable, fn: Callable[[T], Any]) -> None:
        self._bridge = bridge
        self._call = call
        self.fn = fn

    async def __call__(self, item: T) -> R:
        """Run ``fn(item)`` on the cluster and return its result.

        Raises:
            Exception: what ``fn`` raised on the worker, as itself when it
                pickles; one that does not (or whose class cannot be
                imported here) arrives as a plain ``Exception`` whose one
                argument is the original's ``repr()``, as Dask sends it.
                :class:`~sluicegate.dask.RemoteCancelled` if the cluster
                cancelled the work; what sending the item raised (an item
                that cannot be pickled); Dask's ``TypeError`` for a result
                that cannot be pickled.
            BaseException: a ``KeyboardInterrupt``, ``SystemExit`` or other
                ``BaseException`` that ``fn`` raised, as its own type with
                its arguments; the worker carries on (a ``trio.Cancelled``
                or ``asyncio.CancelledError`` from ``fn`` arrives as
                :class:`~sluicegate.dask.RemoteCancelled`).
            RuntimeError: if its ``open_dask()`` block has ended.
        """
        result: R = await self._bridge.call(self._call, item)
        return result

    def __repr__(self) -> str:
        return f"<remote {self.fn!r}>"


@final
class DaskBridge:
    """What :func:`open_dask` yields: a Dask client and a way to run items on it."""

    def __init__(self, client: Client, bridge: Bridge) -> None:
        self._client = client
        self._bridge = bridge

    @property
    def client(self) -> Client:
        """The :class:`distributed.Client` the runs are submitted through."""
        return self._client

    @overload
    def remote(self, fn: Callable[[T], Awaitable[R]]) -> RemoteRun[T, R]: ...

    @overload
    def remote(self, fn: Callable[[T], R]) -> RemoteRun[T, R]: ...

    def remote(self, fn: Callable[[T], Any]) -> RemoteRun[T, Any]:
        """An async ``run(item)`` that computes ``fn(item)`` on the cluster.

        Pass the result to :func:`~sluicegate.run_stream` or
        :func:`~sluicegate.open_stream` as the ``run``: the runner keeps the
        window, order, fail-fast, drain and close-out; the cluster only
        executes. Each call submits one Dask task (calls made in the same
        trio tick go out in one ``Client.map``) and waits for it without
        blocking trio or holding a thread. When the waiting run is cancelled
        (a failure elsewhere, a drain's deadline, the caller's cancel scope,
        leaving ``open_stream`` early), its task is cancelled on the
        scheduler; a task already running on a worker finishes there
        unobserved, since Dask cannot interrupt it.

        Args:
            fn: A picklable callable taking one item: a module-level
                function (importable on the workers, or defined in
                ``__main__``, which is sent by value), a
                :func:`functools.partial`, a callable object. If it is an
                ``async def`` (anything whose call returns a coroutine), the
                coroutine runs under ``trio.run`` on the worker.

        Returns:
            The async run. Awaiting it returns what ``fn`` returned, raises
            what ``fn`` raised (the same exception type, with the worker's
            traceback, if the exception pickles; otherwise a plain
            ``Exception`` holding its ``repr()``: Dask cannot send it), or
            raises :class:`~sluicegate.dask.RemoteCancelled` if the cluster
            dropped the work.

        Raises:
            TypeError: if ``fn`` is not callable or cannot be pickled.
        """
        if not callable(fn):
            raise TypeError(f"remote() takes a callable, not {fn!r}")
        return RemoteRun(self._bridge, self._bridge.prepare(fn), fn)

    def __repr__(self) -> str:
        return f"<DaskBridge {self._client!r}>"


def _check(
    address: object, client: object, connect_timeout: object, cluster_kwargs: dict[str, Any]
) -> None:
    timeout = check_seconds(connect_timeout, "connect_timeout", zero=False, none=True)
    if timeout is not None and client is not None:
        raise TypeError(
            "open_dask() takes connect_timeout only when it connects: a client you pass "
            "is connected already"
        )
    if address is not None and client is not None:
        raise ValueError("open_dask() takes an address or a client, not both")
    if address is not None and not isinstance(address, str):
        raise TypeError(f"address must be a scheduler address string, not {address!r}")
    if client is not None and not isinstance(client, Client):
        raise TypeError(f"client must be a distributed.Client, not {client!r}")
    if isinstance(client, Client) and client.status in ("closing", "closed"):
        raise ValueError(f"{client!r} is {client.status}")
    if cluster_kwargs and (address is not None or client is not None):
        names = ", ".join(sorted(cluster_kwargs))
        raise TypeError(
            f"open_dask() passes keyword arguments ({names}) to the LocalCluster it "
            "starts; with an address or a client it starts none"
        )


@asynccontextmanager
async def open_dask(
    address: str | None = None,
    *,
    client: Client | None = None,
    connect_timeout: float | None = None,
    **cluster_kwargs: Any,
) -> AsyncIterator[DaskBridge]:
    """Use a Dask cluster for the length of an ``async with`` block.

    With no arguments, start an embedded :class:`distributed.LocalCluster`
    (``cluster_kwargs`` go to it: ``n_workers``, ``threads_per_worker``,
    ``processes``, ...) and close it when the block ends. With ``address``,
    connect to the scheduler running there and disconnect at the end, leaving
    the cluster up. With ``client``, use that client and leave it open.

    Connecting to ``address`` is logged (logger ``sluicegate``, INFO) as it
    starts, naming the address and how long it may take: a scheduler that
    does not answer is waited for ``connect_timeout`` seconds, and so is
    one lost later, when the client tries to reconnect.

    Starting and closing a cluster or a client happens in a worker thread,
    so trio is not blocked; the close-out is shielded from cancellation.
    When the block ends, work of this bridge still on the cluster is
    cancelled.

    A remote failure is raised as itself when its exception pickles; one
    that does not arrives as a plain ``Exception`` holding the original's
    ``repr()`` (see :meth:`DaskBridge.remote`).

    Args:
        address: A scheduler address, such as ``"tcp://10.0.0.5:8786"``.
        client: A :class:`distributed.Client` the caller owns (its loop
            running in its own thread, as ``Client(...)`` gives).
        connect_timeout: Seconds to wait for the scheduler, when connecting
            and when reconnecting after losing it. None (the default) is
            Dask's ``distributed.comm.timeouts.connect`` setting: 30 s
            unless configured otherwise.
        **cluster_kwargs: Keyword arguments for the embedded ``LocalCluster``.

    Yields:
        A :class:`DaskBridge`: ``.client`` and ``.remote(fn)``.

    Raises:
        ValueError: if both ``address`` and ``client`` are given,
            ``client`` is closed, or ``connect_timeout`` is not > 0.
        TypeError: for an ``address`` that is not a string, a ``client`` that
            is not a ``distributed.Client``, a ``connect_timeout`` that is
            not a number or comes with ``client``, or ``cluster_kwargs``
            alongside an address or a client. All checked before anything
            is started.
        Exception: what starting the cluster or connecting raised.
    """
    _check(address, client, connect_timeout, cluster_kwargs)
    if client is not None:
        bridge = Bridge(DaskEngine(client))
        try:
            yield DaskBridge(client, bridge)
        finally:
            bridge.close()
        return
    limit = f"{connect_timeout:g} s" if connect_timeout is not None else _default_connect_timeout()
    if address is not None:
        logger.info("connecting to the Dask scheduler at %s (giving up after %s)", address, limit)
    connecting = _Connecting(address, connect_timeout, cluster_kwargs)
    try:
        # Abandoned on cancellation: a scheduler that does not answer would
        # otherwise hold the caller for Dask's whole connect timeout (30 s).
        cluster, own_client = await trio.to_thread.run_sync(
            connecting.connect, abandon_on_cancel=True
        )
    except trio.Cancelled:
        connecting.abandon()
        raise
    bridge = Bridge(DaskEngine(own_client, reconnect_limit=limit))
    try:
        yield DaskBridge(own_client, bridge)
    finally:
        bridge.close()
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_disconnect, own_client, cluster)


# distributed leaves its constructors untyped.
_new_client: Callable[..., Client] = Client
_new_cluster: Callable[..., LocalCluster] = LocalCluster


def _default_connect_timeout() -> str:
    import dask.config

    setting = "distributed.comm.timeouts.connect"
    return f"{dask.config.get(setting)}: Dask's {setting}"


def _connect(
    address: str | None, connect_timeout: float | None, cluster_kwargs: dict[str, Any]
) -> tuple[LocalCluster | None, Client]:
    # Client's own default for timeout is a sentinel: pass it only when set.
    timeout: dict[str, Any] = {} if connect_timeout is None else {"timeout": connect_timeout}
    if address is not None:
        return None, _new_client(address, **timeout)
    cluster = _new_cluster(**cluster_kwargs)
    try:
        return cluster, _new_client(cluster, **timeout)
    except BaseException:
        _close(cluster)
        raise


class _Connecting:
    """A connection made in a worker thread that the trio side may abandon.

    Whichever side comes second cleans up: the thread closes what it made if
    the caller has gone, and the caller closes what the thread made if it
    had already finished when the caller gave up.
    """

    def __init__(
        self, address: str | None, connect_timeout: float | None, cluster_kwargs: dict[str, Any]
    ) -> None:
        self._address = address
        self._connect_timeout = connect_timeout
        self._cluster_kwargs = cluster_kwargs
        self._lock = threading.Lock()
        self._abandoned = False
        self._made: tuple[LocalCluster | None, Client] | None = None

    def connect(self) -> tuple[LocalCluster | None, Client]:
        made = _connect(self._address, self._connect_timeout, self._cluster_kwargs)
        with self._lock:
            if not self._abandoned:
                self._made = made
                return made
        # Nobody waits for it any more: trio discards what an abandoned
        # thread returns.
        _disconnect(made[1], made[0])
        return made

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            made, self._made = self._made, None
        if made is not None:
            # Closing a client can take seconds: not on the trio thread.
            threading.Thread(target=_disconnect, args=(made[1], made[0]), daemon=True).start()


def _close(closable: Any) -> None:
    closable.close()


def _disconnect(client: Client, cluster: LocalCluster | None) -> None:
    try:
        _close(client)
    finally:
        if cluster is not None:
            _close(cluster)
