"""``Retry``: the one retry policy, shared by :func:`~sluicegate.serve` and ``sluicegate eval``.

A policy is a frozen value; :func:`attempt` is the loop that applies it to
one item. The loop is written out by hand rather than borrowed from a retry
library: on the path every item takes (a first attempt that succeeds) it
costs one ``try`` and one read of the clock, and it has to know about two
things a generic library does not: a :class:`~sluicegate.Drain` that ends a
backoff wait at once, and trio's ``TooSlowError``, which is not a
``TimeoutError``.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar, TypeVarTuple, final

import attrs
import outcome
import trio

from ._adaptive import AdaptiveWindow
from ._checks import check_count, check_seconds
from ._overload import retry_after
from ._runner import CURRENT_WINDOW, Drain, mark_observed

__all__ = ["Attempts", "CutShort", "Retry", "attempt"]

R = TypeVar("R")
Args = TypeVarTuple("Args")


def _exception_types(
    value: type[Exception] | tuple[type[Exception], ...],
) -> tuple[type[Exception], ...]:
    types = value if isinstance(value, tuple) else (value,)
    for kind in types:
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise TypeError(f"Retry(on=...) takes exception classes, not {kind!r}")
        if not issubclass(kind, Exception):
            # attempt() lets cancellation, KeyboardInterrupt and the like
            # through untouched: a policy naming them could never apply.
            raise TypeError(
                f"Retry(on=...) takes Exception subclasses; {kind.__name__} is never retried"
            )
    return types


def _positive_delay(name: str) -> Callable[[object, attrs.Attribute[float], float], None]:
    def check(_: object, __: attrs.Attribute[float], value: float) -> None:
        check_seconds(value, f"Retry({name}=...)")

    return check


def _check_predicate(
    _: object, __: attrs.Attribute[Callable[[Exception], bool] | None], value: object
) -> None:
    if value is not None and (isinstance(value, type) or not callable(value)):
        raise TypeError(
            f"Retry(retry_on=...) takes a predicate callable(exc) -> bool (classes go in on=), "
            f"not {value!r}"
        )


def _check_budget(_: object, __: attrs.Attribute[float | None], value: float | None) -> None:
    check_seconds(value, "Retry(timeout=...)", zero=False, none=True)


def _check_max_pause(_: object, __: attrs.Attribute[float | None], value: float | None) -> None:
    check_seconds(value, "Retry(max_pause=...)", none=True)


def _check_attempts(_: object, __: attrs.Attribute[int], value: int) -> None:
    # attempts counts the first: 1 means no retry.
    check_count(value, "Retry(attempts=...)", minimum=1)


@final
@attrs.frozen
class Retry:
    """How often, on what and how long apart to try an item again.

    Attributes:
        attempts: Attempts in all, the first one included (``1``: never
            retry).
        on: The exception classes worth another attempt; anything else is
            final at once.
        retry_on: Optional predicate ``callable(exc) -> bool``, asked about
            an error of a class in ``on``: false makes it final (``on=
            httpx.HTTPStatusError, retry_on=lambda e: e.response.status_code
            >= 500`` retries server errors only).
        base_delay: Seconds of the first backoff; each later one doubles.
        max_delay: The most seconds any one backoff may last.
        jitter: Wait a uniformly random time between 0 and the backoff
            ("full jitter"), so that clients failing together do not retry
            together. Without it the wait is the backoff itself. An error that
            carries a ``Retry-After`` or ``retry-after-ms`` (see
            :func:`~sluicegate.AdaptiveWindow.retry_after`) waits at least that
            long, however long it is, unless ``max_pause`` says otherwise.
        timeout: Optional total budget in seconds, from the start of the first
            attempt: no retry is made whose wait would end past it (an attempt
            under way is not cut; ``attempt(limit=...)`` bounds each one).
        max_pause: Optional; the longest wait a ``Retry-After`` may ask for,
            in seconds: a longer one is read as this. None (the default)
            honours any wait the upstream asks for.

    Raises:
        TypeError: ``attempts`` is not an int, a delay not a number,
            ``on`` holds something that is not an exception class, or
            ``retry_on`` is not callable.
        ValueError: ``attempts < 1`` or a delay that is negative or not
            finite, ``max_delay < base_delay``, ``timeout`` not > 0, or
            ``max_pause`` negative or not finite.
    """

    attempts: int = attrs.field(default=3, validator=_check_attempts)
    on: tuple[type[Exception], ...] = attrs.field(default=(Exception,), converter=_exception_types)
    base_delay: float = attrs.field(default=0.1, validator=_positive_delay("base_delay"))
    max_delay: float = attrs.field(default=5.0, validator=_positive_delay("max_delay"))
    jitter: bool = True
    retry_on: Callable[[Exception], bool] | None = attrs.field(
        default=None, validator=_check_predicate
    )
    timeout: float | None = attrs.field(default=None, validator=_check_budget)
    max_pause: float | None = attrs.field(default=None, validator=_check_max_pause)

    def __attrs_post_init__(self) -> None:
        if self.max_delay < self.base_delay:
            raise ValueError(
                f"Retry(max_delay={self.max_delay!r}) is below base_delay={self.base_delay!r}"
            )

    def retries(self, error: BaseException, failures: int) -> bool:
        """Whether ``error``, the ``failures``-th failed attempt, earns another one.

        Raises:
            Exception: whatever ``retry_on`` raised, with ``error`` as its
                ``__context__`` (the error it was asked about).
        """
        if failures >= self.attempts or not isinstance(error, self.on):
            return False
        if self.retry_on is None:
            return True
        try:
            return bool(self.retry_on(error))
        except Exception as broken:
            # Raised outside the `except` that caught `error`, so Python did
            # not chain them: the original would be lost from the traceback.
            if broken.__context__ is None and broken is not error:
                broken.__context__ = error
            broken.add_note(f"sluicegate: raised by Retry(retry_on=...) asked about {error!r}")
            raise

    def backoff(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failed attempt (counting from 1)."""
        # min() before the power would overflow: 2**1100 is not a float.
        ceiling = self.base_delay * 2.0 ** min(failures - 1, 64)
        delay = min(self.max_delay, ceiling)
        return random.uniform(0.0, delay) if self.jitter else delay

    def wait(self, error: BaseException, failures: int) -> float:
        """Seconds to wait after ``error``: the backoff, or its ``Retry-After`` if longer."""
        asked = retry_after(error)
        backoff = self.backoff(failures)
        if asked is None:
            return backoff
        if self.max_pause is not None:
            asked = min(asked, self.max_pause)
        return max(backoff, asked)


