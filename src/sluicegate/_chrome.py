"""The Chrome Trace Event format: what Perfetto and ``chrome://tracing`` open.

:func:`write_chrome_trace` writes recorded timelines as one trace, each a
process of its own; :func:`read_chrome` reads such a trace back into the
:class:`~sluicegate._tracelog.Session` values a ``Timeline`` restores itself
from. The events' fields are those of the format that sluicegate uses;
``otherData`` carries what the format has no place for (each session's
wall-clock start), so that a trace reads back whole.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import attrs

from ._tracelog import (
    CODES,
    Finish,
    Marked,
    Record,
    Session,
    Sized,
    Start,
    Unstarted,
    converter,
    validation_error,
)
from ._util import write_atomically

if TYPE_CHECKING:
    import cattrs

__all__ = ["read_chrome", "write_chrome_trace"]

# The Chrome trace viewer's reserved colour names (Perfetto colours by name).
_CNAME: Final[dict[str, str]] = {
    "ok": "good",
    "error": "terrible",
    "cancelled": "grey",
    "unfinished": "yellow",
}


class _SpanLike(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def label(self) -> str | None: ...
    @property
    def slot(self) -> int | None: ...
    @property
    def pulled(self) -> float: ...
    @property
    def started(self) -> float | None: ...
    @property
    def finished(self) -> float | None: ...
    @property
    def outcome(self) -> Literal["ok", "error", "cancelled", "unfinished", "unstarted"]: ...
    @property
    def error(self) -> str | None: ...


class _MarkLike(Protocol):
    @property
    def what(self) -> str: ...
    @property
    def time(self) -> float: ...


class Recorded(Protocol):
    """What the writer reads of a timeline (a ``Timeline`` is one)."""

    @property
    def started_at(self) -> datetime | None: ...
    @property
    def end(self) -> float: ...
    @property
    def slots(self) -> int: ...
    @property
    def spans(self) -> Sequence[_SpanLike]: ...
    @property
    def marks(self) -> Sequence[_MarkLike]: ...
    @property
    def window(self) -> list[tuple[float, int]]: ...
    @property
    def in_flight(self) -> list[tuple[float, int]]: ...


# Not frozen: a trace holds a few events per item, and a frozen attrs
# instance costs three times as much to make.
@attrs.define
class _Event:
    """One event of the Chrome Trace Event format (the fields sluicegate uses)."""

    name: str
    ph: str
    ts: float
    pid: int
    tid: int
    dur: float | None = None
    cat: str | None = None
    s: str | None = None
    cname: str | None = None
    args: dict[str, Any] | None = None


@attrs.frozen
class _Session:
    pid: int
    started_at: datetime | None
    offset_us: float


@attrs.frozen
class _OtherData:
    format: str
    sessions: list[_Session]


@attrs.frozen
class _ChromeTrace:
    traceEvents: list[_Event]
    otherData: _OtherData
    displayTimeUnit: str = "ms"


@functools.cache
def _chrome_converter() -> cattrs.Converter:
    """The log's converter, with the Chrome events' optional fields left out when unset."""
    from cattrs.gen import make_dict_unstructure_fn, override

    made = converter().copy()
    # Optional fields are left out rather than written as null: viewers treat
    # "dur": null or "s": null as malformed.
    omit = override(omit_if_default=True)
    made.register_unstructure_hook(
        _Event,
        make_dict_unstructure_fn(_Event, made, dur=omit, cat=omit, s=omit, cname=omit, args=omit),
    )
    return made


_FORMAT_NAME: Final = "sluicegate-trace/1"


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _chrome_events(timelines: Sequence[Recorded]) -> _ChromeTrace:
    """Every event of ``timelines``; each one a process (``pid``) of its own.

    Sessions are placed on one time axis by their wall-clock start, so a
    resumed run's sessions follow each other.
    """
    starts = [tl.started_at for tl in timelines if tl.started_at is not None]
    base = min(starts) if starts else None
    events: list[_Event] = []
    sessions: list[_Session] = []
    for pid, timeline in enumerate(timelines, 1):
        offset = 0.0
        if base is not None and timeline.started_at is not None:
            offset = _us((timeline.started_at - base).total_seconds())
        sessions.append(_Session(pid=pid, started_at=timeline.started_at, offset_us=offset))
        name = "sluicegate" if len(timelines) == 1 else f"sluicegate session {pid}"
        events.append(_Event("process_name", "M", 0, pid, 0, args={"name": name}))
        events.append(_Event("process_sort_index", "M", 0, pid, 0, args={"sort_index": pid}))
        for slot in range(timeline.slots):
            events.append(_Event("thread_name", "M", 0, pid, slot, args={"name": f"slot {slot}"}))
            events.append(_Event("thread_sort_index", "M", 0, pid, slot, args={"sort_index": slot}))
        end = timeline.end
        for span in timeline.spans:
            args: dict[str, Any] = {
                "index": span.index,
                "label": span.label,
                "outcome": span.outcome,
                "pulled": offset + _us(span.pulled),
            }
            if span.error is not None:
                args["error"] = span.error
            if span.started is None or span.slot is None:
                events.append(
                    _Event(
                        f"unstarted {span.label or span.index}",
                        "i",
                        offset + _us(span.pulled),
                        pid,
                        0,
                        cat="unstarted",
                        s="p",
                        args=args,
                    )
                )
                continue
            finished = end if span.finished is None else span.finished
            events.append(
                _Event(
                    span.label or f"item {span.index}",
                    "X",
                    offset + _us(span.started),
                    pid,
                    span.slot,
                    dur=max(0.0, _us(finished - span.started)),
                    cat=span.outcome,
                    cname=_CNAME[span.outcome],
                    args=args,
                )
            )
        # Instants that round to the same microsecond share one sample.
        flight: dict[float, int] = {}
        for time, count in timeline.in_flight:
            flight[offset + _us(time)] = count
        events.extend(
            _Event("in flight", "C", ts, pid, 0, args={"runs": count})
            for ts, count in flight.items()
        )
        events.extend(
            _Event("window", "C", offset + _us(time), pid, 0, args={"size": size})
            for time, size in timeline.window
        )
        events.extend(
            _Event(mark.what, "i", offset + _us(mark.time), pid, 0, cat="mark", s="g")
            for mark in timeline.marks
        )
    return _ChromeTrace(traceEvents=events, otherData=_OtherData(_FORMAT_NAME, sessions))


def write_chrome_trace(path: str | os.PathLike[str], timelines: Sequence[Recorded]) -> None:
    """Write ``timelines`` as one Chrome trace (see ``Timeline.write_chrome_trace``).

    Several timelines (the sessions of a resumed run) become processes of
    their own, placed on one time axis by their wall-clock start.

    Raises:
        OSError: if the file cannot be written.
    """
    trace = _chrome_events(timelines)
    # dumps() then one write: json.dump() to a file encodes in small pieces,
    # several times slower.
    text = json.dumps(_chrome_converter().unstructure(trace), separators=(",", ":"))
    write_atomically(path, text + "\n")


def read_chrome(path: Path) -> list[Session]:
    """The sessions of the Chrome trace at ``path``, as :func:`write_chrome_trace` wrote them.

    Raises:
        ValueError: the file is not a sluicegate Chrome trace, or has a malformed event.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        trace = _chrome_converter().structure(data, _ChromeTrace)
    except (ValueError, KeyError, TypeError, validation_error()) as exc:
        raise ValueError(f"{path} is not a sluicegate Chrome trace: {exc!r}") from None
    if trace.otherData.format != _FORMAT_NAME:
        raise ValueError(f"{path} is not a sluicegate Chrome trace ({trace.otherData.format!r})")
    try:
        return _sessions(trace)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path} has a malformed event: {exc!r}") from None


