"""Tools for property-testing sources, runs and services built on sluicegate.

A :class:`ScriptedFeed` plays a source, a :class:`RunProbe` plays a run, both
record into a shared :class:`Trace`, and :func:`check_trace` checks the trace
against the runner's invariants. :func:`schedules` generates whole scenarios
for Hypothesis. Use them under trio's ``MockClock(autojump_threshold=0)`` so
that durations and gaps cost no real time.
"""

from ._checks import InvariantViolation, TraceSummary, check_trace
from ._feed import ScriptedFeed, ScriptedIter
from ._probe import ProbeError, RunProbe
from ._strategies import Schedule, SourceError, schedules, windows
from ._trace import Event, Trace

__all__ = [
    "Event",
    "InvariantViolation",
    "ProbeError",
    "RunProbe",
    "Schedule",
    "ScriptedFeed",
    "ScriptedIter",
    "SourceError",
    "Trace",
    "TraceSummary",
    "check_trace",
    "schedules",
    "windows",
]
