"""``sluicegate.eval``: bounded evaluations of an environment, from Python or ``sluicegate eval``.

:func:`evaluate` runs one evaluation as a pipeline, one module per step:
``_config`` checks the settings, ``_target`` the :class:`Environment`,
``_slots`` turns the taskset (or ``SampleSource``) into rollout slots,
``_rollout`` runs one slot under the retry policy, ``_score`` checks what
``score()`` returned, ``_format`` owns the files (``results.jsonl``,
``run.json``, ``tasks.jsonl``: names, writer, readers) and ``_log`` one
session's hold on them, ``_stats`` and ``_reduce`` compute the statistics
and per-task reductions, ``_verdict`` judges the run, ``_display`` shows
progress, ``_dask`` runs the attempts on a Dask cluster when asked,
``_compare`` compares two runs, and ``_cli`` is the thin command line. See
``docs/eval.md``.

Every error the package raises on purpose is an :class:`EvalError`:

```text
EvalError            never raised itself
├── UsageError       a mistake in the command or environment, before any rollout (also ValueError)
└── DuplicateTaskId  two tasks with one id, or one rollout added twice (also ValueError)
```
"""

from .. import _util
from ._compare import Comparison, ScoreComparison, TaskChange, compare_runs
from ._current import current_rollout
from ._errors import EvalError
from ._run import evaluate
from ._score import Score
from ._stats import ScoreStats
from ._target import Environment
from ._verdict import EvalReport

__all__ = [
    "Comparison",
    "Environment",
    "EvalError",
    "EvalReport",
    "Score",
    "ScoreComparison",
    "ScoreStats",
    "TaskChange",
    "compare_runs",
    "current_rollout",
    "evaluate",
]

_util.fixup_module_metadata(__name__, globals())
