"""Tools for property-testing sources, runs and services built on sluicegate.

A :class:`ScriptedFeed` plays a source, a :class:`RunProbe` plays a run, and
:func:`traced_source`/:func:`traced_run` wrap your own; all of them record
into a shared :class:`Trace`, and :func:`check_trace` checks the trace
against the runner's invariants (numbered as in ``docs/runner.md``).
:func:`schedules` generates whole scenarios for Hypothesis; it is the only
part that needs Hypothesis installed. Use them under trio's
``MockClock(autojump_threshold=0)`` so that durations and gaps cost no real
time.

Every error the kit raises is a :class:`TestingError`:

```text
TestingError            never raised itself
├── InvariantViolation  a trace broke one of the runner's invariants (also AssertionError)
├── ProbeError          a RunProbe run that was told to fail
└── SourceError         a scheduled source that was told to fail
```
"""

from .. import _util
from ._checks import InvariantViolation, TraceSummary, check_trace
from ._errors import TestingError
from ._feed import ScriptedFeed, ScriptedIter
from ._probe import ProbeError, RunProbe
from ._strategies import Schedule, SourceError, schedules, windows
from ._trace import Event, Trace
from ._traced import traced_run, traced_source

__all__ = [
    "Event",
    "InvariantViolation",
    "ProbeError",
    "RunProbe",
    "Schedule",
    "ScriptedFeed",
    "ScriptedIter",
    "SourceError",
    "TestingError",
    "Trace",
    "TraceSummary",
    "check_trace",
    "schedules",
    "traced_run",
    "traced_source",
    "windows",
]

_util.fixup_module_metadata(__name__, globals())
