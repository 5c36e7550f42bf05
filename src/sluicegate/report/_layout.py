"""What the plot and the HTML report draw alike: colours, and where each session goes.

The colours are documented in docs/observe.md; keep the two in step.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final, Literal

import attrs

from .._trace import Mark, Outcome, Span, Timeline
from ..eval._format import RowView

__all__ = [
    "COLOURS",
    "MARKS",
    "WINDOW_COLOUR",
    "Placed",
    "flight_columns",
    "place",
    "place_rows",
    "score_bins",
]

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

# The line of a window object's size, over the runs in flight.
WINDOW_COLOUR: Final = "#9467bd"

# Space left between the sessions of a resumed run, as a share of the whole.
_SESSION_GAP: Final = 0.02


@attrs.frozen
class Placed:
    """The timelines of a run on one time axis, in seconds.

    A resumed run's sessions are drawn one after another with a small gap,
    not at their wall-clock distance (hours apart, that would squash them).
    The spans are the timelines' own, not copies: ``starts`` and ``ends``
    hold their times on the shared axis (a report of 100,000 runs would
    otherwise spend a second copying them).

    Attributes:
        spans: Every started run, in session order then index order.
        starts: Each started run's start, its session's offset added.
        ends: Each started run's end: its finish, or for an unfinished one
            the end of its session, moved the same way.
        session: The session (from 0) each started run belongs to.
        marks: The instants, moved the same way.
        in_flight: ``(time, runs in flight)`` steps, moved the same way.
        window: ``(time, size)`` steps of a window object, moved the same way.
        sessions: Where each session after the first begins.
        slots: Rows needed: the most slots any session used.
        end: The end of the axis.
        elapsed: The time the sessions took, summed (the axis without its gaps).
        outcomes: Every run of every session (started or not) counted by outcome.
        traced: How many timelines (traced sessions) it lays out.
    """

    spans: list[Span]
    starts: list[float]
    ends: list[float]
    session: list[int]
    marks: list[Mark]
    in_flight: list[tuple[float, int]]
    sessions: list[float]
    slots: int
    end: float
    elapsed: float = 0.0
    window: list[tuple[float, int]] = attrs.field(factory=list)
    outcomes: dict[str, int] = attrs.field(factory=dict)
    traced: int = 0


def place(timelines: Sequence[Timeline]) -> Placed:
    """Lay ``timelines`` (a run's sessions, in order) on one axis."""
    total = sum(timeline.end for timeline in timelines)
    gap = total * _SESSION_GAP if len(timelines) > 1 else 0.0
    spans: list[Span] = []
    starts: list[float] = []
    ends: list[float] = []
    session: list[int] = []
    marks: list[Mark] = []
    in_flight: list[tuple[float, int]] = []
    window: list[tuple[float, int]] = []
    sessions: list[float] = []
    outcomes: dict[str, int] = {}
    offset = 0.0
    for number, timeline in enumerate(timelines):
        if number:
            offset += gap
            sessions.append(offset)
        # Timeline.spans builds the list on each call: once per session.
        end = timeline.end
        for span in timeline.spans:
            outcomes[span.outcome] = outcomes.get(span.outcome, 0) + 1
            if span.started is None:
                continue
            spans.append(span)
            starts.append(span.started + offset)
            ends.append((end if span.finished is None else span.finished) + offset)
            session.append(number)
        marks.extend(Mark(mark.what, mark.time + offset) for mark in timeline.marks)
        in_flight.extend((time + offset, count) for time, count in timeline.in_flight)
        window.extend((time + offset, size) for time, size in timeline.window)
        offset += end
    slots = max((timeline.slots for timeline in timelines), default=0)
    return Placed(
        spans=spans,
        starts=starts,
        ends=ends,
        session=session,
        marks=marks,
        in_flight=in_flight,
        sessions=sessions,
        slots=slots,
        end=offset,
        elapsed=total,
        window=window,
        outcomes=outcomes,
        traced=len(timelines),
    )


def place_rows(rollouts: Sequence[RowView]) -> Placed:
    """The rollouts of ``results.jsonl`` laid out as a trace would be, for a run without one.

    Each row with a start time and a duration is a run from one to the
    other, on wall-clock seconds since the first start. Rows get *lanes*,
    the fewest rows of the picture where no two runs overlap (each takes
    the lowest lane free when it starts): the window's slots are only in a
    trace. There are no marks and no window size.
    """
    timed: list[tuple[float, float, int, RowView]] = []
    for number, row in enumerate(rollouts):
        start = _instant(row.started_at)
        duration = row.duration_s
        if start is None or duration is None or not 0 <= duration < math.inf:
            continue
        timed.append((start, duration, number, row))
    timed.sort(key=lambda entry: (entry[0], entry[2]))
    origin = timed[0][0] if timed else 0.0
    free: list[int] = []
    busy: list[tuple[float, int]] = []
    lanes = 0
    spans: list[Span] = []
    starts: list[float] = []
    ends: list[float] = []
    changes: dict[float, int] = {}
    for start, duration, number, row in timed:
        start -= origin
        end = start + duration
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, lanes = lanes, lanes + 1
        heapq.heappush(busy, (end, lane))
        outcome: Outcome = "ok" if row.status == "ok" else "error"
        error = row.error.type if row.error is not None else None
        spans.append(Span(number, None, lane, start, start, end, outcome, error))
        starts.append(start)
        ends.append(end)
        changes[start] = changes.get(start, 0) + 1
        changes[end] = changes.get(end, 0) - 1
    in_flight: list[tuple[float, int]] = []
    count = 0
    for time in sorted(changes):
        if changes[time]:
            count += changes[time]
            in_flight.append((time, count))
    outcomes: dict[str, int] = {}
    for span in spans:
        outcomes[span.outcome] = outcomes.get(span.outcome, 0) + 1
    return Placed(
        spans=spans,
        starts=starts,
        ends=ends,
        session=[0] * len(spans),
        marks=[],
        in_flight=in_flight,
        sessions=[],
        slots=lanes,
        end=max(ends, default=0.0),
        elapsed=max(ends, default=0.0),
        outcomes=outcomes,
    )


def _instant(text: str | None) -> float | None:
    """An ISO 8601 time as seconds since the epoch (UTC when it names no zone)."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()


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
    are subtracted instead). When every value is the same, the axis is
    centred on it (a range of a tenth of its size, or of 1), so that its bar
    stands in the middle of a range that says where it is.
    """
    low, high = min(values), max(values)
    if low == high:
        # Shifted by half a bin, so that the value is the middle of its bin.
        half = max(1.0, abs(low) * 0.1) / 2
        shift = half / bins
        below, above = low - half - shift, high + half - shift
        # Near the float limit one side has no room: the value sits on that edge.
        low = below if math.isfinite(below) else low
        high = above if math.isfinite(above) else high
    half_span = high / 2 - low / 2
    edges = [low * (1 - i / bins) + high * (i / bins) for i in range(bins + 1)]
    edges[-1] = high
    counts = [0] * bins
    for value in values:
        counts[min(int((value / 2 - low / 2) / half_span * bins), bins - 1)] += 1
    return edges, counts
