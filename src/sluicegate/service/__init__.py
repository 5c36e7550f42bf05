"""Long-lived services on the runner: ``serve()`` and its journals (SQLite, or Postgres).

``Retry``, ``RateLimit`` and ``drain_on_signals`` live in the root package (eval and
campaigns use them too) and are re-exported here as well.

See the "Running a service" page of the docs.

Every error the package raises is a :class:`ServiceError`:

```text
ServiceError       never raised itself
├── JournalError   a journal cannot be used (not a journal, a newer format, a broken file)
└── RecordedError  an error the journal recorded, handed back for a skipped item
```
"""

from .. import RateLimit, Retry, _util, drain_on_signals
from ._errors import ServiceError
from ._journal import Journal, JournalEntry, JournalError, RecordedError
from ._postgres import PostgresJournal
from ._prometheus import prometheus_collector
from ._serve import ServedItem, ServeReport, serve
from ._stats import ServeStats

__all__ = [
    "Journal",
    "JournalEntry",
    "JournalError",
    "PostgresJournal",
    "RateLimit",
    "RecordedError",
    "Retry",
    "ServeReport",
    "ServeStats",
    "ServedItem",
    "ServiceError",
    "drain_on_signals",
    "prometheus_collector",
    "serve",
]

_util.fixup_module_metadata(__name__, globals())