class CutShort(Exception):
    """A drain ended a backoff wait: the item was neither finished nor failed.

    Whoever runs the item must not record it as done, so that a later run
    (a restarted service, a resumed evaluation) tries it again.
    """

    def __init__(self, attempts: int, last: BaseException) -> None:
        super().__init__(f"cut short by a drain after {attempts} failed attempt(s): {last!r}")
        self.attempts = attempts
        self.last = last


@final
@attrs.define
class Attempts(Generic[R]):
    """What :func:`attempt` made of one item.

    A record that :func:`attempt` makes and nothing changes afterwards. It is
    neither frozen nor holding an :class:`outcome.Outcome` (``result`` makes
    one when asked): one is built for every item a service runs, and built
    that way it cost 0.72 us against 0.17 (docs/performance.md, "Services").

    Attributes:
        value: What the last attempt returned; None when it raised.
        error: The exception of the last attempt; None when it returned.
        attempts: How many attempts were made (1 if the first settled it).
        began: When the first attempt began, in trio time
            (:func:`trio.current_time`).
        earlier: The exceptions of the failed attempts before the last one.
    """

    value: R | None
    error: Exception | None
    attempts: int
    began: float
    earlier: tuple[BaseException, ...] = ()

    @property
    def result(self) -> outcome.Value[R] | outcome.Error:
        """The last attempt's value or exception, as an :class:`outcome.Outcome`."""
        if self.error is None:
            return outcome.Value(self.value)  # type: ignore[arg-type]
        return outcome.Error(self.error)