def _sessions(trace: _ChromeTrace) -> list[Session]:
    sessions: dict[int, Session] = {}
    offsets: dict[int, float] = {}
    marks: dict[int, list[Marked]] = {}
    last: dict[int, float] = {}
    for described in trace.otherData.sessions:
        sessions[described.pid] = Session(described.started_at)
        offsets[described.pid] = described.offset_us
        marks[described.pid] = []
        last[described.pid] = 0.0

    def seconds(pid: int, ts: float) -> float:
        return (ts - offsets[pid]) / 1e6

    # tuple.__new__ skips the records' generated __new__ (two per run read).
    new = tuple.__new__

    for event in trace.traceEvents:
        records: list[Record] = sessions[event.pid].records
        args = event.args or {}
        if event.ph == "X":
            start = seconds(event.pid, event.ts)
            end = start + (event.dur or 0.0) / 1e6
            index = args["index"]
            pulled = seconds(event.pid, args["pulled"])
            records.append(new(Start, (index, pulled, start, event.tid, args["label"])))
            if args["outcome"] == "unfinished":
                # It ran at least until the trace was written.
                last[event.pid] = max(last[event.pid], end)
            else:
                outcome = CODES[args["outcome"]]
                records.append(new(Finish, (index, end, outcome, args.get("error"))))
        elif event.ph == "i" and event.cat == "mark":
            marks[event.pid].append(Marked(event.name, seconds(event.pid, event.ts)))
        elif event.ph == "C" and event.name == "window":
            records.append(Sized(seconds(event.pid, event.ts), args["size"]))
        elif event.ph == "i" and event.cat == "unstarted":
            pulled = seconds(event.pid, args["pulled"])
            records.append(Unstarted(args["index"], pulled, args["label"]))
    result = []
    for pid, session in sessions.items():
        marks[pid].sort(key=lambda mark: mark.time)
        session.records.extend(marks[pid])
        result.append(attrs.evolve(session, last=last[pid]))
    return result
