"""The one cattrs converter of ``sluicegate.service``, and how values become journal text.

A run may return anything. The package's one encoder of user values
(:func:`sluicegate._values.encode`, which evaluations use too) decides what
is kept: what this converter can turn into JSON (primitives, mappings,
sequences, sets, attrs classes, dataclasses, datetimes, paths, ``Decimal``
as a string, ``UUID``) is stored as JSON, up to ``RESULT_CAP`` characters;
anything else, or the text of a longer value cut there, is stored as text
with the format ``"repr"``, so nothing a run returned is ever lost, only
flattened.
"""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from typing import Any, Literal

from cattrs.preconf.json import make_converter

from .. import _values

__all__ = ["ValueFormat", "converter", "decode_value", "encode_value", "storable"]

ValueFormat = Literal["json", "repr"]

converter = make_converter()
# Money is a string in JSON, never a float (DESIGN: money is Decimal).
converter.register_unstructure_hook(Decimal, str)
converter.register_unstructure_hook(uuid.UUID, str)


def encode_value(value: object) -> tuple[str, ValueFormat]:
    """``value`` as journal text, and the format it is in. Never raises for an odd value."""
    encoded = _values.encode(value, cap=_values.RESULT_CAP, unstructure=converter.unstructure)
    if encoded.plain:
        return _values.dumps(encoded.data), "json"
    # A repr, or JSON text cut short: text either way, and a repr may hold
    # a lone surrogate that SQLite could not store.
    return storable(encoded.data), "repr"


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
