"""What one evaluation was asked to do, checked once, and the rules for comparing runs.

:func:`configure` turns the arguments of
:func:`~sluicegate.eval.evaluate` into an :class:`EvalConfig`, refusing bad
values before anything happens. The config is written to ``run.json`` and
read back by a resume; :func:`differences` says whether a resume describes
the same run. :class:`ErrorBudget` is the parsed ``--fail-on-error``.
"""

from __future__ import annotations

import builtins
import importlib
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

import attrs

from .._checks import check_count, check_seconds
from .._retry import Retry
from ._errors import EvalError
from ._reduce import check_reducer

__all__ = [
    "EVERY_SCORE",
    "TARGET_MODULE",
    "ErrorBudget",
    "EvalConfig",
    "UsageError",
    "configure",
    "differences",
    "exception_name",
    "exception_types",
    "task_arguments",
]

# The --min-score key that stands for every score.
EVERY_SCORE = "*"

# A TARGET file path/to/NAME.py is loaded as the module TARGET_MODULE + NAME, so
# that it cannot clash with an importable module called NAME. `--retry-on
# NAME:Class` means a class of that loaded file (see exception_types).
TARGET_MODULE = "_sluicegate_eval_target_"


class UsageError(EvalError, ValueError):
    """A mistake in the command or the environment, found before any rollout (exit 2)."""


@attrs.frozen
class EvalConfig:
    """The resolved settings of one evaluation, as ``run.json`` records them.

    Attributes:
        target: ``path/to/file.py:NAME`` (the path made absolute) or
            ``package.module:NAME``; None for an environment object handed
            to :func:`~sluicegate.eval.evaluate` directly.
        num_tasks: ``-n``: how many tasks at most; None for the whole set.
        rollouts: ``-r``: rollouts per task.
        concurrency: ``-c``: rollouts in flight at most (with ``adaptive``,
            the most the adaptive window may reach).
        adaptive: ``-c auto`` or ``-c auto:MAX``: an
            :class:`~sluicegate.AdaptiveWindow` finds the concurrency.
        shuffle: ``--shuffle`` seed, or None.
        system_prompt: The system prompt's text, applied to every task.
        ids: ``--id``: run only tasks with these ids (empty: all).
        retries: ``--retries``: extra attempts for a failing rollout.
        retry_on: ``--retry-on``: the exceptions worth a retry, by name
            (builtin names or ``module:Name``); empty for every ``Exception``.
        retry_types: The classes ``retry_on`` names, as they were given to
            :func:`~sluicegate.eval.evaluate` (a class defined in a function
            has a name that cannot be imported again); not written to
            ``run.json``, and empty in a config read from it.
        timeout: ``--timeout``: seconds each attempt may take, or None.
        fail_on_error: ``--fail-on-error`` as given (see :class:`ErrorBudget`).
        min_score: ``--min-score``: the lowest mean allowed per score name
            (``"*"``: every score).
        output: The output directory.
        task_args: ``-T``: keyword arguments for the environment's factory
            (JSON values).
        reduce: ``--reduce``: the reducers over each task's rollouts.
        pass_threshold: ``--pass-threshold``: the score at which a rollout
            counts as correct for ``pass_at_K`` and ``at_least_K``.
        trace: ``--trace``: the sessions record their timeline in the
            output directory (``sluicegate eval --resume`` keeps recording).
    """

    target: str | None = None
    num_tasks: int | None = None
    rollouts: int = 1
    concurrency: int = 32
    adaptive: bool = False
    shuffle: int | None = None
    system_prompt: str | None = None
    ids: tuple[str, ...] = ()
    retries: int = 0
    retry_on: tuple[str, ...] = ()
    timeout: float | None = None
    fail_on_error: str = "0"
    min_score: dict[str, float] = attrs.field(factory=dict)
    output: str = ""
    task_args: dict[str, Any] = attrs.field(factory=dict)
    reduce: tuple[str, ...] = ()
    pass_threshold: float = 1.0
    trace: bool = False
    retry_types: tuple[type[Exception], ...] = attrs.field(default=(), eq=False, repr=False)

    def retry(self) -> Retry | None:
        """The retry policy: full-jitter exponential backoff, 0.1 s doubling to 5 s at most."""
        if not self.retries:
            return None
        on = self.retry_types or exception_types(self.retry_on)
        return Retry(attempts=self.retries + 1, on=on or (Exception,))


def _count(name: str, value: object, minimum: int) -> int:
    # A wrong type is a TypeError, as from run_stream() and serve(); a wrong
    # value a UsageError (a ValueError), which the command line reports.
    try:
        return check_count(value, name, minimum=minimum)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


