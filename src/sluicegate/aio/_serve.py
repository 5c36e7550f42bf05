"""``serve()`` awaited from asyncio: the trio namesake, hosted.

The service itself is :func:`sluicegate.serve`, run in the trio guest run of
the running asyncio loop; what is the user's runs on asyncio: ``run`` and
``on_outcome`` as asyncio tasks, an async ``on_stats`` likewise, the source
as :mod:`._adapt` reads it. The arguments, results and errors are the trio
front's, because it is the trio front that checks, serves and raises.

Unlike a stream's, a run's failure here does not end the service: trio
code catches it (its retries, its recorded error). So nothing is held back
after a failure (no :class:`~sluicegate._asyncio.FailureLatch`).

Signals are the trio front's too (``drain_on_signals``): in a guest run it
takes them with the loop's own ``add_signal_handler``.
"""

from __future__ import annotations

import asyncio
import functools
import signal
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .._asyncio import awaiting_on_asyncio, host, refuse_outside_asyncio
from .._retry import Retry
from .._runner import BindsRun, Drain, Pacer, Recorder, WindowLike
from .._signals import DEFAULT_SIGNALS
from ..service import Journal, PostgresJournal, ServedItem, ServeReport, ServeStats
from ..service import serve as trio_serve
from ..sources import LeasedQueue
from ._adapt import adapt_run, adapt_source

if TYPE_CHECKING:
    import os

__all__ = ["serve"]

T = TypeVar("T")


async def serve(
    source: AsyncIterable[T] | Iterable[T] | BindsRun | LeasedQueue[T],
    run: Callable[[T], Awaitable[Any]],
    *,
    window: int | WindowLike,
    key: Callable[[T], str] | None = None,
    journal: str | os.PathLike[str] | Journal | PostgresJournal | None = None,
    rerun_errors: bool = False,
    errors: Literal["record", "raise"] = "record",
    retry: Retry | None = None,
    rate: Pacer | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 - per attempt, not for the call
    drain: Drain | None = None,
    signals: Iterable[signal.Signals | int] = DEFAULT_SIGNALS,
    grace: float | None = None,
    on_outcome: Callable[[ServedItem[T]], Awaitable[None]] | None = None,
    on_stats: Callable[[ServeStats], Any] | None = None,
    stats_interval: float = 10.0,
    trace: Recorder | None = None,
) -> ServeReport:
    """:func:`sluicegate.serve`, awaited from asyncio; each run is an asyncio task.

    Everything :func:`sluicegate.serve` promises holds, with the same
    arguments, report and errors (see the "Running a service" page of the
    docs): the journal, retries, timeouts, drains, grace and
    ``on_outcome`` once an outcome is durable. What is yours is asyncio
    code: ``run``, ``on_outcome``, an ``async`` ``on_stats``, an async
    ``source`` and a :class:`~sluicegate.SampleSource`'s hooks, each call an
    asyncio task. ``key`` and a plain ``on_stats`` are called as they are.

    ``signals`` (SIGINT and SIGTERM by default) are taken with the loop's
    own ``add_signal_handler`` while the service runs, and the handlers
    before it are given back after: the first drains, the second cancels
    what still runs. Inside a program that owns them (uvicorn, an
    ``asyncio.Runner`` you handle Ctrl-C in), pass ``signals=()`` and
    request a :class:`~sluicegate.Drain` from its shutdown instead.

    Returns:
        A :class:`~sluicegate.ServeReport`.

    Raises:
        RuntimeError: awaited where no asyncio loop runs (from trio, say),
            or ``signals`` this loop handles already
            (``loop.add_signal_handler``).
        asyncio.CancelledError: the awaiting task was cancelled: every run
            was cancelled and has ended (or was left running after
            ignoring its cancellation for half a second, which is logged),
            the source closed and the journal closed. A cancelled item is
            not journaled, so a restart runs it again.
        Exception: everything :func:`sluicegate.serve` raises, the same way.
    """
    refuse_outside_asyncio("sluicegate.aio.serve", "sluicegate.serve")
    loop = asyncio.get_running_loop()
    if callable(on_stats):
        on_stats = awaiting_on_asyncio(on_stats, loop, "on_stats")
    service = functools.partial(
        trio_serve,
        adapt_source(source, loop),
        adapt_run(run, loop),
        window=window,
        key=key,
        journal=journal,
        rerun_errors=rerun_errors,
        errors=errors,
        retry=retry,
        rate=rate,
        timeout=timeout,
        drain=drain,
        signals=signals,
        grace=grace,
        on_outcome=adapt_run(on_outcome, loop, what="on_outcome"),
        on_stats=on_stats,
        stats_interval=stats_interval,
        trace=trace,
    )
    return await host(service)
