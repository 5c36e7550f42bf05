"""The window an evaluation runs under, and what ``run.json`` and the summary say of it.

``-c N`` runs under the runner's own int bound, which never changes: there is
nothing to follow. ``-c auto`` (or ``auto:MAX``) runs under a new
:class:`~sluicegate.AdaptiveWindow`, and ``concurrency=`` a window object
under that object, which other streams (a service, another evaluation) may
share. :class:`WindowWatch` follows such a window through one session: the
sizes it went through (``run.json``'s ``window``), and where it settled for
the summary (:func:`~._display.window_text`).
"""

from __future__ import annotations

import collections

import attrs
import trio

from .._adaptive import AdaptiveWindow, WindowChange
from .._runner import WindowLike
from ._config import EvalConfig

__all__ = ["HISTORY", "WindowWatch", "session_window"]

# The most size changes run.json keeps (as many as an AdaptiveWindow keeps).
HISTORY = 1000


def session_window(config: EvalConfig, given: WindowLike | None) -> WindowLike | None:
    """The window object the session runs under: ``given``, a new adaptive one for
    ``-c auto``, or None for ``-c N`` (the runner's int bound)."""
    if given is not None:
        return given
    if config.adaptive:
        return AdaptiveWindow(initial=min(8, config.bound), max=config.bound)
    return None


@attrs.define
class WindowWatch:
    """Follows the window object of one session.

    An :class:`~sluicegate.AdaptiveWindow` keeps its own history; the changes
    from the session's start on are this session's. A window that keeps
    none (a :class:`~sluicegate.Window` whose size code sets) is sampled
    as each rollout finishes (:meth:`seen`).

    Attributes:
        window: The window.
        began: When the session started, on trio's clock.
        start: The window's size then.
    """

    window: WindowLike
    began: float
    start: int
    # Sizes seen of a window that keeps no history. Owner: seen(). Invariant:
    # each differs from the one before it (the first from `start`).
    _seen: collections.deque[WindowChange] = attrs.field(
        factory=lambda: collections.deque(maxlen=HISTORY)
    )

    @classmethod
    def of(cls, window: WindowLike) -> WindowWatch:
        """Start following ``window`` now."""
        return cls(window, trio.current_time(), window.size)

    def seen(self) -> None:
        """A rollout finished: note the size, if it changed and the window keeps no history."""
        if isinstance(self.window, AdaptiveWindow):
            return
        size = self.window.size
        if size != (self._seen[-1].size if self._seen else self.start):
            change = WindowChange(trio.current_time(), size, "set", "seen as a rollout finished")
            self._seen.append(change)

    def changes(self) -> tuple[WindowChange, ...]:
        """The sizes the window went through in this session (the latest :data:`HISTORY`)."""
        if isinstance(self.window, AdaptiveWindow):
            return tuple(change for change in self.window.changes if change.time >= self.began)
        return tuple(self._seen)

    def decreases(self) -> int:
        """How many of this session's changes lowered the size."""
        count, size = 0, self.start
        for change in self.changes():
            count += change.size < size
            size = change.size
        return count
