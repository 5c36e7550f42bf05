"""The base every error of the report package derives from (the tree is in its ``__init__``)."""

__all__ = ["ReportError"]


class ReportError(Exception):
    """The base of every error of :mod:`sluicegate.report`; never raised itself.

    ``except ReportError`` catches them all (see the package's exception tree).
    """
