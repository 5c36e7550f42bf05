"""Long-lived services on the runner: ``serve()``, its journal, retries, rate limits, signals.

See the "Running a service" page of the docs.
"""

from .. import _util
from ._journal import Journal, JournalEntry, JournalError, RecordedError
from ._prometheus import prometheus_collector
from ._rate import RateLimit
from ._retry import Retry
from ._serve import ServedItem, ServeReport, serve
from ._signals import drain_on_signals
from ._stats import ServeStats

__all__ = [
    "Journal",
    "JournalEntry",
    "JournalError",
    "RateLimit",
    "RecordedError",
    "Retry",
    "ServeReport",
    "ServeStats",
    "ServedItem",
    "drain_on_signals",
    "prometheus_collector",
    "serve",
]

_util.fixup_module_metadata(__name__, globals())
