"""sluicegate: run a stream of work through a bounded window, on trio.

The public names live in small private modules and are re-exported here.
"""

from . import _util
from ._dynamic import SampleSource, enqueue
from ._runner import Done, Drain, open_stream, run_stream
from ._take import take
from ._taskset import FeedTaskset, Task, Taskset
from ._trace import Timeline
from .service import (
    RateLimit,
    RecordedError,
    Retry,
    ServedItem,
    ServeReport,
    drain_on_signals,
    serve,
)

__version__ = "0.1.0"

__all__ = [
    "Done",
    "Drain",
    "FeedTaskset",
    "RateLimit",
    "RecordedError",
    "Retry",
    "SampleSource",
    "ServeReport",
    "ServedItem",
    "Task",
    "Taskset",
    "Timeline",
    "drain_on_signals",
    "enqueue",
    "open_stream",
    "run_stream",
    "serve",
    "take",
]

_util.fixup_module_metadata(__name__, globals())
