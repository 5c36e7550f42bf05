"""A campaign plan: which jobs to run, under which limits, until which target."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs

from ._convert import load_json

__all__ = ["Candidate", "Plan", "load_plan"]

# Keys and names become ledger scopes and directory names.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_JOB = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def _name(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValueError(
            f"{attribute.name} must be letters, digits, '_', '.' or '-' "
            f"(not starting with '.' or '-'), got {value!r}"
        )


def _non_negative(_: object, attribute: attrs.Attribute[Any], value: Decimal | None) -> None:
    if value is not None and value < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value}")


def _positive_int(_: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or value < 1:
        raise ValueError(f"{attribute.name} must be an integer >= 1, got {value!r}")


def _class_limits(_: object, attribute: attrs.Attribute[Any], value: dict[str, int]) -> None:
    for name, limit in value.items():
        if isinstance(limit, bool) or limit < 1:
            raise ValueError(f"{attribute.name}[{name!r}] must be an integer >= 1, got {limit!r}")


def _job(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not _JOB.fullmatch(value):
        raise ValueError(
            f"{attribute.name} must look like 'package.module:function', got {value!r}"
        )


@attrs.frozen
class Candidate:
    """One job of the panel.

    Attributes:
        key: Unique within the plan; names the job's ledger scope and directory.
        reservation: Held in the ledger when the job is dispatched (its first
            worker reservation); settled with the cost the job reports.
        max_spend: The candidate scope's own limit, or None for no limit of its own.
        resource_class: The concurrency class the job counts in (``"gpu"``, say).
        options: Free-form JSON handed to the job unchanged.
    """

    key: str = attrs.field(validator=_name)
    reservation: Decimal = attrs.field(validator=_non_negative)
    max_spend: Decimal | None = attrs.field(default=None, validator=_non_negative)
    resource_class: str | None = None
    options: dict[str, Any] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        if self.max_spend is not None and self.reservation > self.max_spend:
            raise ValueError(f"reservation {self.reservation} is above max_spend {self.max_spend}")


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
        class_limits: The most running jobs per resource class.
        prior: Earlier verified results (a job's ``result.json`` or a
            campaign's ``report.json``); their keys count toward the target
            and are not run again. Relative paths are relative to the plan file.
        job_path: A directory searched before ``sys.path`` for the job's
            package; relative to the plan file.
    """

    name: str = attrs.field(validator=_name)
    target: int = attrs.field(validator=_positive_int)
    max_parallel: int = attrs.field(validator=_positive_int)
    max_spend: Decimal = attrs.field(validator=_non_negative)
    job: str = attrs.field(validator=_job)
    candidates: tuple[Candidate, ...]
    class_limits: dict[str, int] = attrs.field(factory=dict, validator=_class_limits)
    prior: tuple[str, ...] = ()
    job_path: str | None = None

    def __attrs_post_init__(self) -> None:
        if not self.candidates:
            raise ValueError("candidates must not be empty")
        seen: dict[str, int] = {}
        for i, candidate in enumerate(self.candidates):
            if candidate.key in seen:
                first = seen[candidate.key]
                raise ValueError(
                    f"candidates[{i}].key {candidate.key!r} repeats candidates[{first}]"
                )
            seen[candidate.key] = i
            if candidate.reservation > self.max_spend:
                raise ValueError(
                    f"candidates[{i}].reservation {candidate.reservation} is above the "
                    f"plan's max_spend {self.max_spend}"
                )

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
