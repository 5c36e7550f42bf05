"""Campaigns: independent jobs in fresh processes under classes, a target and a budget.

``sluicegate campaign run PLAN OUTDIR --ledger PATH`` runs a plan; the
pieces are importable for job code and for tools:

* job code receives a :class:`JobContext` (with a :class:`Budget`) and
  returns an :class:`Outcome`;
* :class:`Ledger` is the shared SQLite budget ledger;
* :func:`run_campaign`, :func:`request_drain`, :func:`reconcile` and
  :func:`read_report` are what the command line calls.
"""

from .. import _util
from ._convert import CampaignFileError
from ._job import Budget, JobContext, Outcome
from ._ledger import BudgetRefused, Ledger, LedgerError, LedgerMissing
from ._plan import Candidate, Plan, load_plan
from ._report import Report, Row
from ._scheduler import (
    CampaignError,
    CampaignLocked,
    read_report,
    reconcile,
    request_drain,
    run_campaign,
)

__all__ = [
    "Budget",
    "BudgetRefused",
    "CampaignError",
    "CampaignFileError",
    "CampaignLocked",
    "Candidate",
    "JobContext",
    "Ledger",
    "LedgerError",
    "LedgerMissing",
    "Outcome",
    "Plan",
    "Report",
    "Row",
    "load_plan",
    "read_report",
    "reconcile",
    "request_drain",
    "run_campaign",
]

_util.fixup_module_metadata(__name__, globals())
