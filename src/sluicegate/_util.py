"""Helpers shared by every layer; this module imports nothing else of sluicegate."""

from __future__ import annotations

__all__ = ["sole_exception"]


def sole_exception(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The exception to raise in place of a group that wraps just one.

    A nursery whose only possible failure is its body's own exception wraps
    that exception in a group; the caller should get it back as itself. A
    group of several is returned unchanged, since none of them may be dropped.
    """
    if len(group.exceptions) == 1:
        return group.exceptions[0]
    return group
