"""The base every error of the campaign package derives from (the tree is in its ``__init__``)."""

__all__ = ["CampaignError"]


class CampaignError(Exception):
    """A campaign cannot start or go on; the message says why and what to do.

    Every other error of :mod:`sluicegate.campaign` derives from it, so
    ``except CampaignError`` catches them all (see the package's exception tree).
    """
