"""The base every error of the testing kit derives from (the tree is in its ``__init__``)."""

__all__ = ["TestingError"]


class TestingError(Exception):
    """The base of every error of :mod:`sluicegate.testing`; never raised itself.

    ``except TestingError`` catches them all (see the package's exception tree).
    """

    # Its name starts with "Test": pytest must not collect it (or a subclass)
    # from a test module that imports it.
    __test__ = False
