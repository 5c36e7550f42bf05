"""sluicegate from asyncio: the same streams, service and evaluations, hosted on the running loop.

``await sluicegate.aio.run_stream(...)``, ``async with
sluicegate.aio.open_stream(...)``, ``await sluicegate.aio.serve(...)`` and
``await sluicegate.aio.evaluate(env, ...)`` take the arguments of their trio
namesakes, return and raise what those do, and keep the same promises
(docs/runner.md); what is yours (``run``, the source, the callbacks, the
environment) is asyncio code, and each call of it runs as an asyncio task.
The one dispatcher runs in trio's guest mode on top of the loop. See
docs/asyncio.md ("From asyncio").

``serve`` and ``evaluate`` load their layer (the journal, the evaluation) on
first use, as ``sluicegate.serve`` does.
"""

import importlib as _importlib
import typing as _typing

from .. import _util
from ._stream import open_stream, run_stream

if _typing.TYPE_CHECKING:
    from ._evaluate import evaluate
    from ._serve import serve

__all__ = ["evaluate", "open_stream", "run_stream", "serve"]

# Where each name of a heavier layer lives, loaded by __getattr__ (PEP 562).
_LAZY = {"evaluate": "._evaluate", "serve": "._serve"}


def __getattr__(name: str) -> object:
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(_importlib.import_module(module, __name__), name)
    _util.fixup_module_metadata(__name__, {name: value, "__all__": [name]})
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


_util.fixup_module_metadata(
    __name__, {**globals(), "__all__": [name for name in __all__ if name not in _LAZY]}
)
