"""A shared, ordered record of what a source, the runs and a consumer did."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, final

import attrs
import trio

EventKind = Literal[
    "pull",  # a pull from the source began
    "item",  # that pull returned an item
    "end",  # that pull found the end of the source
    "error",  # that pull raised
    "close",  # the source was closed
    "start",  # a run began
    "finish",  # a run returned
    "fail",  # a run raised
    "cancel",  # a run was cancelled
    "consume",  # the consumer received a result
]


@final
@attrs.frozen
class Event:
    """One thing that happened, with the trio clock's time when it did."""

    kind: EventKind
    item: Any = None
    time: float = 0.0


@final
@attrs.define
class Trace:
    """An append-only list of :class:`Event`, shared by feeds, probes and tests.

    Pass one trace to a :class:`ScriptedFeed` and a :class:`RunProbe` (or to
    :func:`traced_source` and :func:`traced_run` around your own source and
    run) so their events interleave in the order they happened, then check
    it with :func:`~sluicegate.testing.check_trace`.
    """

    events: list[Event] = attrs.field(factory=list)

    def record(self, kind: EventKind, item: Any = None) -> None:
        """Append an event stamped with the current trio time (0 outside trio)."""
        try:
            now = trio.current_time()
        except RuntimeError:
            now = 0.0
        self.events.append(Event(kind, item, now))

    def kinds(self, *kinds: EventKind) -> list[Event]:
        """The events of the given kinds, in order."""
        return [event for event in self.events if event.kind in kinds]

    def items(self, kind: EventKind) -> list[Any]:
        """The items of every event of one kind, in order."""
        return [event.item for event in self.events if event.kind == kind]

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)