# The largest window -c auto may grow to (AdaptiveWindow's own default).
AUTO_MAX = 256


def parse_concurrency(value: object) -> tuple[int, bool]:
    """``-c``'s value as ``(bound, adaptive)``: an int >= 1, ``"auto"`` or ``"auto:MAX"``.

    Raises:
        UsageError: for anything else, naming the forms it takes.
    """
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "auto":
            return AUTO_MAX, True
        if text.startswith("auto:"):
            try:
                bound = int(text[5:])
            except ValueError:
                bound = 0
            if bound >= 1:
                return bound, True
        raise UsageError(
            f"-c/--concurrency takes an integer >= 1, 'auto' or 'auto:MAX', not {value!r}"
        )
    return _count("-c/--concurrency", value, 1), False


def _seconds(name: str, value: object) -> float:
    try:
        return check_seconds(value, name, zero=False)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _score_floor(name: str, value: object, flag: str = "--min-score") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        where = flag if name == flag else f"{flag} {name}"
        raise UsageError(f"{where}: the threshold must be a finite number, not {value!r}")
    return float(value)


def _min_score(value: float | Mapping[str, float] | None) -> dict[str, float]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(key): _score_floor(str(key), floor) for key, floor in value.items()}
    return {EVERY_SCORE: _score_floor(EVERY_SCORE, value)}


