"""What counts as an overload, and how long an error asks to wait.

Every policy asks these questions of an error: :class:`~sluicegate.Retry`
(how long to wait before the next attempt) and
:class:`~sluicegate.AdaptiveWindow` (shrink? pause?). They are answered here
once, from what model APIs and their clients actually raise, without
importing any client: an error is recognised by its HTTP status (wherever the
client keeps it), or by the name and package of its class (openai's
``APITimeoutError``, anthropic's ``OverloadedError``, httpx's
``TimeoutException``...), so none of those packages needs to be installed.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from typing import Final

import trio

__all__ = ["OVERLOAD_STATUSES", "is_overload", "retried_by_client", "retry_after"]

# The HTTP statuses that say "too much, slow down" or "not now" rather than
# "this request is wrong": rate limited (429), a gateway or server that could
# not serve in time or at all (502, 503, 504), and Anthropic's overloaded (529).
OVERLOAD_STATUSES: Final = frozenset({429, 502, 503, 504, 529})

# Classes recognised by (top-level package, class name) anywhere in the MRO,
# so that the clients need not be imported (nor installed) to be understood.
_OVERLOAD_CLASSES: Final = frozenset(
    {
        ("httpx", "TimeoutException"),  # ReadTimeout, PoolTimeout, ConnectTimeout, WriteTimeout
        ("httpx2", "TimeoutException"),
        ("httpcore", "TimeoutException"),
        ("openai", "APITimeoutError"),
        ("openai", "RateLimitError"),
        ("anthropic", "APITimeoutError"),
        ("anthropic", "RateLimitError"),
        ("anthropic", "OverloadedError"),
    }
)
# The error types a provider names in a body, for an error met inside a
# stream (the status of the response is then 200).
_OVERLOAD_BODY_TYPES: Final = frozenset({"overloaded_error", "rate_limit_error"})

# The header openai's and anthropic's clients send with each attempt: how many
# times the client has already retried this request itself.
_RETRY_COUNT_HEADER: Final = "x-stainless-retry-count"


def status_of(error: BaseException) -> int | None:
    """The HTTP status ``error`` carries, or None.

    Read from ``error.response.status_code`` (httpx's ``HTTPStatusError``),
    ``error.status_code`` (openai, anthropic) or ``error.status`` (aiohttp).
    """
    response = getattr(error, "response", None)
    for holder, name in ((response, "status_code"), (error, "status_code"), (error, "status")):
        value = getattr(holder, name, None) if holder is not None else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _named(error: BaseException) -> bool:
    for kind in type(error).__mro__:
        package = kind.__module__.partition(".")[0]
        if (package, kind.__name__) in _OVERLOAD_CLASSES:
            return True
    return False


def _body_type(error: BaseException) -> str | None:
    body = getattr(error, "body", None)
    if not isinstance(body, Mapping):
        return None
    inner = body.get("error", body)
    kind = inner.get("type") if isinstance(inner, Mapping) else None
    return kind if isinstance(kind, str) else None


def is_overload(error: BaseException) -> bool:
    """Whether ``error`` says the upstream is full, busy or too slow: the default test.

    True for:

    * an HTTP status 429, 502, 503, 504 or 529, kept as
      ``error.response.status_code``, ``error.status_code`` or ``error.status``;
    * a :class:`TimeoutError` (asyncio's and aiohttp's timeouts are ones) or a
      :class:`trio.TooSlowError`;
    * httpx's ``TimeoutException`` (read, write, connect and pool timeouts),
      and the openai and anthropic clients' ``APITimeoutError``,
      ``RateLimitError`` and ``OverloadedError``, recognised by name, so
      without importing those packages;
    * an error whose body names an ``overloaded_error`` or a
      ``rate_limit_error`` (an Anthropic stream that fails midway).
    """
    if isinstance(error, (TimeoutError, trio.TooSlowError)):
        return True
    if status_of(error) in OVERLOAD_STATUSES or _named(error):
        return True
    return _body_type(error) in _OVERLOAD_BODY_TYPES


def _seconds(value: object, scale: float = 1.0) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        seconds = float(value) * scale
    elif isinstance(value, (str, bytes)):
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        text = text.strip()
        try:
            seconds = float(text) * scale
        except ValueError:
            if scale != 1.0:
                return None  # retry-after-ms is a number, never a date
            try:
                when = email.utils.parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError):
                return None
            if when.tzinfo is None:
                return None
            seconds = when.timestamp() - time.time()
    else:
        return None
    if not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)


def _header(headers: object, name: str) -> object:
    if not isinstance(headers, Mapping):
        return None
    value = headers.get(name)
    if value is None:
        # A plain dict is case-sensitive; httpx's and aiohttp's headers are not.
        for key, found in headers.items():
            if isinstance(key, str) and key.lower() == name:
                return found
    return value


def retry_after(error: BaseException) -> float | None:
    """The seconds ``error`` asks to wait before trying again, or None if it says nothing.

    Read, in this order, from a ``retry_after`` attribute (seconds, or the
    header's text), then from the headers of ``error.response`` (httpx,
    openai, anthropic) or ``error.headers`` (aiohttp): ``retry-after-ms``
    (milliseconds, as OpenAI sends), then ``Retry-After``, in seconds or as an
    HTTP date. A date in the past is 0. An unreadable value says nothing. No
    value is cut short here: a provider asking for an hour gets an hour, unless
    the policy that reads it has a ``max_pause``.
    """
    own = getattr(error, "retry_after", None)
    if own is not None:
        return _seconds(own)
    response = getattr(error, "response", None)
    for headers in (getattr(response, "headers", None), getattr(error, "headers", None)):
        millis = _header(headers, "retry-after-ms")
        if millis is not None and (seconds := _seconds(millis, 0.001)) is not None:
            return seconds
        value = _header(headers, "retry-after")
        if value is not None:
            return _seconds(value)
    return None


def retried_by_client(error: BaseException) -> int:
    """How many times the client retried the request of ``error`` itself before raising it.

    The openai and anthropic clients retry a 429 (twice, by default) before
    raising it, and say so in the ``x-stainless-retry-count`` header of each
    attempt's request. A window never hears of those retries: it sees only
    the error that outlived them. 0 when nothing says so.
    """
    request = getattr(error, "request", None)
    if request is None:
        response = getattr(error, "response", None)
        try:
            request = getattr(response, "request", None)
        except RuntimeError:  # httpx: a response built without its request
            request = None
    value = _header(getattr(request, "headers", None), _RETRY_COUNT_HEADER)
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    try:
        return max(int(str(value)), 0) if value is not None else 0
    except ValueError:
        return 0
