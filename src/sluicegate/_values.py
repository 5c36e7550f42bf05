"""The one encoder of user values: JSON where JSON can hold them, a bounded safe ``repr`` otherwise.

A run returns anything, and a task holds anything. Every file that keeps
such a value (an evaluation's ``results.jsonl``; a service journal) keeps it
through :func:`encode`, so that one value is written the same way
everywhere, is never lost, and never grows a record without bound:

* a value the given ``unstructure`` turns into data that strict JSON
  (RFC 8259: no ``NaN``, valid UTF-8) can write, and whose JSON text is at
  most ``cap`` characters, is kept as that data;
* a JSON-able value whose text is longer is kept as its JSON text cut to
  ``cap``;
* anything else is kept as its ``repr()`` (a description when ``repr()``
  raises), cut to ``cap``.

:class:`Encoded` says which happened, and how long the text was before
the cut. The module is a bottom-layer helper: it loads nothing heavier
than :mod:`json` until a value needs the default converter.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, Final, final

import attrs

from ._checks import check_count

__all__ = ["RESULT_CAP", "SAMPLE_CAP", "Encoded", "dumps", "encode", "safe_repr"]

SAMPLE_CAP: Final = 8192
"""Characters kept of each field of a sample (input, target, metadata, ...)."""

RESULT_CAP: Final = 1_000_000
"""Characters kept of a run's result: a row must stay a row, not a data dump."""

# Characters that some line splitters (str.splitlines, JavaScript) take for line
# breaks, but json.dumps leaves alone when ensure_ascii is off.
_BREAKS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


# Built once: json.dumps() with arguments builds an encoder on every call.
_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
# Ints beyond this may be slow to print, or too long to (4300 digits).
_SHORT_INT = 10**15
# The longest JSON text of a finite float ("-2.2250738585072014e-308"), rounded up.
_SHORT_TEXT = 32


def dumps(data: Any, indent: int | None = None) -> str:
    """``data`` as strict JSON text, safe to split on any line break.

    Raises:
        TypeError: a value JSON has no form for (a tuple as a key, an object).
        ValueError: a float that is not finite, or a lone surrogate, which
            cannot be written as UTF-8.
        RecursionError: data nested too deep (or cyclic).
    """
    if indent is None:
        text = _ENCODE(data)
    else:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False, indent=indent)
    text.encode("utf-8")
    # translate() walks the whole text; most texts hold none of the three.
    if "\u2028" in text or "\u2029" in text or "\x85" in text:
        return text.translate(_BREAKS)
    return text


def safe_repr(value: object) -> str:
    """``repr(value)``, or a description of ``value`` when its ``repr()`` raises.

    An integer of more than 4300 digits and an object whose ``__repr__``
    raises have no ``repr()``; the record holding them must still be written.
    """
    try:
        return repr(value)
    except Exception as exc:
        if isinstance(value, int):
            return f"<int of {value.bit_length()} bits, too long to write out: {exc}>"
        return f"<{type(value).__qualname__} object: repr() raised {type(exc).__name__}: {exc}>"


@final
@attrs.frozen
class Encoded:
    """A user value as a record keeps it.

    Attributes:
        data: What to write: the JSON-ready value itself, or (when
            :attr:`plain` is false) a string.
        repr: ``data`` is the value's ``repr()`` (it has no JSON form).
        truncated: ``data`` is the text cut to the cap.
        length: Characters of the whole text (JSON or ``repr``) before any
            cut; measured only when the value is not :attr:`plain` (0 then).
    """

    data: Any
    repr: bool = False
    truncated: bool = False
    length: int = 0

    @property
    def plain(self) -> bool:
        """Whether ``data`` is the value's own JSON form, whole."""
        return not (self.repr or self.truncated)


# The default converter, built on first use.
# Written by: _default_unstructure(), once.
_default_converter: Any = None


def _default_unstructure(value: Any) -> Any:
    # Built on first use: cattrs is not a bottom-layer import's price.
    global _default_converter
    if _default_converter is None:
        import uuid
        from decimal import Decimal

        from cattrs.preconf.json import make_converter

        # The JSON preset: sets and tuples as lists, datetimes as ISO text.
        converter = make_converter()
        # Money is text in JSON, never a float.
        converter.register_unstructure_hook(Decimal, str)
        converter.register_unstructure_hook(uuid.UUID, str)
        _default_converter = converter
    return _default_converter.unstructure(value)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def encode(
    value: object,
    *,
    cap: int = SAMPLE_CAP,
    unstructure: Callable[[Any], Any] | None = None,
) -> Encoded:
    """``value`` as a record keeps it (see the module's docstring). Never raises for an odd value.

    Args:
        value: Any object.
        cap: The most characters of text kept (an ``int >= 1``).
        unstructure: Turns ``value`` into JSON-ready data (a cattrs
            converter's ``unstructure``); default cattrs' JSON preset (sets
            and tuples as lists, datetimes as ISO text, attrs classes and
            dataclasses as objects) with ``Decimal`` and ``UUID`` as text.

    Raises:
        TypeError: ``cap`` is not an int.
        ValueError: ``cap`` is below 1.
    """
    if type(cap) is not int or cap < 1:
        check_count(cap, "cap", minimum=1)  # raises, in the shared wording
    # The common values skip the converter and the JSON text: a short string
    # (even with every character escaped as \uXXXX) or number is its own data.
    # (Any finite float or short int has a JSON text of at most 24 characters.)
    kind = type(value)
    if cap >= _SHORT_TEXT:
        if value is None or kind is bool:
            return Encoded(value)
        if type(value) is float and math.isfinite(value):
            return Encoded(value)
        if type(value) is int and -_SHORT_INT < value < _SHORT_INT:
            return Encoded(value)
    if type(value) is str and len(value) * 6 + 2 <= cap and _utf8(value):
        return Encoded(value)
    try:
        data = value
        if kind in (dict, list):
            # JSON takes plain containers of plain values as they are; the
            # converter is for what they may hold besides (an attrs value, a set).
            try:
                text = dumps(data)
            except TypeError:
                data = (unstructure or _default_unstructure)(value)
                text = dumps(data)
        else:
            if kind not in (str, int, float):
                data = (unstructure or _default_unstructure)(value)
            text = dumps(data)
    except Exception:
        # Exception, RecursionError included: str() of a huge int, a NaN, a
        # lone surrogate, a key JSON cannot hold, a converter that gave up.
        shown = safe_repr(value)
        return Encoded(shown[:cap], repr=True, truncated=len(shown) > cap, length=len(shown))
    if len(text) > cap:
        return Encoded(text[:cap], truncated=True, length=len(text))
    return Encoded(data)
