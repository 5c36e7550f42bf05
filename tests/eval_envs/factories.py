"""TARGET factories that do not return an environment: they exit, raise or need arguments."""

import sys
from typing import NoReturn


def exits() -> NoReturn:
    sys.exit(0)  # an argparse --help path, say


def raises() -> NoReturn:
    raise RuntimeError("set API_KEY")


def raises_type_error() -> NoReturn:
    raise TypeError("bad config value")


def needs(model: str) -> NoReturn:
    raise AssertionError("never called")
