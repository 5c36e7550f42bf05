"""Placeholder for ``sluicegate campaign`` while it is built."""

from __future__ import annotations

import argparse
from typing import Any


def register_campaign(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("campaign", help="(in progress)")
    parser.set_defaults(handler=lambda args: 2)
