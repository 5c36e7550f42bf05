"""A Timeline on the real runner: the Chrome trace agrees with the run it recorded.

Properties over generated runs (MockClock, so the times are exact), and a
real process killed with SIGKILL whose event log still says which runs it
left unfinished.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sluicegate
from sluicegate import Drain, Timeline, open_stream, run_stream
from sluicegate.cli import main

property_settings = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


class Boom(Exception):
    pass


def check_chrome_trace(path: Path, window: int | None) -> list[dict[str, Any]]:
    """The checks every trace must pass; returns its X events sorted by item index."""
    events = json.loads(path.read_text())["traceEvents"]
    runs = sorted((e for e in events if e["ph"] == "X"), key=lambda e: e["args"]["index"])
    indices = [e["args"]["index"] for e in runs]
    assert len(indices) == len(set(indices)), "one X event per item"
    assert all(e["dur"] >= 0 for e in runs)
    by_slot: dict[int, list[tuple[float, float]]] = {}
    for event in runs:
        by_slot.setdefault(event["tid"], []).append((event["ts"], event["ts"] + event["dur"]))
    for spans in by_slot.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end, "two runs overlap in one slot"
    counter = [e["args"]["runs"] for e in events if e["ph"] == "C"]
    if window is not None:
        assert max(counter, default=0) <= window
        assert len(by_slot) <= window
    named = {e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert named == set(by_slot)
    return runs


@property_settings
@given(
    durations=st.lists(st.integers(0, 5), min_size=0, max_size=30),
    window=st.integers(1, 6),
    front=st.sampled_from(["run_stream", "ordered", "unordered"]),
)
def test_trace_matches_the_run(
    tmp_path_factory: pytest.TempPathFactory, durations: list[int], window: int, front: str
) -> None:
    seen: dict[int, tuple[float, float]] = {}

    async def work(index: int) -> int:
        start = trio.current_time()
        await trio.sleep(durations[index])
        seen[index] = (start, trio.current_time())
        return index

    async def go() -> Timeline:
        timeline = Timeline(label=lambda index: f"task-{index}")
        if front == "run_stream":
            await run_stream(range(len(durations)), work, window=window, trace=timeline)
        else:
            async with open_stream(
                range(len(durations)),
                work,
                window=window,
                ordered=front == "ordered",
                trace=timeline,
            ) as results:
                async for _ in results:
                    await trio.sleep(0.5)  # a slow consumer holds places
        return timeline

    timeline: Timeline = trio.run(go, clock=trio.testing.MockClock(autojump_threshold=0))
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    timeline.write_chrome_trace(path)
    runs = check_chrome_trace(path, window)
    assert [e["args"]["index"] for e in runs] == list(range(len(durations)))
    origin = min((start for start, _ in seen.values()), default=0.0)
    for event in runs:
        start, end = seen[event["args"]["index"]]
        assert event["ts"] == pytest.approx((start - origin) * 1e6)
        assert event["dur"] == pytest.approx((end - start) * 1e6)
        assert event["args"]["outcome"] == "ok"
        assert event["args"]["label"] == f"task-{event['args']['index']}"
    assert [mark.what for mark in timeline.marks] == ["close"]


@property_settings
@given(
    durations=st.lists(st.integers(1, 5), min_size=1, max_size=20),
    window=st.integers(1, 5),
    failing=st.integers(0, 19),
)
def test_a_failure_is_marked_and_the_rest_cancelled(
    tmp_path_factory: pytest.TempPathFactory, durations: list[int], window: int, failing: int
) -> None:
    failing %= len(durations)

    async def work(index: int) -> int:
        await trio.sleep(durations[index])
        if index == failing:
            raise Boom(index)
        return index

    async def go() -> Timeline:
        timeline = Timeline()
        with pytest.raises(Boom):
            await run_stream(range(len(durations)), work, window=window, trace=timeline)
        return timeline

    timeline: Timeline = trio.run(go, clock=trio.testing.MockClock(autojump_threshold=0))
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    timeline.write_chrome_trace(path)
    runs = check_chrome_trace(path, window)
    outcomes = {e["args"]["index"]: e["args"]["outcome"] for e in runs}
    assert outcomes[failing] == "error"
    assert {e["args"]["error"] for e in runs if e["args"]["outcome"] == "error"} == {"Boom"}
    failure = next(mark.time for mark in timeline.marks if mark.what == "failure")
    # Everything that ran alongside the failing run was cancelled at the failure.
    for span in timeline.spans:
        if span.outcome == "cancelled":
            assert span.finished == failure
    assert timeline.unfinished() == []
    assert [mark.what for mark in timeline.marks][-1] == "close"


async def test_a_drain_is_marked_and_in_flight_runs_finish(autojump_clock: Any) -> None:
    drain = Drain()
    timeline = Timeline()

    async def work(index: int) -> int:
        if index == 4:
            drain.request("enough")
        await trio.sleep(3)
        return index

    async def endless() -> Any:
        index = 0
        while True:
            await trio.sleep(1)
            yield index
            index += 1

    await run_stream(endless(), work, window=3, drain=drain, trace=timeline)
    assert {span.outcome for span in timeline.spans} == {"ok"}
    marks = {mark.what: mark.time for mark in timeline.marks}
    assert set(marks) == {"drain", "close"}
    # No run starts after the drain, and the ones in flight finish after it.
    starts = [span.started for span in timeline.spans]
    assert all(start is not None and start <= marks["drain"] for start in starts)
    assert max(span.finished or 0 for span in timeline.spans) > marks["drain"]


CHILD = textwrap.dedent(
    """
    import sys
    import trio
    from sluicegate import run_stream
    from sluicegate._trace import recording

    async def work(n):
        if n >= 3:
            # The runner recorded the start before calling us.
            print(n, flush=True)
            await trio.sleep_forever()
        return n

    async def main():
        with recording(sys.argv[1], label=lambda n: f"task-{n}") as timeline:
            await run_stream(range(10), work, window=4, trace=timeline)

    trio.run(main)
    """
)


async def test_a_sigkilled_run_leaves_its_unfinished_runs_on_disk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD, encoding="utf-8")
    # The child imports the same sluicegate as this test.
    env = dict(os.environ, PYTHONPATH=str(Path(sluicegate.__file__).parent.parent))
    process = await trio.lowlevel.open_process(
        [sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert process.stdout is not None
        seen = b""
        with trio.fail_after(60):
            while seen.count(b"\n") < 4:
                chunk = await process.stdout.receive_some()
                assert chunk, "the child exited early"
                seen += chunk
        process.send_signal(signal.SIGKILL)
        with trio.fail_after(60):
            assert await process.wait() == -signal.SIGKILL
    finally:
        process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()

    assert not (tmp_path / "trace.json").exists()
    capsys.readouterr()
    assert main(["trace", str(tmp_path), "--anomalies"]) == 1
    out = capsys.readouterr().out
    assert "4 run(s) started and never finished" in out
    listed = [line.split() for line in out.splitlines() if line.strip().endswith(tuple("3456"))]
    assert [(row[1], row[-1]) for row in listed] == [
        ("3", "task-3"),
        ("4", "task-4"),
        ("5", "task-5"),
        ("6", "task-6"),
    ]
    # The trace.json a killed run could not write is rebuilt from the log.
    runs = check_chrome_trace(tmp_path / "trace.json", 4)
    assert {e["args"]["index"]: e["args"]["outcome"] for e in runs} == {
        0: "ok",
        1: "ok",
        2: "ok",
        3: "unfinished",
        4: "unfinished",
        5: "unfinished",
        6: "unfinished",
    }
    assert main(["trace", str(tmp_path)]) == 0
    assert "7 items" in capsys.readouterr().out


def test_trace_command_on_a_clean_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def go() -> None:
        from sluicegate._trace import recording

        with recording(tmp_path) as timeline:
            await run_stream(range(5), trio.sleep, window=2, trace=timeline)

    trio.run(go, clock=trio.testing.MockClock(autojump_threshold=0))
    assert main(["trace", str(tmp_path), "--anomalies"]) == 0
    assert "no anomalies" in capsys.readouterr().out
    assert main(["trace", str(tmp_path / "trace.json")]) == 0
    assert "5 items over 6.000 s in 2 slots" in capsys.readouterr().out
    assert main(["trace", str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err
