"""What the plot and the HTML report draw alike: colours, and where each session goes.

The colours are documented in docs/observe.md; keep the two in step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final, Literal

import attrs

from .._trace import Mark, Span, Timeline

__all__ = ["COLOURS", "MARKS", "Placed", "flight_columns", "place", "score_bins"]

COLOURS: Final[dict[str, str]] = {
    "ok": "#3a923a",
    "error": "#d62728",
    "cancelled": "#9e9e9e",
    "unfinished": "#ff9f1c",
}

# Each instant: its colour and line style (matplotlib's names; the SVG
# report turns the style into a dash pattern).
LineStyle = Literal["solid", "dashed", "dotted"]
MARKS: Final[dict[str, tuple[str, LineStyle]]] = {
    "drain": ("#1f77b4", "solid"),
    "failure": ("#d62728", "dashed"),
    "close": ("#555555", "dotted"),
}

# Space left between the sessions of a resumed run, as a share of the whole.
_SESSION_GAP: Final = 0.02


@attrs.frozen
class Placed:
    """The timelines of a run on one time axis, in seconds.

    A resumed run's sessions are drawn one after another with a small gap,
    not at their wall-clock distance (hours apart, that would squash them).

    Attributes:
        spans: Every started run, with its session's offset added to its times.
        ends: Each started run's end: its finish, or for an unfinished one
            the end of its session.
        marks: The instants, moved the same way.
        in_flight: ``(time, runs in flight)`` steps, moved the same way.
        window: ``(time, size)`` steps of a window object, moved the same way.
        sessions: Where each session after the first begins.
        slots: Rows needed: the most slots any session used.
        end: The end of the axis.
    """

    spans: list[Span]
    ends: list[float]
    marks: list[Mark]
    in_flight: list[tuple[float, int]]
    sessions: list[float]
    slots: int
    end: float
    window: list[tuple[float, int]] = attrs.field(factory=list)


def place(timelines: Sequence[Timeline]) -> Placed:
    """Lay ``timelines`` (a run's sessions, in order) on one axis."""
    total = sum(timeline.end for timeline in timelines)
    gap = total * _SESSION_GAP if len(timelines) > 1 else 0.0
    spans: list[Span] = []
    ends: list[float] = []
    marks: list[Mark] = []
    in_flight: list[tuple[float, int]] = []
    window: list[tuple[float, int]] = []
    sessions: list[float] = []
    offset = 0.0
    for number, timeline in enumerate(timelines):
        if number:
            offset += gap
            sessions.append(offset)
        for span in timeline.spans:
            if span.started is None:
                continue
            finished = timeline.end if span.finished is None else span.finished
            spans.append(
                attrs.evolve(
                    span,
                    pulled=span.pulled + offset,
                    started=span.started + offset,
                    finished=None if span.finished is None else span.finished + offset,
                )
            )
            ends.append(finished + offset)
        marks.extend(Mark(mark.what, mark.time + offset) for mark in timeline.marks)
        in_flight.extend((time + offset, count) for time, count in timeline.in_flight)
        window.extend((time + offset, size) for time, size in timeline.window)
        offset += timeline.end
    slots = max((timeline.slots for timeline in timelines), default=0)
    return Placed(spans, ends, marks, in_flight, sessions, slots, offset, window)


def flight_columns(in_flight: Sequence[tuple[float, int]], end: float, columns: int) -> list[int]:
    """The most runs in flight at any moment within each of ``columns`` slices of ``[0, end]``.

    A picture drawn from these shows every peak, but not the instants where
    one run ends and the next starts on the same place (a dip that lasts
    microseconds and would otherwise fill the picture with spikes).
    """
    highs: list[int] = []
    level = 0
    steps = iter(in_flight)
    step = next(steps, None)
    width = end / columns if end > 0 else 1.0
    for column in range(columns):
        limit = (column + 1) * width
        high = level
        while step is not None and (step[0] < limit or column == columns - 1):
            level = step[1]
            high = max(high, level)
            step = next(steps, None)
        highs.append(high)
    return highs


def score_bins(values: Sequence[float], bins: int) -> tuple[list[float], list[int]]:
    """A histogram of ``values`` (finite, at least one): ``bins + 1`` edges and ``bins`` counts.

    Any finite scores, ±1.5e308 included: nothing here computes
    ``high - low``, which overflows to infinity for such a range (halves
    are subtracted instead). One distinct value gets the bins above it.
    """
    low, high = min(values), max(values)
    if low == high:
        step = max(1.0, abs(low) * 1e-9)
        if math.isfinite(high + step):
            high += step
        else:
            low -= step
    half_span = high / 2 - low / 2
    edges = [low * (1 - i / bins) + high * (i / bins) for i in range(bins + 1)]
    edges[-1] = high
    counts = [0] * bins
    for value in values:
        counts[min(int((value / 2 - low / 2) / half_span * bins), bins - 1)] += 1
    return edges, counts
