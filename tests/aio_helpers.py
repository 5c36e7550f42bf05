"""What the tests of the asyncio front share: a virtual clock for asyncio, and asyncio doubles.

:func:`run_virtual` runs a coroutine on an asyncio loop whose clock jumps:
when neither asyncio nor the trio guest run hosted on it has anything to do,
time moves on to the next timer or deadline at once, as trio's
``MockClock(autojump_threshold=0)`` does. Sleeps and timeouts cost no real
time, and the order of events is decided by the clock, not by how busy the
machine is. It is real asyncio otherwise: real tasks, a real selector (a
socket that is ready is seen at once), and trio's real guest mode.

:class:`AsyncioProbe` and :class:`AsyncioFeed` are the asyncio twins of
``sluicegate.testing.RunProbe`` and ``ScriptedFeed``, recording the same
events into a shared ``Trace`` so that ``check_trace`` judges them alike.
"""

from __future__ import annotations

import asyncio
import math
import selectors
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

import trio

from sluicegate.testing import ProbeError, Schedule, SourceError, Trace

T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    """A selector that, instead of sleeping, moves its loop's clock to the next timer.

    A wait with nothing ready looks at both sides first. While the trio guest
    run has work on its way (a task rescheduled, a call queued through its
    token), its wake-up crosses trio's I/O thread: the wait is real, and
    short. Otherwise everything waits for a timer or a deadline, and the
    clock jumps to the nearest one.
    """

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        try:
            stats = trio.lowlevel.current_statistics()
        except RuntimeError:
            stats = None  # no guest run right now
        if stats is not None and (stats.tasks_runnable or stats.run_sync_soon_queue_size):
            return super().select(None)
        delay = math.inf if timeout is None else timeout
        trio_delay = math.inf if stats is None else max(0.0, stats.seconds_to_next_deadline)
        delay = min(delay, trio_delay)
        if delay == math.inf:
            return super().select(None)  # only real I/O (or nothing) can move now
        self.now += delay
        if stats is not None and trio_delay <= delay:
            # trio's deadline has come: its I/O thread sleeps in real time.
            trio.lowlevel.current_trio_token().run_sync_soon(lambda: None)
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on a clock that jumps over idle time (see :class:`_JumpingSelector`)."""

    def __init__(self) -> None:
        self._jumping = _JumpingSelector()
        super().__init__(self._jumping)

    def time(self) -> float:
        return self._jumping.now


def run_virtual(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run(main())``, on a :class:`VirtualClockLoop`."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(main())


class AsyncioProbe:
    """``RunProbe`` on asyncio: an async callable recording starts, finishes and the peak alive.

    Args:
        durations: Seconds (of the loop's clock) each item's run sleeps;
            missing means one ``asyncio.sleep(0)``.
        fail: Items whose run raises ``ProbeError`` after its duration.
        trace: A shared ``Trace``.
    """

    def __init__(
        self,
        *,
        durations: Mapping[Any, float] | None = None,
        fail: Iterable[Any] = (),
        trace: Trace | None = None,
    ) -> None:
        self._durations = dict(durations or {})
        self._fail = set(fail)
        self._trace = trace
        self.started: list[Any] = []
        self.finished: list[Any] = []
        self.failed: list[Any] = []
        self.cancelled: list[Any] = []
        self.alive = 0
        self.peak = 0

    @classmethod
    def following(cls, schedule: Schedule, trace: Trace | None = None) -> AsyncioProbe:
        """The probe ``schedule.probe(trace)`` would be, on asyncio."""
        fail = () if schedule.fail_at is None else (schedule.fail_at,)
        return cls(durations=dict(enumerate(schedule.durations)), fail=fail, trace=trace)

    async def __call__(self, item: Any) -> Any:
        self.started.append(item)
        self.alive += 1
        self.peak = max(self.peak, self.alive)
        self._record("start", item)
        try:
            await asyncio.sleep(self._durations.get(item, 0.0))
            if item in self._fail:
                self.failed.append(item)
                self._record("fail", item)
                raise ProbeError(item)
        except asyncio.CancelledError:
            self.cancelled.append(item)
            self._record("cancel", item)
            raise
        finally:
            self.alive -= 1
        self.finished.append(item)
        self._record("finish", item)
        return item

    def _record(self, kind: Any, item: object) -> None:
        if self._trace is not None:
            self._trace.record(kind, item)


_END = object()


class AsyncioFeed:
    """``ScriptedFeed`` on asyncio: items, gaps (on the loop's clock), an end or a failure.

    When nothing is queued it stays quiet until :meth:`push`, :meth:`end` or
    :meth:`fail`.
    """

    def __init__(
        self,
        items: Iterable[Any] = (),
        *,
        end: bool = False,
        error: BaseException | None = None,
        gaps: Mapping[int, float] | None = None,
        trace: Trace | None = None,
    ) -> None:
        self._queue: deque[Any] = deque(items)
        if error is not None:
            self._queue.append(error)
        elif end:
            self._queue.append(_END)
        self._gaps = dict(gaps or {})
        self._trace = trace
        self._arrived = asyncio.Event()
        self.pulls = 0
        self.delivered = 0
        self.close_count = 0

    @classmethod
    def following(cls, schedule: Schedule, trace: Trace | None = None) -> AsyncioFeed:
        """The feed ``schedule.feed(trace)`` would be, on asyncio."""
        count = schedule.count if schedule.source_fail_at is None else schedule.source_fail_at
        error = None if schedule.source_fail_at is None else SourceError(schedule.source_fail_at)
        return cls(
            range(count),
            end=schedule.ends and error is None,
            error=error,
            gaps=dict(enumerate(schedule.gaps)),
            trace=trace,
        )

    @property
    def closed(self) -> bool:
        return self.close_count > 0

    def push(self, *items: Any) -> None:
        self._queue.extend(items)
        self._arrived.set()

    def end(self) -> None:
        self.push(_END)

    def fail(self, exc: BaseException) -> None:
        self.push(exc)

    def __aiter__(self) -> AsyncioFeed:
        return self

    async def __anext__(self) -> Any:
        if self.closed:
            raise RuntimeError("AsyncioFeed pulled after it was closed")
        position = self.pulls
        self.pulls += 1
        self._record("pull")
        await asyncio.sleep(self._gaps.get(position, 0.0))
        while not self._queue:
            self._arrived.clear()
            await self._arrived.wait()
        head = self._queue[0]
        if head is _END:
            self._record("end")
            raise StopAsyncIteration
        if isinstance(head, BaseException):
            self._record("error")
            raise head
        self._queue.popleft()
        self.delivered += 1
        self._record("item", head)
        return head

    async def aclose(self) -> None:
        self.close_count += 1
        self._record("close")
        await asyncio.sleep(0)

    def _record(self, kind: Any, item: object = None) -> None:
        if self._trace is not None:
            self._trace.record(kind, item)
