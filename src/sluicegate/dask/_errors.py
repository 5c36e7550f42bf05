"""The base every error of the dask package derives from (the tree is in its ``__init__``)."""

__all__ = ["DaskError"]


class DaskError(Exception):
    """The base of every error of :mod:`sluicegate.dask`; never raised itself.

    ``except DaskError`` catches them all (see the package's exception tree).
    """
