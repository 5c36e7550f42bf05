"""The one cattrs converter of ``sluicegate.service``, and how values become journal text.

A run may return anything. What the converter can turn into JSON (primitives,
mappings, sequences, sets, attrs classes, dataclasses, datetimes, paths,
``Decimal`` as a string, ``UUID``) is stored as JSON; anything else is stored
as its ``repr`` with the format ``"repr"``, so nothing a run returned is ever
lost, only flattened.

This is not the package's shared encoder (``sluicegate._values.encode``, which
``results.jsonl`` uses): that one costs about 7 µs more per journaled item
(an ``Encoded`` record and a JSON encoder built per call), measured with
``bench/service.py``; the ``repr`` of a value is the shared ``safe_repr``.
"""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from typing import Any, Literal

from cattrs.preconf.json import make_converter

from .._values import safe_repr

__all__ = ["ValueFormat", "converter", "decode_value", "encode_value", "storable"]

ValueFormat = Literal["json", "repr"]

converter = make_converter()
# Money is a string in JSON, never a float (DESIGN: money is Decimal).
converter.register_unstructure_hook(Decimal, str)
converter.register_unstructure_hook(uuid.UUID, str)

# Compact, and strict: NaN and infinity are not JSON, so such a value is kept
# as its repr instead of as text other JSON readers reject.
_encode = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode


def encode_value(value: object) -> tuple[str, ValueFormat]:
    """``value`` as journal text, and the format it is in.

    Never raises for an odd value: a value the converter cannot make JSON of
    (or whose unstructuring fails) is stored as its ``repr``.
    """
    # The common results skip the converter: a service that returns nothing
    # pays nothing for the journal's value column.
    if value is None:
        return "null", "json"
    # Inside the try too: str() of an int over sys.get_int_max_str_digits()
    # digits raises, and a try costs nothing until it catches.
    try:
        kind = type(value)
        if kind is int:
            return str(value), "json"
        text = _encode(value if kind is str else converter.unstructure(value))
        if not text.isascii():
            # A lone surrogate (a file name's undecodable byte, from
            # os.fsdecode) is no UTF-8: SQLite could not store the text.
            text.encode("utf-8")
        return text, "json"
    except Exception:
        return storable(safe_repr(value)), "repr"


def storable(text: str) -> str:
    """``text`` as valid UTF-8: a lone surrogate becomes its ``\\udcXX`` escape."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def decode_value(text: str | None, fmt: str) -> Any:
    """The stored value: JSON-ready data (dicts, lists, ...) or the ``repr`` string."""
    if text is None:
        return None
    if fmt == "json":
        return json.loads(text)
    return text
