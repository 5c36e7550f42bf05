"""Placeholder: ``sluicegate eval`` lands with issue 5."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: Any) -> None:
    """Add the ``eval`` subcommand to the top-level parser's subcommands."""
    parser: argparse.ArgumentParser = commands.add_parser("eval", help="(not yet available)")
    parser.set_defaults(handler=lambda args: 2)
