"""Server addresses as they may be shown: in errors, logs and reprs, never with a password."""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["shown"]

# password=... in a libpq key/value string: a quoted value (with \' escapes) or a bare word.
_KEYWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
# password=... among a URL's query parameters.
_PARAMETER = re.compile(r"((?:^|&)password=)[^&]*", re.IGNORECASE)


def shown(address: str) -> str:
    """``address`` (a URL, or a libpq ``key=value`` string) with any password replaced by ``***``.

    The user name, host, port, database and other parameters stay, so an
    error still says where it tried to connect.
    """
    if "://" not in address:
        return _KEYWORD.sub(r"\1***", address)
    try:
        parts = urllib.parse.urlsplit(address)
    except ValueError:
        # Not a URL after all (an unbalanced [ in the host): hide whatever
        # lies between the scheme and the host, where a password would be.
        return re.sub(r"(://)[^@/]*@", r"\1***@", address)
    shown_address = address
    if "@" in parts.netloc:
        credentials, host = parts.netloc.rsplit("@", 1)
        user, has_password, _ = credentials.partition(":")
        if has_password:
            shown_address = address.replace(f"//{parts.netloc}", f"//{user}:***@{host}", 1)
    if parts.query:
        head, mark, query = shown_address.partition("?")
        shown_address = head + mark + _PARAMETER.sub(r"\1***", query)
    return shown_address
