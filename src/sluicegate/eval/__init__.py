"""``sluicegate.eval``: bounded evaluations of an environment, from Python or ``sluicegate eval``.

:func:`evaluate` runs one evaluation as a pipeline, one module per step:
``_config`` checks the settings, ``_target`` the :class:`Environment`,
``_plan`` turns the taskset (or ``SampleSource``) into rollout slots,
``_rollout`` runs one slot under the retry policy, ``_log`` writes
``results.jsonl``/``run.json`` and reads them back for a resume,
``_report`` judges the run, ``_display`` shows progress, ``_dask`` runs the
attempts on a Dask cluster when asked, and ``_cli`` is the thin command
line. See ``docs/eval.md``.
"""

from .. import _util
from ._report import EvalReport
from ._rollout import current_rollout
from ._run import evaluate
from ._target import Environment

__all__ = ["Environment", "EvalReport", "current_rollout", "evaluate"]

_util.fixup_module_metadata(__name__, globals())
