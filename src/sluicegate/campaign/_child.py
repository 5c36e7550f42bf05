"""The child process: ``python -I`` running :func:`main` on a request file.

It creates ``jobs/KEY/started``, imports the job from the campaign's frozen
copy (first on ``sys.path``), runs it once and writes ``result.json``
atomically. A job that raises is reported ``blocked`` with the exception as
its reason (the traceback goes to stderr) and its cost unknown. If the process dies before
writing a result, the controller marks the candidate ``uncertain``.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import traceback
from pathlib import Path

from ._convert import load_json, write_json_atomic
from ._job import Budget, JobContext, JobRequest, JobResult, Outcome


def _run(request: JobRequest) -> object:
    """Run the job; returns what it returned (an Outcome, if it keeps its contract)."""
    code_dir = Path(request.code_dir).resolve()
    sys.path.insert(0, str(code_dir))
    module_name, function_name = request.job.split(":")
    module = importlib.import_module(module_name)
    origin = Path(getattr(module, "__file__", None) or "").resolve()
    if not origin.is_relative_to(code_dir):
        # Something earlier on the path shadowed the frozen copy.
        return Outcome("blocked", reason=f"job module loaded from {origin}, not the frozen copy")
    function = getattr(module, function_name)
    ctx = JobContext(
        key=request.key,
        options=request.options,
        work_dir=Path(request.work_dir),
        budget=Budget(request.ledger, request.scope),
    )
    if inspect.iscoroutinefunction(function):
        import trio

        return trio.run(function, ctx)
    return function(ctx)


def main(argv: list[str]) -> int:
    """Run the job described by the request file ``argv[1]``; returns the exit status."""
    request = load_json(argv[1], JobRequest, root="request")
    # Before the job's module is even imported: a controller that finds no
    # such file (and no running child) knows the job never began. If it
    # cannot be made, the job does not run either.
    Path(request.started).touch(mode=0o600)
    raised: Exception | None = None
    try:
        returned = _run(request)
    except Exception as exc:
        traceback.print_exc()
        returned, raised = None, exc
    if isinstance(returned, Outcome):
        result = JobResult(request.key, returned)
    else:
        if raised is not None:
            reason = f"job raised {raised!r}"
        else:
            reason = f"job returned {returned!r}, not an Outcome"
        # It may have spent before it raised, and it said nothing of what.
        result = JobResult(request.key, Outcome("blocked", reason=reason), cost_unknown=True)
    write_json_atomic(Path(request.result), result, mode=0o600)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
