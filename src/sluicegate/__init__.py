"""sluicegate: run a stream of work through a bounded window, on trio.

The public names live in small private modules and are re-exported here.
The core (the runner, tasksets, ``take``, dynamic sources) loads with the
package; every name of a higher layer (policies, ``Timeline``, ``serve`` and
its values) loads on first use, so that ``import sluicegate`` for the runner
costs little more than ``import trio`` and loads no SQLite. The layers are
drawn in CONTRIBUTING.md.
"""

import importlib as _importlib
import typing as _typing

from . import _util
from ._dynamic import SampleSource, enqueue
from ._runner import Done, Drain, DrainStatistics, open_stream, run_stream
from ._take import take
from ._taskset import FeedTaskset, Task, Taskset
from ._version import __version__ as __version__

if _typing.TYPE_CHECKING:
    from ._adaptive import AdaptiveWindow
    from ._rate import RateLimit
    from ._retry import Retry
    from ._signals import drain_on_signals
    from ._trace import Timeline
    from ._window import Window
    from .service import RecordedError, ServedItem, ServeReport, serve

__all__ = [
    "AdaptiveWindow",
    "Done",
    "Drain",
    "DrainStatistics",
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
    "Window",
    "drain_on_signals",
    "enqueue",
    "open_stream",
    "run_stream",
    "serve",
    "take",
]

# Where each name of a higher layer lives, loaded by __getattr__ (PEP 562).
_LAZY = {
    "AdaptiveWindow": "._adaptive",
    "RateLimit": "._rate",
    "Retry": "._retry",
    "drain_on_signals": "._signals",
    "Timeline": "._trace",
    "Window": "._window",
    "RecordedError": ".service",
    "ServeReport": ".service",
    "ServedItem": ".service",
    "serve": ".service",
}


def __getattr__(name: str) -> object:
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(_importlib.import_module(module, __name__), name)
    if module != ".service":
        # A name defined in a private module of the root calls the root its home.
        _util.fixup_module_metadata(__name__, {name: value, "__all__": [name]})
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


_util.fixup_module_metadata(
    __name__, {**globals(), "__all__": [name for name in __all__ if name not in _LAZY]}
)
