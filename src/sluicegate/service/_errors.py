"""The base every error of the service package derives from (the tree is in its ``__init__``)."""

__all__ = ["ServiceError"]


class ServiceError(Exception):
    """The base of every error of :mod:`sluicegate.service`; never raised itself.

    ``except ServiceError`` catches them all (see the package's exception tree).
    """
