"""The base every error of the eval package derives from (the tree is in its ``__init__``)."""

__all__ = ["EvalError"]


class EvalError(Exception):
    """The base of every error of :mod:`sluicegate.eval`; never raised itself.

    ``except EvalError`` catches them all (see the package's exception tree).
    """
