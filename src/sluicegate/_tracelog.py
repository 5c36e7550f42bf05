"""The event log of a :class:`~sluicegate.Timeline`: its records, their writer and their reader.

A log (``trace.jsonl``) is a sequence of sessions. Each session starts with
a :class:`Header` line, a JSON object; every other line is one record, a
JSON array whose first element names its kind:

=====  ==========================================  =====================================
kind   fields after the kind                       record
=====  ==========================================  =====================================
``s``  index, pulled, started, slot, label         :class:`Start`: a run started
``f``  index, time, code[, error]                  :class:`Finish`: a run ended
``u``  index, pulled, label                        :class:`Unstarted`: pulled, never run
``e``  index, error                                :class:`Errored`: counted as failed
``m``  what, time                                  :class:`Marked`: drain, failure, close
``w``  time, size                                  :class:`Sized`: the window's size
=====  ==========================================  =====================================

Times are seconds since the session's first event. The writer functions
(``*_line``) are what the recorder calls on its hot path: one f-string
each, no object made. The reader turns a log back into :class:`Session`
values that a ``Timeline`` restores itself from (``Timeline.read``).
"""

from __future__ import annotations

import functools
import json
import logging
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import attrs

if TYPE_CHECKING:
    import cattrs

logger = logging.getLogger("sluicegate")

LOG_FORMAT: Final = 1

# How a finished run ended, as the log (and a timeline's columns) store it.
OK, ERROR, CANCELLED = 0, 1, 2
OUTCOMES: Final = ("ok", "error", "cancelled")
CODES: Final[dict[str, int]] = {name: code for code, name in enumerate(OUTCOMES)}


# -- the records -----------------------------------------------------------------------


class Start(NamedTuple):
    """A run started: ``["s", index, pulled, started, slot, label]``.

    ``item`` is the item's index in pull order (``index`` is a tuple method).
    """

    item: int
    pulled: float
    started: float
    slot: int
    label: str | None


class Finish(NamedTuple):
    """A run ended: ``["f", index, time, code]`` or ``["f", index, time, code, error]``."""

    item: int
    time: float
    code: int
    error: str | None = None


class Unstarted(NamedTuple):
    """An item pulled and never run: ``["u", index, pulled, label]``."""

    item: int
    pulled: float
    label: str | None


class Errored(NamedTuple):
    """An item its caller counted as failed: ``["e", index, error]``."""

    item: int
    error: str


class Marked(NamedTuple):
    """An instant (drain, failure, close): ``["m", what, time]``."""

    what: str
    time: float


class Sized(NamedTuple):
    """The window object's size as runs started under it: ``["w", time, size]``."""

    time: float
    size: int


Record = Start | Finish | Unstarted | Errored | Marked | Sized

# Each kind's record and how many fields it may have after the kind.
_KINDS: Final[dict[str, tuple[type[Any], int, int]]] = {
    "s": (Start, 5, 5),
    "f": (Finish, 3, 4),
    "u": (Unstarted, 3, 3),
    "e": (Errored, 2, 2),
    "m": (Marked, 2, 2),
    "w": (Sized, 2, 2),
}


@attrs.frozen
class Header:
    """The first line of each session in an event log."""

    sluicegate_trace: int
    started_at: datetime
    pid: int


@attrs.frozen
class Session:
    """One session of a recorded stream, as a reader found it.

    Attributes:
        started_at: Its wall-clock start, when known.
        records: What happened, in the order it was recorded.
        last: A floor for the timeline's end where the records alone cannot
            tell it (a run read back as unfinished ran at least until then).
    """

    started_at: datetime | None
    records: list[Record] = attrs.field(factory=list)
    last: float = 0.0


# -- the writer: one line per record, built where the recorder stands ---------------------


def header_line(started_at: datetime, pid: int) -> str:
    header = Header(sluicegate_trace=LOG_FORMAT, started_at=started_at, pid=pid)
    return json.dumps(converter().unstructure(header)) + "\n"


