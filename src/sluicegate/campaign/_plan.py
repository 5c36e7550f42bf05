"""A campaign plan: which jobs to run, under which limits, until which target."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any, final

import attrs

from ._convert import FieldProblems, load_json
from ._ledger import amount_problem

__all__ = ["Candidate", "Plan", "load_plan"]

# Keys and names become ledger scopes and directory names.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_JOB = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


# A problem is (field, message); the field is relative to the plan.
_Problems = list[tuple[str, str]]


def _name_problem(field: str, value: object) -> _Problems:
    if isinstance(value, str) and _NAME.fullmatch(value):
        return []
    rule = "must be letters, digits, '_', '.' or '-' (not starting with '.' or '-')"
    return [(field, f"{rule}, got {value!r}")]


def _money_problem(field: str, value: Decimal | None) -> _Problems:
    if value is None:
        return []
    if value < 0:
        return [(field, f"must not be negative, got {value}")]
    # Checked here, before any work: the ledger stores integer micro-units.
    problem = amount_problem(value)
    return [] if problem is None else [(field, problem)]


def _positive_problem(field: str, value: int) -> _Problems:
    if isinstance(value, bool) or value < 1:
        return [(field, f"must be an integer >= 1, got {value!r}")]
    return []


def _class_problem(field: str, name: str | None, limits: dict[str, int]) -> _Problems:
    # An undeclared class would run without any limit: most likely a typo.
    if name is None or name in limits:
        return []
    declared = ", ".join(repr(n) for n in sorted(limits)) or "none"
    return [(field, f"{name!r} is not declared in class_limits (declared: {declared})")]


def _candidate_problems(candidate: Candidate, where: str) -> _Problems:
    problems = _name_problem(f"{where}.key", candidate.key)
    problems += _money_problem(f"{where}.reservation", candidate.reservation)
    problems += _money_problem(f"{where}.max_spend", candidate.max_spend)
    if candidate.max_spend is not None and candidate.reservation > candidate.max_spend:
        problems.append(
            (
                f"{where}.reservation",
                f"{candidate.reservation} is above the candidate's max_spend {candidate.max_spend}",
            )
        )
    return problems


def _plan_problems(plan: Plan) -> _Problems:
    problems = _name_problem("name", plan.name)
    problems += _positive_problem("target", plan.target)
    problems += _positive_problem("max_parallel", plan.max_parallel)
    problems += _money_problem("max_spend", plan.max_spend)
    if not _JOB.fullmatch(plan.job):
        problems.append(("job", f"must look like 'package.module:function', got {plan.job!r}"))
    for name, limit in plan.class_limits.items():
        problems += _positive_problem(f"class_limits[{name!r}]", limit)
    if not plan.candidates:
        problems.append(("candidates", "must not be empty"))
    seen: dict[str, int] = {}
    for i, candidate in enumerate(plan.candidates):
        problems += _candidate_problems(candidate, f"candidates[{i}]")
        field = f"candidates[{i}].resource_class"
        problems += _class_problem(field, candidate.resource_class, plan.class_limits)
        if candidate.key in seen:
            message = f"{candidate.key!r} repeats candidates[{seen[candidate.key]}]"
            problems.append((f"candidates[{i}].key", message))
        seen.setdefault(candidate.key, i)
        if candidate.reservation > plan.max_spend:
            message = f"{candidate.reservation} is above the plan's max_spend {plan.max_spend}"
            problems.append((f"candidates[{i}].reservation", message))
    return problems


@final
@attrs.frozen
class Candidate:
    """One job of the panel; its rules are checked by the :class:`Plan` holding it.

    Attributes:
        key: Unique within the plan; names the job's ledger scope and directory.
        reservation: Held in the ledger when the job is dispatched (its first
            worker reservation); settled with the cost the job reports.
        max_spend: The candidate scope's own limit, or None for no limit of its own.
        resource_class: The concurrency class the job counts in (``"gpu"``, say);
            the plan's ``class_limits`` must declare it.
        options: Free-form JSON handed to the job unchanged.
    """

    key: str
    reservation: Decimal
    max_spend: Decimal | None = None
    resource_class: str | None = None
    options: dict[str, Any] = attrs.field(factory=dict)


@final
@attrs.frozen
class Plan:
    """A campaign: a panel of candidates, a target and the limits they run under.

    Attributes:
        name: The campaign's ledger scope (below the global scope).
        target: How many verified results are wanted (prior ones included).
        max_parallel: The most jobs running at once.
        max_spend: The campaign scope's limit in the ledger.
        job: ``package.module:function``, called once per candidate in a child process.
        candidates: The panel, in the order candidates are considered.
        class_limits: The most running jobs per resource class; every class a
            candidate names must be declared here.
        prior: Earlier verified results (a job's ``result.json`` or a
            campaign's ``report.json``); their keys count toward the target
            and are not run again. Relative paths are relative to the plan file.
        job_path: A directory searched before ``sys.path`` for the job's
            package; relative to the plan file.
    """

    name: str
    target: int
    max_parallel: int
    max_spend: Decimal
    job: str
    candidates: tuple[Candidate, ...]
    class_limits: dict[str, int] = attrs.field(factory=dict)
    prior: tuple[str, ...] = ()
    job_path: str | None = None

    def __attrs_post_init__(self) -> None:
        # Every rule is checked, so a bad plan is reported whole, not one
        # problem per attempt; the candidates are checked here, in context.
        problems = _plan_problems(self)
        if problems:
            raise FieldProblems(problems)

    def candidate(self, key: str) -> Candidate:
        """The candidate with ``key``.

        Raises:
            KeyError: no candidate has that key.
        """
        for candidate in self.candidates:
            if candidate.key == key:
                return candidate
        raise KeyError(key)


def load_plan(path: Path | str) -> Plan:
    """Read and check a plan file.

    Raises:
        CampaignFileError: the plan is invalid; every problem names its field.
        OSError: the file cannot be read.
    """
    return load_json(path, Plan, root="plan")
