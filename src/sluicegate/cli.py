"""The ``sluicegate`` command: parses arguments, then hands off to a subpackage.

Each subcommand lives with the code it drives; this module only wires them
together so that ``sluicegate --help`` lists them all.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from ._version import __version__

Handler = Callable[[argparse.Namespace], int]


# Imported only when one of them runs: the campaign needs POSIX (fcntl), and
# `sluicegate --help` and `eval` must work without it.
_POSIX_COMMANDS = {
    "ledger": "create, inspect or raise a budget ledger",
    "campaign": "run isolated batch jobs under classes, a target and a budget",
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv`` (default ``sys.argv[1:]``), which says what to import."""
    from ._demo import register as register_demo
    from .eval import _cli as eval_cli
    from .report import _cli as report_cli
    from .service import _cli as service_cli

    parser = argparse.ArgumentParser(
        prog="sluicegate",
        description="Run streams of work through a bounded window.",
    )
    parser.add_argument("--version", action="version", version=f"sluicegate {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register_demo(commands)
    eval_cli.register(commands)
    words = sys.argv[1:] if argv is None else list(argv)
    if words[:1] and words[0] in _POSIX_COMMANDS:
        from .campaign import _cli as campaign_cli

        campaign_cli.register(commands, _POSIX_COMMANDS)
    else:
        for name, text in _POSIX_COMMANDS.items():
            commands.add_parser(name, help=text)
    report_cli.register(commands)
    service_cli.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status."""
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        print("sluicegate: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into something that stopped reading (`| head`): not an
        # error of ours. Point stdout at devnull so the exit flush stays quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
