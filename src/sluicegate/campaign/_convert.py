"""The one cattrs converter of the campaign subpackage, and readable errors.

Every JSON file the campaign reads or writes (plans, job requests and
results, reports, the run manifest) goes through :data:`converter`, so money
is always a string in JSON and a :class:`~decimal.Decimal` in Python, and an
invalid file is refused with messages that name the offending field.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.v import format_exception, transform_error

from .._util import write_atomically
from ._errors import CampaignError

__all__ = [
    "CampaignFileError",
    "FieldProblems",
    "converter",
    "dump_json",
    "load_json",
    "write_json_atomic",
]

T = TypeVar("T")

converter = cattrs.Converter(forbid_extra_keys=True)


def _structure_decimal(value: object, _: type) -> Decimal:
    # A JSON float has already been rounded to binary by the parser, so money
    # must be written as a string ("200.00") or an integer.
    if isinstance(value, (bool, float)):
        raise TypeError(f'write money as a string (e.g. "200.00"), not {value!r}')
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, (int, str)):
        try:
            result = Decimal(value)
        except InvalidOperation:
            raise ValueError(f"not a decimal amount: {value!r}") from None
    else:
        raise TypeError(f"money must be a string or an integer, not {value!r}")
    if not result.is_finite():
        raise ValueError(f"not a finite amount: {value!r}")
    return result


def _strict(kind: type) -> Any:
    # cattrs would call int("2") or int(2.7), str(1), bool("no"); a plan that
    # says "target": 2.7 is a mistake to report, not to round.
    def structure(value: object, _: type) -> object:
        if type(value) is not kind:
            raise TypeError(f"expected {kind.__name__}, got {value!r}")
        return value

    return structure


converter.register_structure_hook(Decimal, _structure_decimal)
for _kind in (int, str, bool):
    converter.register_structure_hook(_kind, _strict(_kind))
converter.register_unstructure_hook(Decimal, str)


class CampaignFileError(CampaignError, ValueError):
    """A JSON file of the campaign (a plan, a report, a result) is invalid.

    Attributes:
        path: The file.
        problems: One readable line per problem, each naming the field.
    """

    def __init__(self, path: Path | str, problems: list[str]) -> None:
        self.path: Path = Path(path)
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{path}: invalid\n{lines}")


class FieldProblems(CampaignError, ValueError):
    """A value breaks several rules at once; raised by a class's own checks.

    Attributes:
        problems: ``(field, message)`` pairs, the field relative to the value
            (e.g. ``candidates[2].key``).
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{field}: {message}" for field, message in problems))


def _format(exc: BaseException, type_: type | None) -> str:
    text = format_exception(exc, type_)
    # cattrs says only "invalid value" for an error raised by an attrs
    # validator; the validator's own message (which names the field) is the
    # useful part.
    if text == "invalid value":
        return str(exc)
    if text.startswith("invalid value for type"):
        return f"{text}: {exc}"
    return text


def load_json(path: Path | str, cls: type[T], *, root: str = "$") -> T:
    """Read ``path`` as JSON and structure it as ``cls``.

    Args:
        path: The file to read.
        cls: The attrs class to build.
        root: The name used for the document's root in error messages.

    Returns:
        The structured value. JSON numbers keep their JSON types, so free-form
        fields (a candidate's ``options``) reach the job exactly as written;
        money fields refuse floats and take strings or integers.

    Raises:
        CampaignFileError: the file is not JSON, or does not fit ``cls``;
            each problem names the field, e.g. ``plan.candidates[2].key``.
        OSError: the file cannot be read.
    """
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CampaignFileError(path, [f"not valid JSON: {exc}"]) from None
    return structure(data, cls, path=path, root=root)


_JSON_KIND = {
    list: "a list",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def structure(data: Any, cls: type[T], *, path: Path | str, root: str = "$") -> T:
    """Structure already-parsed JSON ``data`` as ``cls``, with readable errors.

    Raises:
        CampaignFileError: as for :func:`load_json`.
    """
    if attrs.has(cls) and not isinstance(data, dict):
        # cattrs would fail on `.keys()` and report an "unknown error".
        kind = _JSON_KIND.get(type(data), type(data).__name__)
        raise CampaignFileError(path, [f"{root}: must be a JSON object, not {kind}"])
    try:
        return converter.structure(data, cls)
    except Exception as exc:
        # cattrs wraps the class's own checks (run by its constructor once
        # every field has the right type) in a group of one.
        inner = exc.exceptions if isinstance(exc, cattrs.ClassValidationError) else ()
        if len(inner) == 1 and isinstance(inner[0], FieldProblems):
            lines = [f"{message} @ {root}.{field}" for field, message in inner[0].problems]
            raise CampaignFileError(path, lines) from exc
        problems = transform_error(exc, path=root, format_exception=_format)
        raise CampaignFileError(path, problems) from exc


def dump_json(value: object) -> str:
    """``value`` unstructured and rendered as indented, key-sorted JSON."""
    return json.dumps(converter.unstructure(value), indent=2, sort_keys=True) + "\n"


def write_json_atomic(path: Path, value: object, *, mode: int = 0o644) -> None:
    """Write ``value`` as JSON to ``path`` so that readers see old or new, never half.

    The text goes to a temporary file in the same directory, is flushed to
    disk, and is renamed over ``path``.
    """
    write_atomically(path, dump_json(value), mode=mode, durable=True)
