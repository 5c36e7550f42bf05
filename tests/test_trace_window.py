"""The Timeline records the size of a window object; traces, logs and plots keep it."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from observe_runs import png_size
from sluicegate import Timeline, Window, run_stream
from sluicegate.report import plot


async def record(window: Window | int, log: Path | None = None) -> Timeline:
    async def run(n: int) -> None:
        await trio.sleep(1)
        if n == 5 and isinstance(window, Window):
            window.size = 2  # code that changes the window while the stream runs

    with Timeline(log=log) as timeline:
        await run_stream(range(12), run, window=window, trace=timeline)
    return timeline


async def test_the_size_each_run_started_under_is_recorded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    timeline = await record(Window(4))
    sizes = [size for _, size in timeline.window]
    assert sizes == [4, 2]
    # Sampled at the starts: the first start that saw the new size came after the change.
    assert timeline.window[0][0] == 0.0
    assert timeline.window[1][0] >= 2.0


async def test_an_int_window_records_no_sizes(autojump_clock: trio.testing.MockClock) -> None:
    timeline = await record(4)
    assert timeline.window == []


async def test_the_sizes_survive_the_chrome_trace_and_the_log(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    timeline = await record(Window(4), log=tmp_path / "trace.jsonl")
    timeline.write_chrome_trace(tmp_path / "trace.json")
    (from_trace,) = Timeline.read(tmp_path / "trace.json")
    (from_log,) = Timeline.read(tmp_path / "trace.jsonl")
    assert from_trace.window == timeline.window
    assert from_log.window == timeline.window


async def test_the_plot_draws_the_window(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    timeline = await record(Window(4))
    timeline.write_chrome_trace(tmp_path / "trace.json")
    image = plot(tmp_path / "trace.json", tmp_path / "timeline.png")
    assert png_size(image)[0] > 0
