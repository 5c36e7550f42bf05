"""Tools for property-testing sources, runs and services built on sluicegate.

Conformance checks drive a piece of yours through every way a stream ends:
:func:`check_source` and :func:`check_run`, each failure a
:class:`ConformanceError` naming the ending. A :class:`Trace` records what a
stream did (pass it as ``trace=`` to the runner or ``serve()``, and wrap
your source and run with :func:`traced_source`/:func:`traced_run`), and
:func:`check_trace` checks it against the runner's invariants (numbered as
in ``docs/runner.md``); :func:`check_once` and :func:`check_rate` check a
ledger. :class:`ScriptedFeed`, :class:`Upstream`, :class:`RunProbe` and
:class:`Dependency` play the parts around your code. :func:`run_scenario`
and :func:`scenario` run one example on a fresh ``MockClock`` and name a
deadlock. The strategies (:func:`schedules`, :func:`endings`,
:func:`flaky`, :func:`items`, ...) are the only part that needs Hypothesis.

Every error the kit raises is a :class:`TestingError`; the failures a test
reports are ``AssertionError`` s too:

```text
TestingError            never raised itself
├── InvariantViolation  a trace broke a runner invariant (also AssertionError)
├── ConformanceError    a piece broke a contract on one ending (also AssertionError)
├── LedgerViolation     a key booked twice or never; a rate bound broken (also AssertionError)
├── Deadlock            a scenario made no progress until its timeout (also AssertionError)
├── ScenarioFailure     several exceptions ended a scenario (also AssertionError)
├── EndingError         what the failing run raises in the "run-failed" ending
├── ProbeError          a RunProbe run that was told to fail
└── SourceError         a scheduled source that was told to fail
```
"""

from .. import _util
from ._checks import InvariantViolation, TraceSummary, check_trace
from ._conformance import ENDINGS, ConformanceError, Ending, EndingError, check_run, check_source
from ._dependency import Dependency, Flaky
from ._errors import TestingError
from ._feed import ScriptedFeed, ScriptedIter
from ._ledger import LedgerViolation, check_once, check_rate
from ._probe import ProbeError, RunProbe
from ._profiles import load_profile, register_profiles
from ._scenario import Deadlock, ScenarioFailure, run_scenario, scenario
from ._strategies import (
    Schedule,
    SourceError,
    endings,
    flaky,
    items,
    schedules,
    shared_schedules,
    windows,
)
from ._trace import Event, Trace
from ._traced import traced_run, traced_source
from ._upstream import Upstream

__all__ = [
    "ENDINGS",
    "ConformanceError",
    "Deadlock",
    "Dependency",
    "Ending",
    "EndingError",
    "Event",
    "Flaky",
    "InvariantViolation",
    "LedgerViolation",
    "ProbeError",
    "RunProbe",
    "ScenarioFailure",
    "Schedule",
    "ScriptedFeed",
    "ScriptedIter",
    "SourceError",
    "TestingError",
    "Trace",
    "TraceSummary",
    "Upstream",
    "check_once",
    "check_rate",
    "check_run",
    "check_source",
    "check_trace",
    "endings",
    "flaky",
    "items",
    "load_profile",
    "register_profiles",
    "run_scenario",
    "scenario",
    "schedules",
    "shared_schedules",
    "traced_run",
    "traced_source",
    "windows",
]

_util.fixup_module_metadata(__name__, globals())
