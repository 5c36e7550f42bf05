"""Placeholder: ``sluicegate campaign`` and ``sluicegate ledger`` land with issue 6."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: Any) -> None:
    """Add the ``campaign`` and ``ledger`` subcommands."""
    parser: argparse.ArgumentParser = commands.add_parser("campaign", help="(not yet available)")
    parser.set_defaults(handler=lambda args: 2)
