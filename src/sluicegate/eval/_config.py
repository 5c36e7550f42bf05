"""What one ``sluicegate eval`` run was asked to do, and the rules for comparing runs.

:class:`EvalConfig` is written to ``run.json`` and read back by ``--resume``;
:class:`ErrorBudget` is the parsed ``--fail-on-error``.
"""

from __future__ import annotations

import re
from fractions import Fraction

import attrs

__all__ = ["DISPLAYS", "ErrorBudget", "EvalConfig", "UsageError", "differences"]

DISPLAYS = ("rich", "plain", "none")


class UsageError(Exception):
    """A mistake in the command or the environment, found before any rollout (exit 2)."""


@attrs.frozen
class EvalConfig:
    """The resolved settings of one evaluation.

    Attributes:
        target: ``path/to/file.py:NAME`` (the path made absolute) or
            ``package.module:NAME``.
        num_tasks: ``-n``: how many tasks at most; None for the whole set.
        rollouts: ``-r``: rollouts per task.
        concurrency: ``-c``: rollouts in flight at most.
        shuffle: ``--shuffle`` seed, or None.
        system_prompt_file: The ``--system-prompt`` path, as given.
        system_prompt: That file's text, applied to every task.
        retries: ``--retries``: extra attempts for a failing rollout.
        fail_on_error: ``--fail-on-error`` as given (see :class:`ErrorBudget`).
        ids: ``--id``: run only tasks with these ids (empty: all).
        output: The output directory.
        display: ``rich``, ``plain`` or ``none``.
        resume: Whether this run resumes ``output``.
    """

    target: str
    num_tasks: int | None = None
    rollouts: int = 1
    concurrency: int = 32
    shuffle: int | None = None
    system_prompt_file: str | None = None
    system_prompt: str | None = None
    retries: int = 0
    fail_on_error: str = "0"
    ids: tuple[str, ...] = ()
    output: str = ""
    display: str = "plain"
    resume: bool = False


# The settings that decide which rollouts exist and what they run. A resume must
# match them, or the rows already on disk would answer a different question.
# -c, --retries, --fail-on-error and --display may change between sessions.
_RESUME_KEYS: dict[str, str] = {
    "target": "TARGET",
    "num_tasks": "-n/--num-tasks",
    "rollouts": "-r/--rollouts",
    "shuffle": "--shuffle",
    "system_prompt": "--system-prompt (the file's text)",
    "ids": "--id",
}


def differences(recorded: EvalConfig, current: EvalConfig) -> list[str]:
    """Name every setting in which ``current`` may not differ from ``recorded`` for a resume.

    Returns:
        One human-readable line per difference; empty when the resume may go on.
    """
    found = []
    for key, flag in _RESUME_KEYS.items():
        old, new = getattr(recorded, key), getattr(current, key)
        if old != new:
            found.append(f"{flag}: {_shown(old)} in run.json, {_shown(new)} now")
    return found


def _shown(value: object) -> str:
    return "not given" if value is None else repr(value)


_COUNT = re.compile(r"\d+")


@attrs.frozen
class ErrorBudget:
    """How many error rows a run tolerates (``--fail-on-error``).

    A count ``N`` fails the run at the ``N``-th error (``0``, the default, at
    the first). A fraction ``f`` in (0, 1) fails it when the errors exceed
    ``f`` of the rollouts; for a run whose total grows (a stream or a
    ``SampleSource``) that is judged only once the run is over.
    """

    count: int | None = None
    fraction: Fraction | None = None

    @classmethod
    def parse(cls, text: str) -> ErrorBudget:
        """Read ``--fail-on-error``.

        Raises:
            UsageError: unless ``text`` is an int >= 0 or a number strictly between 0 and 1.
        """
        text = text.strip()
        if _COUNT.fullmatch(text):
            return cls(count=int(text))
        try:
            value = Fraction(text)
        except (ValueError, ZeroDivisionError):
            value = None
        if value is None or not 0 < value < 1:
            raise UsageError(
                f"--fail-on-error must be a count (0, 1, 2, ...) or a fraction in (0, 1), "
                f"not {text!r}"
            )
        return cls(fraction=value)

    def crossed(self, errors: int, total: int | None) -> bool:
        """Whether ``errors`` error rows break the budget.

        Args:
            errors: Error rows so far.
            total: The run's total rollouts when it is known (a static set, or
                any run once it is over); None while it still grows, in which
                case a fraction is never crossed.
        """
        if self.count is not None:
            return errors >= max(self.count, 1)
        assert self.fraction is not None
        return total is not None and errors > self.fraction * total