def task_arguments(args: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check ``-T`` arguments: identifiers for names, JSON values (a copy is returned).

    Raises:
        UsageError: naming the argument.
    """
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        raise UsageError(f"task_args (-T) must be a mapping of names to values, not {args!r}")
    checked: dict[str, Any] = {}
    for key, value in args.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise UsageError(f"-T {key!r}: an argument name must be a Python identifier")
        try:
            # run.json records them, and a resume passes them again.
            checked[key] = json.loads(json.dumps(value, allow_nan=False))
        except (TypeError, ValueError):
            raise UsageError(
                f"-T {key}: the value must be JSON (text, a number, a list, a mapping...), "
                f"not {type(value).__name__}"
            ) from None
    return checked


def _reducers(names: Iterable[str]) -> tuple[str, ...]:
    if isinstance(names, str):
        names = (names,)
    found: list[str] = []
    for name in names:
        try:
            reducer = check_reducer(name)
        except (TypeError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        if reducer not in found:
            found.append(reducer)
    return tuple(found)


def _ids(ids: Iterable[str | int]) -> tuple[str, ...]:
    if isinstance(ids, (str, bytes)):
        raise UsageError(f"ids must be a collection of task ids, not the string {ids!r}")
    return tuple(str(task_id) for task_id in ids)


def exception_name(kind: type[BaseException]) -> str:
    """How ``run.json`` names an exception class: a builtin by name, else ``module:Name``.

    A class defined in a ``TARGET`` file is named after the file
    (``retryon:RateLimited`` for ``retryon.py``), as a user would write it.
    """
    name: str = kind.__name__
    if getattr(builtins, name, None) is kind:
        return name
    module = kind.__module__
    if module.startswith(TARGET_MODULE):
        module = module[len(TARGET_MODULE) :]
    return f"{module}:{kind.__qualname__}"


def _module(name: str) -> object:
    # A TARGET file already loaded answers for its own name: importing the
    # file again would run it twice and make a second, different class.
    loaded = sys.modules.get(TARGET_MODULE + name)
    return loaded if loaded is not None else importlib.import_module(name)


def exception_types(names: Iterable[str]) -> tuple[type[Exception], ...]:
    """The exception classes ``names`` stand for (see :func:`exception_name`).

    ``module:Name`` looks in the ``TARGET`` file called ``module.py`` when
    that file is the environment's (it is loaded by then), and imports
    ``module`` otherwise.

    Raises:
        UsageError: for a name that does not import or is not an exception class.
    """
    found = []
    for name in names:
        module_name, sep, path = name.rpartition(":")
        try:
            kind: object = _module(module_name) if sep else builtins
            for part in path.split("."):
                kind = getattr(kind, part)
        except (ImportError, AttributeError, ValueError) as exc:
            raise UsageError(
                f"--retry-on {name!r}: no such exception ({type(exc).__name__}: {exc}); "
                f"give a builtin name such as TimeoutError, or module:Name"
            ) from None
        found.append(_retried(name, kind))
    return tuple(found)


def _retried(name: str, kind: object) -> type[Exception]:
    if not (isinstance(kind, type) and issubclass(kind, BaseException)):
        raise UsageError(f"--retry-on {name!r} is not an exception class")
    if not issubclass(kind, Exception):
        raise UsageError(f"--retry-on {name!r}: only Exception subclasses are retried")
    return kind


def _retry_on(
    kinds: Iterable[type[BaseException] | str],
) -> tuple[tuple[str, ...], tuple[type[Exception], ...]]:
    """The names ``run.json`` records for ``kinds``, and the classes they stand for.

    A class is kept as it was given; only its name is written down.
    """
    if isinstance(kinds, str):
        kinds = (kinds,)
    names: list[str] = []
    types: list[type[Exception]] = []
    for kind in kinds:
        if isinstance(kind, str):
            # Every name must resolve now, not at the first failure.
            types.extend(exception_types([kind]))
            names.append(kind)
        elif isinstance(kind, type) and issubclass(kind, BaseException):
            name = exception_name(kind)
            types.append(_retried(name, kind))
            names.append(name)
        else:
            raise UsageError(f"--retry-on takes exception classes or their names, not {kind!r}")
    return tuple(names), tuple(types)


def configure(
    *,
    target: str | None,
    num_tasks: int | None,
    rollouts: int,
    concurrency: int | str,
    shuffle: int | None,
    system_prompt: str | None,
    ids: Iterable[str | int],
    retries: int,
    retry_on: Iterable[type[BaseException] | str],
    timeout: float | None,
    fail_on_error: int | float | str,
    min_score: float | Mapping[str, float] | None,
    output: str,
    task_args: Mapping[str, Any] | None = None,
    reduce: Iterable[str] = (),
    pass_threshold: float = 1.0,
    trace: bool = False,
) -> EvalConfig:
    """Check every setting and build the run's config; nothing happens before this passes.

    The arguments are those of :func:`~sluicegate.eval.evaluate`.

    Raises:
        UsageError: naming the first setting that is wrong, and why.
    """
    if shuffle is not None and (isinstance(shuffle, bool) or not isinstance(shuffle, int)):
        raise UsageError(f"--shuffle takes an integer seed, not {shuffle!r}")
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise UsageError(f"the system prompt must be text, not {type(system_prompt).__name__}")
    budget_text = str(fail_on_error).strip()
    ErrorBudget.parse(budget_text)
    retry_names, retry_types = _retry_on(retry_on)
    bound, adaptive = parse_concurrency(concurrency)
    return EvalConfig(
        target=target,
        num_tasks=None if num_tasks is None else _count("-n/--num-tasks", num_tasks, 1),
        rollouts=_count("-r/--rollouts", rollouts, 1),
        concurrency=bound,
        adaptive=adaptive,
        shuffle=shuffle,
        system_prompt=system_prompt,
        ids=_ids(ids),
        retries=_count("--retries", retries, 0),
        retry_on=retry_names,
        timeout=None if timeout is None else _seconds("--timeout", timeout),
        fail_on_error=budget_text,
        min_score=_min_score(min_score),
        output=output,
        task_args=task_arguments(task_args),
        reduce=_reducers(reduce),
        pass_threshold=_score_floor("--pass-threshold", pass_threshold, "--pass-threshold"),
        trace=trace,
        retry_types=retry_types,
    )


# The settings that decide which rollouts exist and what they run. A resume must
# match them, or the rows already on disk would answer a different question.
# -c, --retries, --retry-on, --timeout, --fail-on-error, --min-score,
# --reduce, --pass-threshold and --display may change between sessions.
RESUME_KEYS: dict[str, str] = {
    "target": "TARGET",
    "num_tasks": "-n/--num-tasks",
    "rollouts": "-r/--rollouts",
    "shuffle": "--shuffle",
    "system_prompt": "--system-prompt (the file's text)",
    "ids": "--id",
    "task_args": "-T",
}


def differences(recorded: EvalConfig, current: EvalConfig) -> list[str]:
    """Name every setting in which ``current`` may not differ from ``recorded`` for a resume.

    An environment object handed to :func:`~sluicegate.eval.evaluate` has
    no ``target``; then the target is not compared.

    Returns:
        One human-readable line per difference; empty when the resume may go on.
    """
    found = []
    for key, flag in RESUME_KEYS.items():
        old, new = getattr(recorded, key), getattr(current, key)
        if key == "target" and new is None:
            continue
        if key == "ids":
            # A selection: the order and repeats of --id mean nothing.
            old, new = sorted(set(old)), sorted(set(new))
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
