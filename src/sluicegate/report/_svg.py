"""The report's pictures as inline SVG: the timeline and the score histograms.

Drawn at screen resolution: runs that would share a pixel of one slot's row
(with the same outcome) become one bar, so the picture stays a few thousand
elements however many runs there were.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Final

from ._layout import COLOURS, MARKS, WINDOW_COLOUR, Placed, flight_columns, score_bins
from ._text import html_text

__all__ = ["histograms_svg", "timeline_svg"]

WIDTH: Final = 1000
_LEFT: Final = 64
_RIGHT: Final = 12
_TOP: Final = 8
_FLIGHT: Final = 56
_AXIS: Final = 26
_DASHES: Final = {"solid": "", "dashed": "6 3", "dotted": "1.5 3"}
# Runs narrower than this many pixels merge with touching neighbours alike;
# wider ones get a bar each, with a hairline gap so that neighbours show.
_TINY_PX: Final = 2.0
_GAP_PX: Final = 0.6
_MIN_PX: Final = 0.75
_BINS: Final = 20


def _ticks(end: float, pixels: float) -> list[float]:
    """Round tick values for an axis from 0 to ``end``, about every 100 px."""
    if end <= 0:
        return [0.0]
    rough = end / max(pixels / 100, 1)
    power = 10 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough)
    count = int(end / step + 1e-9)
    return [i * step for i in range(count + 1)]


def _seconds(value: float) -> str:
    return f"{value:.6g} s"


def _bar_width(width: float) -> float:
    return max(width - _GAP_PX if width > _TINY_PX else width, _MIN_PX)


def _merge(
    runs: list[tuple[float, float, int]], outcomes: Sequence[str]
) -> list[tuple[float, float, list[int]]]:
    """Runs of one row (``(x0, x1, number)``) as bars: tiny touching runs alike merge."""
    bars: list[tuple[float, float, list[int]]] = []
    for x0, x1, number in sorted(runs):
        if bars and x1 - x0 < _TINY_PX:
            left, right, group = bars[-1]
            last = right - left
            tiny = len(group) > 1 or last < _TINY_PX
            alike = outcomes[number] == outcomes[group[0]]
            if tiny and alike and x0 <= right + _MIN_PX:
                group.append(number)
                bars[-1] = (left, max(right, x1), group)
                continue
        bars.append((x0, x1, [number]))
    return bars


def timeline_svg(
    placed: Placed,
    *,
    sessions: int | None = None,
    rows_of: Mapping[str, int] | None = None,
) -> str:
    """The runs :func:`~._layout.place` laid out, as an SVG: slots as rows, runs in flight below.

    ``sessions``, the run's number of sessions (``run.json``'s), makes the
    picture say how many of them it shows when some left no timeline (a
    session run without ``--trace``). ``rows_of`` maps a run's label to its
    row in the report's table: its bar carries the row's number in
    ``data-row``, which the page's script opens on a click. The window
    object's size, when the trace recorded one, is a line over the runs in
    flight.
    """
    rows = max(placed.slots, 1)
    row = max(3.0, min(16.0, 260 / rows))
    plot_width = WIDTH - _LEFT - _RIGHT
    slots_bottom = _TOP + rows * row
    flight_top = slots_bottom + 10
    flight_bottom = flight_top + _FLIGHT
    height = flight_bottom + _AXIS
    end = placed.end if placed.end > 0 else 1.0
    scale = plot_width / end

    def x(time: float) -> float:
        return _LEFT + time * scale

    out = [
        f'<svg class="timeline" viewBox="0 0 {WIDTH} {height:.0f}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="timeline of the runs">'
    ]
    # Row backgrounds and names.
    for slot in range(rows):
        top = _TOP + slot * row
        if slot % 2:
            out.append(
                f'<rect x="{_LEFT}" y="{top:.2f}" width="{plot_width}" height="{row:.2f}" '
                f'fill="#f4f4f4"/>'
            )
        if row >= 9:
            out.append(
                f'<text x="{_LEFT - 6}" y="{top + row * 0.75:.2f}" class="lbl" '
                f'text-anchor="end">slot {slot}</text>'
            )
    if row < 9:
        out.append(
            f'<text x="{_LEFT - 6}" y="{_TOP + 10}" class="lbl" text-anchor="end">'
            f"{rows} slots</text>"
        )
    # The runs, merged where they share a pixel.
    by_slot: dict[int, list[tuple[float, float, int]]] = {}
    spans = placed.spans
    for number, span in enumerate(spans):
        assert span.slot is not None
        start, finish = placed.starts[number], placed.ends[number]
        by_slot.setdefault(span.slot, []).append((x(start), x(finish), number))
    outcomes = [span.outcome for span in spans]
    rows_of = rows_of or {}
    for slot, runs in by_slot.items():
        top = _TOP + slot * row + row * 0.1
        for left, right, group in _merge(runs, outcomes):
            first = spans[group[0]]
            name = first.label if first.label is not None else f"item {first.index}"
            if len(group) == 1:
                what = first.outcome if first.error is None else f"error {first.error}"
                took = _seconds(placed.ends[group[0]] - placed.starts[group[0]])
                tip = f"{name} (item {first.index}): {what}, {took}"
            else:
                # A bar of several runs opens the first of them in the report.
                tip = f"{len(group)} runs, {first.outcome}, from {name}"
            found = rows_of.get(first.label) if first.label is not None else None
            opens = "" if found is None else f' data-row="{found}"'
            out.append(
                f'<rect x="{left:.2f}" y="{top:.2f}" width="{_bar_width(right - left):.2f}" '
                f'height="{row * 0.8:.2f}" fill="{COLOURS[first.outcome]}"{opens}>'
                f"<title>{html_text(tip)}</title></rect>"
            )
    # Runs in flight: the most within each pixel column; the window's size
    # on the same scale.
    highs = flight_columns(placed.in_flight, end, plot_width)
    peak = max(highs, default=0)
    sizes = [size for _, size in placed.window]
    top_count = max(peak, *sizes, 1)
    out.append(
        f'<line x1="{_LEFT}" y1="{flight_bottom}" x2="{WIDTH - _RIGHT}" y2="{flight_bottom}" '
        f'stroke="#888"/>'
    )

    def y(count: int) -> float:
        return flight_bottom - count / top_count * (_FLIGHT - 4)

    if placed.in_flight:
        points = [f"{_LEFT},{flight_bottom}"]
        for column, high in enumerate(highs):
            points.append(f"{_LEFT + column},{y(high):.1f} {_LEFT + column + 1},{y(high):.1f}")
        points.append(f"{WIDTH - _RIGHT},{flight_bottom}")
        out.append(
            f'<polygon points="{" ".join(points)}" fill="#33333326" stroke="#333" '
            f'stroke-width="0.8"><title>runs in flight (peak {peak})</title></polygon>'
        )
    if placed.window:
        steps = [*placed.window, (end, placed.window[-1][1])]
        points = []
        for (time, size), (later, _) in itertools.pairwise(steps):
            points.append(f"{x(time):.2f},{y(size):.1f} {x(later):.2f},{y(size):.1f}")
        low, high = min(sizes), max(sizes)
        held = f"{low}" if low == high else f"from {low} to {high}"
        out.append(
            f'<polyline class="window" points="{" ".join(points)}" fill="none" '
            f'stroke="{WINDOW_COLOUR}" stroke-width="1.6"><title>window size: {held} '
            f"({len(sizes)} change{'s' if len(sizes) > 1 else ''} recorded)</title></polyline>"
        )
    out.append(
        f'<text x="{_LEFT - 6}" y="{flight_top + 12}" class="lbl" text-anchor="end">'
        f"in flight</text>"
    )
    out.append(f'<text x="{_LEFT - 6}" y="{flight_bottom}" class="lbl" text-anchor="end">0</text>')
    out.append(
        f'<text x="{_LEFT - 6}" y="{flight_top + 26}" class="lbl" text-anchor="end">'
        f"{top_count if sizes else peak}</text>"
    )
    # Sessions, instants, axis.
    for start in placed.sessions:
        out.append(
            f'<line x1="{x(start):.2f}" y1="{_TOP}" x2="{x(start):.2f}" y2="{flight_bottom}" '
            f'stroke="#bbb" stroke-width="3"><title>a later session starts</title></line>'
        )
    for mark in placed.marks:
        colour, style = MARKS.get(mark.what, ("#000000", "solid"))
        out.append(
            f'<line x1="{x(mark.time):.2f}" y1="{_TOP}" x2="{x(mark.time):.2f}" '
            f'y2="{flight_bottom}" stroke="{colour}" stroke-width="1.5" '
            f'stroke-dasharray="{_DASHES[style]}"><title>{html_text(mark.what)} at '
            f"{_seconds(mark.time)}</title></line>"
        )
    for tick in _ticks(end, plot_width):
        tx = x(tick)
        out.append(
            f'<line x1="{tx:.2f}" y1="{flight_bottom}" x2="{tx:.2f}" y2="{flight_bottom + 4}" '
            f'stroke="#888"/><text x="{tx:.2f}" y="{flight_bottom + 16}" class="lbl" '
            f'text-anchor="middle">{tick:.6g}</text>'
        )
    if sessions is not None and placed.traced < sessions:
        out.append(
            f'<text x="{_LEFT}" y="{height - 1}" class="lbl">timeline of {placed.traced} of '
            f"{sessions} sessions (the traced ones)</text>"
        )
    out.append(
        f'<text x="{WIDTH - _RIGHT}" y="{height - 1}" class="lbl" text-anchor="end">'
        f"seconds</text></svg>"
    )
    return "".join(out)


def histograms_svg(series: Mapping[str, Sequence[float]], means: Mapping[str, str]) -> str:
    """One small histogram per score name (at most six), each captioned with ``means[name]``.

    The caption's mean is the report's (the summary's card, ``run.json``'s):
    the histogram counts rollouts, but the mean is of tasks.
    """
    charts = []
    for name, values in list(series.items())[:6]:
        label = html_text(name)
        edges, counts = score_bins(values, _BINS)
        low, high = min(values), max(values)
        tallest = max(counts)
        width, height, base = 280, 120, 100
        bar = width / _BINS
        bars = "".join(
            f'<rect x="{i * bar:.2f}" y="{base - count / tallest * 90:.2f}" '
            f'width="{bar - 1:.2f}" height="{count / tallest * 90:.2f}" fill="#4a78b5">'
            f"<title>{edges[i]:.4g} to {edges[i + 1]:.4g}: "
            f"{count}</title></rect>"
            for i, count in enumerate(counts)
            if count
        )
        if low == high:
            # One value: named under its bar, not as an axis from it to itself.
            (only,) = (i for i, count in enumerate(counts) if count)
            axis = (
                f'<text x="{(only + 0.5) * bar:.2f}" y="{base + 14}" class="lbl" '
                f'text-anchor="middle">{low:.4g}</text>'
            )
            spread = f"every one {low:.4g}"
        else:
            axis = (
                f'<text x="0" y="{base + 14}" class="lbl">{low:.4g}</text>'
                f'<text x="{width}" y="{base + 14}" class="lbl" text-anchor="end">{high:.4g}</text>'
            )
            spread = f"{low:.4g} to {high:.4g}"
        mean = means.get(name)
        said = f"mean {html_text(mean)}; " if mean is not None else ""
        charts.append(
            f'<figure class="hist"><svg viewBox="0 0 {width} {height}" '
            f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{label} histogram">'
            f'{bars}<line x1="0" y1="{base}" x2="{width}" y2="{base}" stroke="#888"/>{axis}'
            f"</svg><figcaption>{label}: {said}{len(values):,} rollouts, {spread}"
            f"</figcaption></figure>"
        )
    return "".join(charts)
