"""The ``sluicegate`` command: parses arguments, then hands off to a subpackage.

Each subcommand lives with the code it drives; this module only wires them
together so that ``sluicegate --help`` lists them all.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ._version import __version__

Handler = Callable[[argparse.Namespace], int]


# Imported only when one of them runs: the campaign needs POSIX (fcntl), and
# `sluicegate --help` and `eval` must work without it.
_POSIX_COMMANDS = {
    "ledger": "create, inspect or raise a budget ledger",
    "campaign": "run isolated batch jobs under classes, a target and a budget",
}


# Where a parsed namespace keeps the (sub)parser of the command it ran.
_PARSER = "sluicegate_parser"


class _Parser(argparse.ArgumentParser):
    """An argument parser that leaves its name on what it parses.

    Subcommands' parsers are of the same class (argparse makes them so): the
    innermost one to finish sets the name first, so that a flag no parser
    knew is reported by the command it was given to, with its usage.
    """

    def parse_known_args(  # type: ignore[override]  # argparse's overloads
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if getattr(parsed, _PARSER, None) is None:
            setattr(parsed, _PARSER, self)
        return parsed, extras


def _unrecognized(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """``argparse``'s message for ``extras``, and the nearest flag to each mistyped one."""
    options = [
        option
        for action in parser._actions  # argparse keeps no public list of them
        for option in action.option_strings
    ]
    hints = [
        (word, near)
        for word in extras
        if word.startswith("-") and len(word) > 2
        for near in [_nearest(word, options)]
        if near is not None
    ]
    message = f"unrecognized arguments: {' '.join(extras)}"
    if len(hints) == 1:
        return f"{message}; did you mean {hints[0][1]}?"
    if hints:
        return f"{message}; did you mean {', '.join(f'{near} for {word}' for word, near in hints)}?"
    return message


def _nearest(word: str, options: Iterable[str]) -> str | None:
    """The long option most like ``word``, by its whole name or its first letters."""
    body = word.lstrip("-").split("=", 1)[0]
    best, score = None, 0.6  # below this, a guess misleads more than it helps
    for option in options:
        if not option.startswith("--"):
            continue
        name = option[2:]
        ratios = [difflib.SequenceMatcher(None, body, name).ratio()]
        if len(body) >= 3:
            # A mangled start ("--nmu" for "--num-tasks").
            ratios.append(difflib.SequenceMatcher(None, body, name[: len(body)]).ratio())
        if max(ratios) > score:
            best, score = option, max(ratios)
    return best


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv`` (default ``sys.argv[1:]``), which says what to import."""
    from ._demo import register as register_demo
    from .eval import _cli as eval_cli
    from .report import _cli as report_cli
    from .service import _cli as service_cli

    parser = _Parser(
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
    args, extras = parser.parse_known_args(argv)
    if extras:
        # Said by the command they were given to, with its usage (argparse
        # would answer with the top-level usage alone).
        command: argparse.ArgumentParser = getattr(args, _PARSER, parser)
        command.error(_unrecognized(command, extras))
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
