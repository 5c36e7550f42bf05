"""Generated runner scenarios: :class:`Schedule` and its Hypothesis strategies.

Hypothesis is imported only when a strategy is built, so the rest of
:mod:`sluicegate.testing` (and :class:`Schedule` itself) works without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, final

import attrs

from ._conformance import ENDINGS, Ending, How
from ._dependency import Flaky
from ._errors import TestingError
from ._feed import ScriptedFeed, ScriptedIter
from ._probe import RunProbe
from ._trace import Trace

if TYPE_CHECKING:
    from hypothesis.strategies import DrawFn, SearchStrategy


def _shown(attribute: attrs.Attribute[Any], value: object) -> bool:
    return bool(value != attribute.default)


@final
@attrs.frozen(repr=False)
class Schedule:
    """One generated scenario: the items ``0..n-1``, how the source delivers
    them, how long each run takes, and what fails.

    Every field has a default that is also what its strategy shrinks to,
    and the repr leaves out the fields at their default: a failing example
    shrinks to the fields the test used.

    Attributes:
        durations: Seconds each item's run takes (index = item).
        gaps: Seconds the source waits before delivering each item (missing
            ones: none).
        window: The window to run with (None: unbounded).
        fail_at: An item whose run raises, or None.
        source_fail_at: The source raises instead of delivering this index,
            or None.
        ends: Whether the source ends after its items (else it stays quiet).
        restarts: After how many finished items the test drains the stream
            and starts it again (a service restarted), in order.
    """

    durations: tuple[float, ...] = ()
    gaps: tuple[float, ...] = ()
    window: int | None = 1
    fail_at: int | None = None
    source_fail_at: int | None = None
    ends: bool = True
    restarts: tuple[int, ...] = ()

    def __repr__(self) -> str:
        fields = attrs.fields(Schedule)
        shown = [
            f"{field.name}={getattr(self, field.name)!r}"
            for field in fields
            if _shown(field, getattr(self, field.name))
        ]
        return f"Schedule({', '.join(shown)})"

    @property
    def count(self) -> int:
        """How many items the source holds."""
        return len(self.durations)

    @property
    def fails(self) -> bool:
        """Whether a run or the source fails somewhere in the schedule."""
        return self.fail_at is not None or self.source_fail_at is not None

    def gap(self, index: int) -> float:
        """Seconds the source waits before item ``index``."""
        return self.gaps[index] if index < len(self.gaps) else 0.0

    def feed(self, trace: Trace | None = None) -> ScriptedFeed[int]:
        """An async source that follows this schedule."""
        count = self.count if self.source_fail_at is None else self.source_fail_at
        error = None if self.source_fail_at is None else SourceError(self.source_fail_at)
        return ScriptedFeed(
            range(count),
            end=self.ends and error is None,
            error=error,
            gaps=dict(enumerate(self.gaps)),  # missing ones: no gap
            trace=trace,
        )

    def iterable(self, trace: Trace | None = None) -> ScriptedIter[int]:
        """A sync source with the same items (gaps and source failure do not apply)."""
        return ScriptedIter(range(self.count), trace=trace)

    def probe(self, trace: Trace | None = None) -> RunProbe[int]:
        """A run that follows this schedule's durations and run failure."""
        fail: Any = () if self.fail_at is None else (self.fail_at,)
        return RunProbe(durations=dict(enumerate(self.durations)), fail=fail, trace=trace)


class SourceError(TestingError):
    """Raised by a scheduled source at ``source_fail_at``."""


_DURATIONS = (0.0, 0.0, 0.5, 1.0, 1.5, 2.0, 5.0, 13.0)


@contextmanager
def _needs_hypothesis(strategy: str) -> Iterator[None]:
    try:
        yield
    except ImportError as exc:
        raise ImportError(
            f"sluicegate.testing.{strategy}() needs Hypothesis, which the test extra "
            "installs: pip install 'sluicegate[test]'",
            name="hypothesis",
        ) from exc


def windows(*, max_window: int = 8, unbounded: bool = True) -> SearchStrategy[int | None]:
    """Window sizes from 1 to ``max_window``, and None when ``unbounded``.

    Raises:
        ImportError: Hypothesis is not installed (the ``test`` extra brings it).
    """
    with _needs_hypothesis("windows"):
        from hypothesis import strategies as st
    sizes: SearchStrategy[int | None] = st.integers(1, max_window)
    return st.one_of(sizes, st.none()) if unbounded else sizes


