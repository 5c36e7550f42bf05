"""``sluicegate eval``: bounded spot-check evaluations of an environment.

One module per concept: ``_target`` resolves ``TARGET``, ``_config`` holds the
settings and the error budget, ``_plan`` turns a taskset or a
``SampleSource`` into rollout slots, ``_run`` drives them through the runner,
``_log`` writes ``results.jsonl``/``run.json`` and reads them back for a
resume, ``_display`` shows progress, and ``_cli`` parses the command line.
See ``docs/eval.md``.
"""

from .. import _util

_util.fixup_module_metadata(__name__, globals())
