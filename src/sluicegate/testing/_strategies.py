"""Hypothesis strategies for runner schedules."""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import strategies as st

from ._feed import ScriptedFeed, ScriptedIter
from ._probe import RunProbe
from ._trace import Trace


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


class SourceError(Exception):
    """Raised by a scheduled source at ``source_fail_at``."""


_duration = st.sampled_from([0.0, 0.0, 0.5, 1.0, 1.5, 2.0, 5.0, 13.0])


def windows(*, max_window: int = 8, unbounded: bool = True) -> st.SearchStrategy[int | None]:
    """Window sizes from 1 to ``max_window``, and None when ``unbounded``."""
    sizes: st.SearchStrategy[int | None] = st.integers(1, max_window)
    return st.one_of(sizes, st.none()) if unbounded else sizes


@st.composite
def schedules(
    draw: st.DrawFn,
    *,
    max_items: int = 20,
    failures: bool = True,
    quiet: bool = False,
    unbounded: bool = True,
) -> Schedule:
    """Generate a :class:`Schedule`.

    Args:
        max_items: The most items a schedule holds.
        failures: Allow a failing run or a failing source.
        quiet: Allow a source that stays quiet after its items instead of
            ending. A quiet schedule always contains a failure when
            ``failures`` is true (so the run still ends); otherwise the test
            must end it (a drain or a cancel).
        unbounded: Allow ``window=None``.
    """
    count = draw(st.integers(0, max_items))
    durations = tuple(draw(st.lists(_duration, min_size=count, max_size=count)))
    gaps = tuple(draw(st.lists(_duration, min_size=count, max_size=count)))
    window = draw(windows(unbounded=unbounded))
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
