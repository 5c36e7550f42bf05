"""Campaigns: independent jobs in fresh processes under classes, a target and a budget.

``sluicegate campaign run PLAN OUTDIR --ledger PATH`` runs a plan; the
pieces are importable for job code and for tools:

* job code receives a :class:`JobContext` (with a :class:`Budget`) and
  returns an :class:`Outcome`;
* :class:`Ledger` is the shared SQLite budget ledger; amounts are
  :class:`~decimal.Decimal`, at most :data:`MAX_AMOUNT`;
* :func:`run_campaign`, :func:`request_drain`, :func:`reconcile` and
  :func:`read_report` are what the command line calls; :func:`render`,
  :class:`LiveView` and :func:`format_money` are how it shows a report.

Running a campaign needs a POSIX system (it locks files with ``fcntl``);
importing this package, reading reports and using a ledger do not.

Every error the package raises is a :class:`CampaignError`:

```text
CampaignError           a campaign cannot start or go on
├── CampaignLocked      another controller works on the output directory
├── CampaignFileError   a plan, report or result file is invalid (also ValueError)
├── FieldProblems       a Plan or Candidate made in Python breaks a rule (also ValueError)
└── LedgerError         the budget ledger cannot be used
    ├── LedgerMissing   there is no ledger at that path
    ├── AmountTooLarge  an amount above MAX_AMOUNT (also ValueError)
    └── BudgetRefused   a scope has no room for a reservation
```
"""

from .. import _util
from ._convert import CampaignFileError
from ._errors import CampaignError
from ._job import Budget, JobContext, Outcome
from ._ledger import (
    MAX_AMOUNT,
    AmountTooLarge,
    BudgetRefused,
    Ledger,
    LedgerError,
    LedgerMissing,
    format_money,
)
from ._outdir import CampaignLocked, read_report, request_drain
from ._plan import Candidate, Plan, load_plan
from ._scheduler import reconcile, run_campaign
from ._state import Report, Row
from ._view import LiveView, render

__all__ = [
    "MAX_AMOUNT",
    "AmountTooLarge",
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
    "LiveView",
    "Outcome",
    "Plan",
    "Report",
    "Row",
    "format_money",
    "load_plan",
    "read_report",
    "reconcile",
    "render",
    "request_drain",
    "run_campaign",
]

_util.fixup_module_metadata(__name__, globals())
