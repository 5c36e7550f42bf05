"""sluicegate from asyncio: the same streams, hosted on the running asyncio loop.

``await sluicegate.aio.run_stream(...)`` and ``async with
sluicegate.aio.open_stream(...)`` take the arguments of their trio namesakes
and keep the same promises (docs/runner.md); ``run`` is asyncio code, and
each call of it runs as an asyncio task. The one dispatcher runs in trio's
guest mode on top of the loop. See docs/asyncio.md ("From asyncio").
"""

from .. import _util
from ._stream import open_stream, run_stream

__all__ = ["open_stream", "run_stream"]

_util.fixup_module_metadata(__name__, globals())
