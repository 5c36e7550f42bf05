"""What a user's run calls, played by the test: :class:`Dependency`, shaped by :class:`Flaky`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

import attrs
import trio

from ._trace import Trace


def _error_maker(value: object) -> None:
    if not callable(value):
        raise TypeError(f"Flaky(error=...) must be an exception class or callable, not {value!r}")


@final
@attrs.frozen
class Flaky:
    """How a :class:`Dependency` misbehaves: a value, so Hypothesis can draw and shrink it.

    Attributes:
        fail_first: How many attempts of each item fail before one succeeds
            (attempts, not items: a retried item succeeds on attempt
            ``fail_first + 1``).
        error: What a failing attempt raises: an exception class, or a
            callable of the item returning an exception.
        duration: Seconds of trio's clock each call takes.
    """

    fail_first: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    error: Callable[..., BaseException] = attrs.field(
        default=ConnectionError, validator=lambda _, __, value: _error_maker(value)
    )
    duration: float = attrs.field(default=1.0, validator=attrs.validators.ge(0.0))

    def make(self, *, trace: Trace | None = None) -> Dependency:
        """A fresh :class:`Dependency` that behaves so."""
        return Dependency(self, trace=trace)


@final
class Dependency:
    """An async callable standing for what a run calls (a service, a database).

    ``await dependency(item)`` takes ``flaky.duration`` seconds of trio's
    clock, raises ``flaky.error`` on the first ``flaky.fail_first`` attempts
    of each item (items told apart by identity, then equality) and returns
    the item. It keeps the books a check needs: when each call started, how
    many were in flight at most, and which calls a cancellation cut, so that
    :func:`~sluicegate.testing.check_run` can tell a run that swallowed
    ``trio.Cancelled`` from one that let it through, and
    :func:`~sluicegate.testing.check_rate` can bound the calls' rate.

    Args:
        flaky: How it misbehaves (default: never).
        trace: Record each call's ``start`` and outcome here too.

    Its books are written only by the calls; ``flaky`` may be replaced
    between streams (a healthy dependency for a second stream).
    """

    def __init__(self, flaky: Flaky | None = None, *, trace: Trace | None = None) -> None:
        self.flaky: Flaky = flaky if flaky is not None else Flaky()
        self._trace = trace
        # Each item seen, with its attempts so far (a list: items may be unhashable).
        self._attempts: list[list[Any]] = []
        # Tasks whose call was cut by a cancellation; check_run asks and clears.
        self._cut: set[object] = set()
        #: Start time (trio clock) of every call, in order.
        self.calls: list[float] = []
        #: The item of every call, in order.
        self.items: list[Any] = []
        #: Calls in flight now, and the most at once.
        self.in_flight: int = 0
        self.peak: int = 0
        #: Items whose call a cancellation cut.
        self.cut: list[Any] = []

    def _attempt(self, item: object) -> int:
        for entry in self._attempts:
            if entry[0] is item:
                entry[1] += 1
                return int(entry[1])
        for entry in self._attempts:
            try:
                same = bool(entry[0] == item)
            except Exception:
                same = False
            if same:
                entry[1] += 1
                return int(entry[1])
        self._attempts.append([item, 1])
        return 1

    def attempts(self, item: object) -> int:
        """How many calls ``item`` (or an equal item) has had."""
        for entry in self._attempts:
            if entry[0] is item:
                return int(entry[1])
        for entry in self._attempts:
            try:
                if entry[0] == item:
                    return int(entry[1])
            except Exception:
                continue
        return 0

    async def __call__(self, item: Any) -> Any:
        attempt = self._attempt(item)
        self.calls.append(trio.current_time())
        self.items.append(item)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if self._trace is not None:
            self._trace.record("start", item)
        try:
            if self.flaky.duration > 0:
                await trio.sleep(self.flaky.duration)
            else:
                await trio.lowlevel.checkpoint()
            if attempt <= self.flaky.fail_first:
                raise self.flaky.error(item)
        except trio.Cancelled:
            self.cut.append(item)
            self._cut.add(trio.lowlevel.current_task())
            if self._trace is not None:
                self._trace.record("cancel", item)
            raise
        except BaseException as exc:
            if self._trace is not None:
                self._trace.record("fail", item, error=type(exc).__name__)
            raise
        finally:
            self.in_flight -= 1
        if self._trace is not None:
            self._trace.record("finish", item)
        return item

    def was_cut(self, task: object) -> bool:
        """Whether a call made in ``task`` was cut by a cancellation; forgets it."""
        if task in self._cut:
            self._cut.discard(task)
            return True
        return False

    def __repr__(self) -> str:
        return f"<Dependency calls={len(self.calls)} in_flight={self.in_flight} peak={self.peak}>"
