"""What a ``sluicegate`` command shows on stderr besides its own display.

Library code logs through the ``sluicegate`` logger and warns with
:mod:`warnings`; a command turns both into one plain line each, prefixed
with the command's name, for the person at the terminal.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["messages", "output_console"]

# Wide enough that no line of a report wraps or has a cell cut short.
_UNWRAPPED = 10_000


def output_console() -> Console:
    """A rich console for a command's standard output.

    On a terminal, the terminal's width. Otherwise (a file, a pipe, a CI
    log) whole lines, never wrapped at rich's default 80 columns nor cut
    with an ellipsis, so that a reader or ``grep`` sees each line whole; a
    ``COLUMNS`` set in the environment still wins.
    """
    import os

    from rich.console import Console

    console = Console()
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(width=_UNWRAPPED)


class _ToStderr(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time, so a live display can
    redirect it above its progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        # A closed stderr must not turn a message into a failure of the run.
        with suppress(OSError, ValueError):
            print(self.format(record), file=sys.stderr, flush=True)


@contextmanager
def messages(prog: str, *, level: int = logging.INFO) -> Iterator[None]:
    """Show the library's log records and warnings on stderr, one line each.

    Args:
        prog: The prefix of every line (``"sluicegate eval"``).
        level: The least severe log record shown.
    """
    logger = logging.getLogger("sluicegate")
    handler = _ToStderr()
    handler.setFormatter(logging.Formatter(f"{prog}: %(message)s"))
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        # The message, not the line of sluicegate that issued it.
        with suppress(OSError, ValueError):
            print(f"{prog}: warning: {message}", file=sys.stderr, flush=True)

    try:
        with warnings.catch_warnings():
            # A command's warnings are messages for its user: shown once
            # each, whatever filters the hosting interpreter set.
            warnings.simplefilter("default")
            warnings.showwarning = show
            yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