def schedules(
    *,
    max_items: int = 20,
    failures: bool = True,
    quiet: bool = False,
    unbounded: bool = True,
    restarts: bool = False,
) -> SearchStrategy[Schedule]:
    """A Hypothesis strategy of :class:`Schedule`.

    Args:
        max_items: The most items a schedule holds.
        failures: Allow a failing run or a failing source.
        quiet: Allow a source that stays quiet after its items instead of
            ending. A quiet schedule always contains a failure when
            ``failures`` is true (so the run still ends); otherwise the test
            must end it (a drain or a cancel).
        unbounded: Allow ``window=None``.
        restarts: Draw up to two restart points (:attr:`Schedule.restarts`).

    Raises:
        ImportError: Hypothesis is not installed (the ``test`` extra brings it).
    """
    with _needs_hypothesis("schedules"):
        from hypothesis import strategies as st
    window_sizes = windows(unbounded=unbounded)
    duration = st.sampled_from(_DURATIONS)

    @st.composite
    def draw_schedule(draw: DrawFn) -> Schedule:
        count = draw(st.integers(0, max_items))
        durations = tuple(draw(st.lists(duration, min_size=count, max_size=count)))
        gaps = tuple(draw(st.lists(duration, min_size=count, max_size=count)))
        # Trailing quiet gaps are no gaps: the shrunk schedule shows none.
        while gaps and not gaps[-1]:
            gaps = gaps[:-1]
        window = draw(window_sizes)
        fail_at = source_fail_at = None
        if failures and count and draw(st.booleans()):
            if draw(st.booleans()):
                fail_at = draw(st.integers(0, count - 1))
            else:
                source_fail_at = draw(st.integers(0, count))
        ends = True
        if quiet and draw(st.booleans()):
            if not failures or fail_at is not None or source_fail_at is not None:
                ends = False
            elif count:
                ends = False
                fail_at = draw(st.integers(0, count - 1))
        marks: tuple[int, ...] = ()
        if restarts and count:
            marks = tuple(sorted(draw(st.lists(st.integers(0, count - 1), max_size=2))))
        return Schedule(durations, gaps, window, fail_at, source_fail_at, ends, marks)

    return draw_schedule()


def endings(*, hows: tuple[How, ...] = ENDINGS, max_after: int = 3) -> SearchStrategy[Ending]:
    """How a stream ends: each of ``hows``, after 0 to ``max_after`` runs started.

    Shrinks towards ``"exhausted"`` after one run.

    Raises:
        ImportError: Hypothesis is not installed (the ``test`` extra brings it).
    """
    with _needs_hypothesis("endings"):
        from hypothesis import strategies as st
    return st.builds(
        Ending,
        st.sampled_from(hows),
        st.integers(0, max_after).map(lambda after: (after + 1) % (max_after + 1)),
    )


def flaky(
    *,
    errors: tuple[type[BaseException], ...] = (ConnectionError,),
    max_failures: int = 3,
    durations: tuple[float, ...] = (1.0, 0.0, 0.5, 2.0),
) -> SearchStrategy[Flaky]:
    """A dependency that fails the first N attempts of each item with one of ``errors``.

    Per attempt, not per item: a run that retries gets through on attempt
    N + 1. Shrinks towards a dependency that never fails.

    Raises:
        ImportError: Hypothesis is not installed (the ``test`` extra brings it).
    """
    with _needs_hypothesis("flaky"):
        from hypothesis import strategies as st
    return st.builds(
        Flaky,
        fail_first=st.integers(0, max_failures),
        error=st.sampled_from(errors),
        duration=st.sampled_from(durations),
    )


def items(
    elements: SearchStrategy[Any] | None = None, *, max_size: int = 8
) -> SearchStrategy[list[Any]]:
    """Lists of items of any type: equal ones, unhashable ones, None.

    The runner and :func:`~sluicegate.testing.check_trace` tell items apart
    by pull index, so duplicates and dicts are fair game.

    Raises:
        ImportError: Hypothesis is not installed (the ``test`` extra brings it).
    """
    with _needs_hypothesis("items"):
        from hypothesis import strategies as st
    if elements is None:
        elements = st.one_of(
            st.integers(0, 3),
            st.text(max_size=2),
            st.lists(st.integers(0, 2), max_size=2),
            st.dictionaries(st.text(max_size=1), st.integers(0, 2), max_size=1),
            st.none(),
        )
    return st.lists(elements, max_size=max_size)


def shared_schedules(
    *, max_streams: int = 3, max_items: int = 8, max_window: int = 4
) -> SearchStrategy[tuple[Schedule, ...]]:
    """Several streams on one window: schedules that share one ``window`` (an int >= 1).

    Run them under one :class:`~sluicegate.Window` of that size, each with
    its own ``trace.stream(name)``, and check with ``check_trace(trace,
    window=..., shared=True)``.

    Raises:
        ImportError: Hypothesis is not installed (the ``test`` extra brings it).
    """
    with _needs_hypothesis("shared_schedules"):
        from hypothesis import strategies as st

    @st.composite
    def draw_set(draw: DrawFn) -> tuple[Schedule, ...]:
        window = draw(st.integers(1, max_window))
        count = draw(st.integers(1, max_streams))
        single = schedules(max_items=max_items, failures=False, unbounded=False)
        return tuple(attrs.evolve(draw(single), window=window) for _ in range(count))

    return draw_set()
