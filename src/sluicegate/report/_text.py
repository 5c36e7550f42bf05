"""User text made safe to show in a page: inert, escaped, and embeddable as JSON.

A run's text (task ids, inputs, results, error messages, tracebacks, score
names) is whatever the user's code produced. Three things in it could hurt
a page: markup (escaped), characters that reorder or hide the text around
them (bidirectional overrides and isolates, zero-width and format
characters, controls) and lone surrogates, which cannot even be written as
UTF-8 (eval writes them on purpose, as ``\\udcxx`` escapes of bytes that
were not text). :func:`inert` turns each of those into its visible
``\\uXXXX`` form, so the page shows that they were there and they do
nothing.
"""

from __future__ import annotations

import json
import re
from html import escape
from typing import Any, Final

__all__ = ["embed_json", "html_text", "inert", "inert_json"]

# C0 and C1 controls but tab and newline; the soft hyphen; the Arabic letter
# mark; the Hangul fillers; zero-width characters and the directional marks,
# embeddings, overrides and isolates; the line and paragraph separators; word
# joiner and invisible operators; the byte order mark; interlinear
# annotations; lone surrogates; the non-characters U+FFFE and U+FFFF; the
# invisible tag characters (text hidden in plain sight).
_ODD: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u061c\u115f\u1160\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u206f\u3164\ufeff\uffa0\ufff9-\ufffb\ud800-\udfff"
    "\ufffe\uffff\U000e0000-\U000e007f]"
)


def _escape(character: str) -> str:
    code = ord(character)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _visible(match: re.Match[str]) -> str:
    return _escape(match.group())


def inert(text: str) -> str:
    """``text`` with every character that could reorder, hide or break the page made visible.

    >>> inert("abc\\u202edef")
    'abc\\\\u202edef'
    """
    if _ODD.search(text) is None:
        return text
    return _ODD.sub(_visible, text)


def _visible_in_json(match: re.Match[str]) -> str:
    return "\\" + _escape(match.group())


def inert_json(text: str) -> str:
    """JSON text whose strings hold, after parsing, what :func:`inert` would make of them.

    Such characters occur only inside the strings of ``json.dumps`` output
    (with ``ensure_ascii=False``), where a visible ``\\uXXXX`` must be
    written with its backslash escaped. Controls are escaped by ``json.dumps``
    itself and come back as controls: put into the page as text, they do
    not reorder it.
    """
    if _ODD.search(text) is None:
        return text
    return _ODD.sub(_visible_in_json, text)


def html_text(value: object) -> str:
    """``str(value)`` made inert and escaped for HTML text and attribute values."""
    return escape(inert(str(value)), quote=True)


def embed_json(data: Any) -> str:
    """``data`` as JSON that can sit inside ``<script type="application/json">``.

    Its strings, once parsed, are what :func:`inert` makes of them. ``<``
    only occurs inside JSON strings, so writing it as ``\\u003c`` keeps
    ``</script>`` and ``<!--`` in user text from ending or changing the
    element; JSON.parse reads it back as ``<``.

    Raises:
        ValueError: ``data`` holds a float that is not finite (JSON has none).
    """
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return inert_json(text).replace("<", "\\u003c")
