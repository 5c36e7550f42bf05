"""Timeline: the recorder, its event log and the Chrome trace it writes."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from sluicegate import Timeline
from sluicegate._trace import TRACE, TRACE_LOG, Mark, Span, recording


def cancelled() -> trio.Cancelled:
    """A real Cancelled, as a cancelled run raises it."""
    caught: list[trio.Cancelled] = []

    async def victim() -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled as exc:
            caught.append(exc)
            raise

    def run() -> None:
        async def main() -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(victim)
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()

        trio.run(main)

    run()
    return caught[0]


CANCELLED = cancelled()


async def scripted(timeline: Timeline) -> None:
    """Three items through a window of two, the way the runner reports them.

    t=0 pull+start 0 and 1; t=1 item 0 ends ok, pull+start 2 (slot 0 again);
    t=3 item 1 raises; failure; item 2 is cancelled; the source is closed.
    """
    timeline.pulled(0, "a")
    timeline.started(0)
    timeline.pulled(1, "b")
    timeline.started(1)
    await trio.sleep(1)
    timeline.finished(0, None)
    timeline.pulled(2, "c")
    timeline.started(2)
    await trio.sleep(2)
    timeline.finished(1, KeyError("x"))
    timeline.marked("failure")
    timeline.finished(2, CANCELLED)
    timeline.marked("close")


async def test_hooks_record_slots_times_and_outcomes(autojump_clock: Any) -> None:
    await trio.sleep(5)  # the origin is the first event, not the start of trio.run
    timeline = Timeline(label=str.upper)
    await scripted(timeline)
    assert timeline.spans == [
        Span(0, "A", 0, 0.0, 0.0, 1.0, "ok"),
        Span(1, "B", 1, 0.0, 0.0, 3.0, "error", "KeyError"),
        Span(2, "C", 0, 1.0, 1.0, 3.0, "cancelled"),
    ]
    assert timeline.marks == [Mark("failure", 3.0), Mark("close", 3.0)]
    # Item 2 started the instant item 0 ended: the count did not change at 1.0.
    assert timeline.in_flight == [(0.0, 2), (3.0, 0)]
    assert timeline.slots == 2
    assert timeline.end == 3.0
    assert timeline.unfinished() == []


async def test_lowest_free_slot_is_reused(autojump_clock: Any) -> None:
    timeline = Timeline()
    for index in range(4):
        timeline.pulled(index, index)
        timeline.started(index)
    timeline.finished(2, None)
    timeline.finished(0, None)
    timeline.pulled(4, 4)
    timeline.started(4)
    timeline.pulled(5, 5)
    timeline.started(5)
    slots = {span.index: span.slot for span in timeline.spans}
    assert slots == {0: 0, 1: 1, 2: 2, 3: 3, 4: 0, 5: 2}
    assert [span.index for span in timeline.unfinished()] == [1, 3, 4, 5]


async def test_an_item_that_never_starts_is_unstarted(autojump_clock: Any) -> None:
    timeline = Timeline()
    timeline.pulled(0, "x")
    timeline.finished(0, CANCELLED)  # pulled as a failure landed
    timeline.pulled(1, "y")
    timeline.close()  # pulled, then the stream ended
    assert [(span.index, span.outcome, span.slot) for span in timeline.spans] == [
        (0, "unstarted", None),
        (1, "unstarted", None),
    ]


async def test_a_label_function_that_raises_leaves_the_item_unlabelled(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def label(item: int) -> str:
        if item == 1:
            raise RuntimeError("no name")
        return f"item-{item}"

    timeline = Timeline(label=label)
    with caplog.at_level(logging.WARNING, logger="sluicegate"):
        for index in range(3):
            timeline.pulled(index, index)
            timeline.started(index)
            timeline.finished(index, None)
    assert [span.label for span in timeline.spans] == ["item-0", None, "item-2"]
    assert "label function raised" in caplog.text


def chrome(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text())
    assert data["displayTimeUnit"] == "ms"
    events: list[dict[str, Any]] = data["traceEvents"]
    return events


async def test_chrome_trace_events(autojump_clock: Any, tmp_path: Path) -> None:
    timeline = Timeline(label=str)
    await scripted(timeline)
    timeline.write_chrome_trace(tmp_path / "t.json")
    events = chrome(tmp_path / "t.json")
    runs = [event for event in events if event["ph"] == "X"]
    assert [(e["tid"], e["ts"], e["dur"], e["args"]["outcome"]) for e in runs] == [
        (0, 0.0, 1e6, "ok"),
        (1, 0.0, 3e6, "error"),
        (0, 1e6, 2e6, "cancelled"),
    ]
    assert runs[1]["args"] == {
        "index": 1,
        "label": "b",
        "outcome": "error",
        "error": "KeyError",
        "pulled": 0.0,
    }
    assert runs[1]["name"] == "b"
    names = {
        event["tid"]: event["args"]["name"]
        for event in events
        if event["ph"] == "M" and event["name"] == "thread_name"
    }
    assert names == {0: "slot 0", 1: "slot 1"}
    order = {
        event["tid"]: event["args"]["sort_index"]
        for event in events
        if event["ph"] == "M" and event["name"] == "thread_sort_index"
    }
    assert order == {0: 0, 1: 1}
    counter = [(e["ts"], e["args"]["runs"]) for e in events if e["ph"] == "C"]
    assert counter == [(0.0, 2), (3e6, 0)]
    instants = [(e["name"], e["ts"], e["s"]) for e in events if e["ph"] == "i"]
    assert instants == [("failure", 3e6, "g"), ("close", 3e6, "g")]
    # No optional field is written as null.
    assert all(value is not None for event in events for value in event.values())


async def test_chrome_trace_reads_back(autojump_clock: Any, tmp_path: Path) -> None:
    timeline = Timeline(label=str)
    await scripted(timeline)
    timeline.pulled(3, "d")  # never started
    timeline.close()
    timeline.write_chrome_trace(tmp_path / "t.json")
    assert_same(Timeline.read(tmp_path / "t.json"), timeline)


def assert_same(read: list[Timeline], timeline: Timeline) -> None:
    (back,) = read
    assert back.spans == timeline.spans
    assert back.marks == timeline.marks
    assert back.in_flight == timeline.in_flight
    assert back.started_at == timeline.started_at
    assert back.end == timeline.end


async def test_event_log_reads_back_the_same_timeline(autojump_clock: Any, tmp_path: Path) -> None:
    log = tmp_path / "t.jsonl"
    with Timeline(label=str, log=log) as timeline:
        await scripted(timeline)
    assert_same(Timeline.read(log), timeline)


async def test_unfinished_runs_show_in_the_log(autojump_clock: Any, tmp_path: Path) -> None:
    log = tmp_path / "t.jsonl"
    timeline = Timeline(label=str, log=log)
    for index in range(3):
        timeline.pulled(index, f"task-{index}")
        timeline.started(index)
    await trio.sleep(2)
    timeline.finished(1, None)
    # No close(): the process is gone. The log already holds everything.
    (back,) = Timeline.read(log)
    assert [(span.index, span.label, span.slot) for span in back.unfinished()] == [
        (0, "task-0", 0),
        (2, "task-2", 2),
    ]
    assert back.end == 2.0
    timeline.close()


@pytest.mark.parametrize("tear", [1, 5, 12])
async def test_a_torn_last_line_is_skipped(autojump_clock: Any, tmp_path: Path, tear: int) -> None:
    log = tmp_path / "t.jsonl"
    with Timeline(log=log) as timeline:
        timeline.pulled(0, None)
        timeline.started(0)
        await trio.sleep(1)
        timeline.finished(0, None)
        timeline.pulled(1, None)
        timeline.started(1)
    whole = log.read_bytes()
    last = whole.rstrip(b"\n").rsplit(b"\n", 1)[1]
    assert last.startswith(b'["s",1,')
    log.write_bytes(whole[: len(whole) - len(last) - 1 + tear])
    (back,) = Timeline.read(log)
    assert [(span.index, span.outcome) for span in back.spans] == [(0, "ok")]

    # A later session appends after the torn line; both sessions read back.
    with Timeline(log=log) as later:
        later.pulled(0, None)
        later.started(0)
        later.finished(0, ValueError())
    first, second = Timeline.read(log)
    assert [span.outcome for span in first.spans] == ["ok"]
    assert [span.outcome for span in second.spans] == ["error"]


def test_a_broken_line_inside_a_session_is_an_error(tmp_path: Path) -> None:
    log = tmp_path / "t.jsonl"
    log.write_text(
        '{"sluicegate_trace": 1, "started_at": "2024-01-01T00:00:00+00:00", "pid": 1}\n'
        '["s",0,0.0,0.0,0,null]\nnot json\n["f",0,1.0,0]\n'
    )
    with pytest.raises(ValueError, match="line 3"):
        Timeline.read(log)


def test_other_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "other.json").write_text('{"traceEvents": []}')
    with pytest.raises(ValueError, match="not a sluicegate Chrome trace"):
        Timeline.read(tmp_path / "other.json")
    with pytest.raises(FileNotFoundError, match=r"no trace\.json or trace\.jsonl"):
        Timeline.read(tmp_path)


async def test_recording_writes_the_log_and_the_trace_even_on_failure(
    autojump_clock: Any, tmp_path: Path
) -> None:
    with pytest.raises(KeyError), recording(tmp_path, label=str) as timeline:
        await scripted(timeline)
        raise KeyError("the stream failed")
    assert (tmp_path / TRACE_LOG).is_file()
    (back,) = Timeline.read(tmp_path / TRACE)
    assert back.spans == timeline.spans


async def test_a_resumed_run_keeps_every_session(autojump_clock: Any, tmp_path: Path) -> None:
    with recording(tmp_path) as first:
        first.pulled(0, None)
        first.started(0)
        await trio.sleep(1)
        first.finished(0, None)
    await trio.sleep(10)
    with recording(tmp_path) as second:
        second.pulled(0, None)
        second.started(0)
        await trio.sleep(2)
        second.finished(0, None)
    events = chrome(tmp_path / TRACE)
    runs = [(e["pid"], e["dur"]) for e in events if e["ph"] == "X"]
    assert runs == [(1, 1e6), (2, 2e6)]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert processes == {1: "sluicegate session 1", 2: "sluicegate session 2"}
    assert len(Timeline.read(tmp_path / TRACE)) == 2


def test_recording_refuses_an_unwritable_directory_before_running(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError), recording(tmp_path / "missing"):
        pytest.fail("the block must not run")


async def test_a_log_that_cannot_be_written_never_fails_the_stream(
    autojump_clock: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    timeline = Timeline(log=tmp_path / "missing" / "t.jsonl")
    with caplog.at_level(logging.ERROR, logger="sluicegate"):
        await scripted(timeline)
    assert len(timeline.spans) == 3
    assert "cannot open the event log" in caplog.text


async def test_errored_marks_a_returned_run_as_an_error(
    autojump_clock: Any, tmp_path: Path
) -> None:
    log = tmp_path / "t.jsonl"
    with Timeline(log=log) as timeline:
        for index in range(3):
            timeline.pulled(index, index)
            timeline.started(index)
        timeline.errored(2, "TimeoutError")  # before its finish
        await trio.sleep(1)
        for index in range(3):
            timeline.finished(index, None)
        timeline.errored(0, ValueError("rollout failed"))  # after it
    expected = [("error", "ValueError"), ("ok", None), ("error", "TimeoutError")]
    assert [(span.outcome, span.error) for span in timeline.spans] == expected
    (from_log,) = Timeline.read(log)
    assert from_log.spans == timeline.spans
    timeline.write_chrome_trace(tmp_path / "t.json")
    (from_chrome,) = Timeline.read(tmp_path / "t.json")
    assert from_chrome.spans == timeline.spans


async def test_a_malformed_chrome_trace_is_refused(autojump_clock: Any, tmp_path: Path) -> None:
    timeline = Timeline()
    await scripted(timeline)
    timeline.write_chrome_trace(tmp_path / "t.json")
    data = json.loads((tmp_path / "t.json").read_text())
    for event in data["traceEvents"]:
        if event["ph"] == "X":
            del event["args"]["index"]
    (tmp_path / "t.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="malformed event"):
        Timeline.read(tmp_path / "t.json")