def start_line(index: int, pulled: float, started: float, slot: int, label: str | None) -> str:
    return f'["s",{index},{pulled:.6f},{started:.6f},{slot},{json.dumps(label)}]\n'


def finish_line(index: int, time: float, code: int, error: str | None) -> str:
    if error is None:
        return f'["f",{index},{time:.6f},{code}]\n'
    return f'["f",{index},{time:.6f},{code},{json.dumps(error)}]\n'


def unstarted_line(index: int, pulled: float, label: str | None) -> str:
    return f'["u",{index},{pulled:.6f},{json.dumps(label)}]\n'


def errored_line(index: int, error: str) -> str:
    return f'["e",{index},{json.dumps(error)}]\n'


def marked_line(what: str, time: float) -> str:
    return f'["m",{json.dumps(what)},{time:.6f}]\n'


def sized_line(time: float, size: int) -> str:
    return f'["w",{time:.6f},{size}]\n'


# -- the reader ---------------------------------------------------------------------------


@functools.cache
def converter() -> cattrs.Converter:
    """The trace formats' converter, built on first use: ``import sluicegate`` loads no cattrs."""
    import cattrs

    # Without detailed validation, structuring runs about twice as fast; a
    # trace that is not ours still fails, with a plainer message.
    made = cattrs.Converter(detailed_validation=False)
    made.register_unstructure_hook(datetime, lambda value: value.isoformat())
    made.register_structure_hook(datetime, lambda value, _: datetime.fromisoformat(value))
    return made


def validation_error() -> type[Exception]:
    import cattrs

    return cattrs.BaseValidationError


def parse_record(entry: list[Any]) -> Record:
    """The record of one log line's JSON array.

    Raises:
        ValueError: an unknown kind, or the wrong number of fields.
    """
    kind = entry[0]
    try:
        record, least, most = _KINDS[kind]
    except (KeyError, TypeError):
        raise ValueError(f"unknown event kind {kind!r}") from None
    fields = entry[1:]
    if len(fields) != most:
        if not least <= len(fields) <= most:
            raise ValueError(f"a {kind!r} event has {len(fields)} fields, not {least}")
        fields.append(None)  # a Finish without an error
    # tuple.__new__ skips the generated __new__: reading a log makes millions.
    made: Record = tuple.__new__(record, fields)
    return made


def read_log(path: Path) -> list[Session]:
    """Every session of the log at ``path``.

    A torn last line of a session (a kill in the middle of its write) is
    skipped; any other line that is not a record is a ValueError.

    Raises:
        ValueError: the file is not a sluicegate event log.
    """
    sessions: list[Session] = []
    session: Session | None = None
    lines = path.read_bytes().split(b"\n")
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
            if isinstance(entry, dict):
                header = converter().structure(entry, Header)
                session = Session(header.started_at)
                sessions.append(session)
                continue
            if session is None:
                raise ValueError("an event before the first header")
            session.records.append(parse_record(entry))
        except (ValueError, KeyError, IndexError, TypeError, validation_error()) as exc:
            if _ends_session(lines, number):
                # The last line of a session, torn by a kill in the middle of
                # its write.
                logger.info("%s line %d: skipped a torn last line", path, number)
                continue
            raise ValueError(
                f"{path} line {number} is not a sluicegate trace event: {exc}"
            ) from None
    if not sessions:
        if not any(raw.strip() for raw in lines):
            # A stream that never pulled anything: recording() made the file,
            # and the first event never came to write the header.
            return [Session(None)]
        raise ValueError(f"{path} is not a sluicegate event log (no header line)")
    return sessions


def _ends_session(lines: list[bytes], number: int) -> bool:
    """Whether line ``number`` (from 1) is the last of its session."""
    for after in lines[number:]:
        if after.strip():
            return after.startswith(b'{"sluicegate_trace"')
    return True
