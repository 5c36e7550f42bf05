"""Generated runner scenarios: :class:`Schedule` and its Hypothesis strategies.

Hypothesis is imported only when a strategy is built, so the rest of
:mod:`sluicegate.testing` (and :class:`Schedule` itself) works without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, final

import attrs

from ._errors import TestingError
from ._feed import ScriptedFeed, ScriptedIter
from ._probe import RunProbe
from ._trace import Trace

if TYPE_CHECKING:
    from hypothesis.strategies import DrawFn, SearchStrategy


@final
@attrs.frozen
class Schedule:
    """One generated scenario: the items ``0..n-1``, how the source delivers
    them, how long each run takes, and what fails.

    Attributes:
        durations: Seconds each item's run takes (index = item).
        gaps: Seconds the source waits before delivering each item.
        window: The window to run with (None: unbounded).
        fail_at: An item whose run raises, or None.
        source_fail_at: The source raises instead of delivering this index,
            or None.
        ends: Whether the source ends after its items (else it stays quiet).
    """

    durations: tuple[float, ...]
    gaps: tuple[float, ...]
    window: int | None
    fail_at: int | None = None
    source_fail_at: int | None = None
    ends: bool = True

    @property
    def count(self) -> int:
        """How many items the source holds."""
        return len(self.durations)

    @property
    def fails(self) -> bool:
        """Whether a run or the source fails somewhere in the schedule."""
        return self.fail_at is not None or self.source_fail_at is not None

    def feed(self, trace: Trace | None = None) -> ScriptedFeed[int]:
        """An async source that follows this schedule."""
        count = self.count if self.source_fail_at is None else self.source_fail_at
        error = None if self.source_fail_at is None else SourceError(self.source_fail_at)
        return ScriptedFeed(
            range(count),
            end=self.ends and error is None,
            error=error,
            gaps=dict(enumerate(self.gaps)),
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
        return Schedule(durations, gaps, window, fail_at, source_fail_at, ends)

    return draw_schedule()
