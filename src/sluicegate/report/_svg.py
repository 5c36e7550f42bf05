"""The report's pictures as inline SVG: the timeline and the score histograms.

Drawn at screen resolution: runs that would share a pixel of one slot's row
(with the same outcome) become one bar, so the picture stays a few thousand
elements however many runs there were.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Final

from .._trace import Timeline
from ._layout import COLOURS, MARKS, flight_columns, place, score_bins
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
    runs: list[tuple[float, float, int]], outcomes: list[str]
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


def timeline_svg(timelines: Sequence[Timeline], *, sessions: int | None = None) -> str:
    """The runs of ``timelines`` as an SVG: slots as rows, runs in flight below.

    ``sessions``, the run's number of sessions (``run.json``'s), makes the
    picture say how many of them it shows when some left no timeline (a
    session run without ``--trace``).
    """
    placed = place(timelines)
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
    for number, (span, finish) in enumerate(zip(placed.spans, placed.ends, strict=True)):
        assert span.started is not None and span.slot is not None
        by_slot.setdefault(span.slot, []).append((x(span.started), x(finish), number))
    for slot, runs in by_slot.items():
        top = _TOP + slot * row + row * 0.1
        for left, right, group in _merge(runs, [span.outcome for span in placed.spans]):
            first = placed.spans[group[0]]
            name = first.label if first.label is not None else f"item {first.index}"
            if len(group) == 1:
                assert first.started is not None
                what = first.outcome if first.error is None else f"error {first.error}"
                took = _seconds(placed.ends[group[0]] - first.started)
                tip = f"{name} (item {first.index}): {what}, {took}"
                first_run = ""
            else:
                # A bar of several runs opens the first of them in the report.
                tip = f"{len(group)} runs, {first.outcome}, from {name}"
                first_run = f' data-first="{html_text(name)}"'
            out.append(
                f'<rect x="{left:.2f}" y="{top:.2f}" width="{_bar_width(right - left):.2f}" '
                f'height="{row * 0.8:.2f}" fill="{COLOURS[first.outcome]}"{first_run}>'
                f"<title>{html_text(tip)}</title></rect>"
            )
    # Runs in flight: the most within each pixel column.
    highs = flight_columns(placed.in_flight, end, plot_width)
    peak = max(highs, default=0)
    top_count = max(peak, 1)
    out.append(
        f'<line x1="{_LEFT}" y1="{flight_bottom}" x2="{WIDTH - _RIGHT}" y2="{flight_bottom}" '
        f'stroke="#888"/>'
    )
    if placed.in_flight:
        points = [f"{_LEFT},{flight_bottom}"]
        for column, high in enumerate(highs):
            y = flight_bottom - high / top_count * (_FLIGHT - 4)
            points.append(f"{_LEFT + column},{y:.1f} {_LEFT + column + 1},{y:.1f}")
        points.append(f"{WIDTH - _RIGHT},{flight_bottom}")
        out.append(
            f'<polygon points="{" ".join(points)}" fill="#33333326" stroke="#333" '
            f'stroke-width="0.8"><title>runs in flight (peak {peak})</title></polygon>'
        )
    out.append(
        f'<text x="{_LEFT - 6}" y="{flight_top + 12}" class="lbl" text-anchor="end">'
        f"in flight</text>"
    )
    out.append(f'<text x="{_LEFT - 6}" y="{flight_bottom}" class="lbl" text-anchor="end">0</text>')
    out.append(
        f'<text x="{_LEFT - 6}" y="{flight_top + 26}" class="lbl" text-anchor="end">{peak}</text>'
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
    if sessions is not None and len(timelines) < sessions:
        out.append(
            f'<text x="{_LEFT}" y="{height - 1}" class="lbl">timeline of {len(timelines)} of '
            f"{sessions} sessions (the traced ones)</text>"
        )
    out.append(
        f'<text x="{WIDTH - _RIGHT}" y="{height - 1}" class="lbl" text-anchor="end">'
        f"seconds</text></svg>"
    )
    return "".join(out)


def histograms_svg(series: dict[str, list[float]], *, bins: int = 20) -> str:
    """One small histogram per score name (at most six)."""
    charts = []
    for name, values in list(series.items())[:6]:
        label = html_text(name)
        edges, counts = score_bins(values, bins)
        low, high = min(values), max(values)
        tallest = max(counts)
        width, height, base = 280, 120, 100
        bar = width / bins
        bars = "".join(
            f'<rect x="{i * bar:.2f}" y="{base - count / tallest * 90:.2f}" '
            f'width="{bar - 1:.2f}" height="{count / tallest * 90:.2f}" fill="#4a78b5">'
            f"<title>{edges[i]:.4g} to {edges[i + 1]:.4g}: "
            f"{count}</title></rect>"
            for i, count in enumerate(counts)
            if count
        )
        mean = statistics.mean(values)  # exact: a sum of finite scores may overflow
        charts.append(
            f'<figure class="hist"><svg viewBox="0 0 {width} {height}" '
            f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{label} histogram">'
            f'{bars}<line x1="0" y1="{base}" x2="{width}" y2="{base}" stroke="#888"/>'
            f'<text x="0" y="{base + 14}" class="lbl">{low:.4g}</text>'
            f'<text x="{width}" y="{base + 14}" class="lbl" text-anchor="end">{high:.4g}</text>'
            f"</svg><figcaption>{label}: mean {mean:.4g} over {len(values)}"
            f"</figcaption></figure>"
        )
    return "".join(charts)