async def attempt(
    call: Callable[[*Args], Awaitable[R]],
    *args: *Args,
    retry: Retry | None = None,
    limit: float | None = None,
    drain: Drain | None = None,
    on_retry: Callable[[], object] | None = None,
) -> Attempts[R]:
    """Call ``call(*args)`` until it succeeds, fails for good, or a drain ends the wait.

    Each attempt runs at most ``limit`` seconds of trio time; an expiry is a
    builtin :class:`TimeoutError` (trio's ``TooSlowError`` is not one), and is
    retried when ``retry.on`` matches it. Only ``Exception`` s are captured:
    cancellation, ``KeyboardInterrupt`` and other ``BaseException`` s pass
    through. Each failed attempt is reported to the
    :class:`~sluicegate.Window` the calling run's stream runs under (an
    :class:`~sluicegate.AdaptiveWindow` shrinks on an overload), with the
    time since the run's first attempt began, so that the window knows how
    old the news is; the wait before the next is the longer of the backoff
    and the error's ``Retry-After``, and no wait ends past ``retry.timeout``.
    A ``retry_on`` that raises ends the item: its result is that exception,
    whose ``__context__`` is the error it was asked about.

    Args:
        call: One attempt, ``call(*args)``.
        args: Its arguments (no ``functools.partial`` to build per item).
        retry: The policy; None makes one attempt.
        limit: Seconds of trio time each attempt may take, or None.
        drain: Ends a backoff wait at once (see Raises).
        on_retry: Called as each extra attempt starts, so that a counter of
            attempts made is right even when the item is cut short later.

    Returns:
        An :class:`Attempts` holding the value, or the exception of the last
        attempt when no retry was left or earned, and when the first began.

    Raises:
        CutShort: ``drain`` was requested while waiting between attempts (or
            before a retry), so the item should be tried again later.
    """
    # Made at the first failure: the path every item takes allocates nothing
    # but its result.
    failures: list[BaseException] | None = None
    # What current_window() answers, without its call: this runs once per item.
    window = CURRENT_WINDOW.get()
    # Read once, for a window object, a budget and the caller alike (returned
    # as Attempts.began: serve() times the item from it).
    began = trio.current_time()
    while True:
        deadline: trio.CancelScope | None = None
        try:
            if limit is None:
                value = await call(*args)
            else:
                with trio.fail_after(limit) as deadline:
                    value = await call(*args)
        except trio.TooSlowError as slow:
            if deadline is None or not deadline.cancelled_caught:
                # The run's own deadline (a fail_after of its own) ran out:
                # an ordinary failure of the run, kept as it is.
                error: Exception = slow
            else:
                # Raised rather than built, so the row keeps a traceback, and
                # chained, so it shows where the attempt was when time ran out.
                try:
                    raise TimeoutError(f"attempt took longer than {limit:g} s") from slow
                except TimeoutError as expired:
                    error = expired
        except Exception as exc:
            error = exc
        else:
            if failures is None:
                return Attempts(value, None, 1, began)
            return Attempts(value, None, len(failures) + 1, began, tuple(failures))
        if failures is None:
            failures = [error]
        else:
            failures.append(error)
        if window is not None:
            # Timed from the run's first attempt, not this one's: a retry of a
            # run that began before the window last shrank is no news to it.
            elapsed = trio.current_time() - began
            if isinstance(window, AdaptiveWindow):
                # Which attempt: a run refused again is told from two refused once.
                window.observe(elapsed, error, attempt=len(failures))
            else:
                window.observe(elapsed, error)
        if retry is None:
            return _given_up(window, error, len(failures), began, tuple(failures[:-1]))
        try:
            again = retry.retries(error, len(failures))
        except Exception as broken:
            # The policy itself failed (a retry_on that meets an error it did
            # not expect): the item fails with that, chained to its own
            # error, and whoever runs items goes on to the next.
            return _given_up(window, broken, len(failures), began, tuple(failures[:-1]))
        if not again:
            return _given_up(window, error, len(failures), began, tuple(failures[:-1]))
        wait = retry.wait(error, len(failures))
        if retry.timeout is not None and trio.current_time() + wait > began + retry.timeout:
            # The budget would run out before the next attempt could start.
            return _given_up(window, error, len(failures), began, tuple(failures[:-1]))
        if drain is not None:
            if drain.requested:
                raise _cut_short(window, len(failures), error)
            with trio.move_on_after(wait):
                await drain.wait()
            if drain.requested:
                raise _cut_short(window, len(failures), error)
        else:
            await trio.sleep(wait)
        if on_retry is not None:
            on_retry()


def _given_up(
    window: object,
    error: Exception,
    attempts: int,
    began: float,
    earlier: tuple[BaseException, ...],
) -> Attempts[Any]:
    """The run's result once no attempt is left: its last failure, which the window heard."""
    if window is not None:
        # The window was told of this failure above; the dispatcher, seeing
        # the run return, must not tell it the run succeeded.
        mark_observed()
    return Attempts(None, error, attempts, began, earlier)


def _cut_short(window: object, attempts: int, error: BaseException) -> CutShort:
    """A drain ended the wait for a retry: the run ends with no outcome for the window to hear."""
    if window is not None:
        mark_observed()
    return CutShort(attempts, error)
