"""The ``rlpulse`` command line. Each subcommand lives in ``rlpulse.commands.<name>``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from rlpulse import __version__

# Subcommand modules; each defines ``register(subparsers)`` which adds its parser and sets
# ``func`` (a callable taking the parsed namespace and returning an exit code).
COMMANDS: tuple[str, ...] = (
    "catalog",
    "targets",
    "rollouts",
    "generate",
    "tail_tensorboard",
    "replay",
    "band",
    "stack",
    "demo",
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(prog="rlpulse", description=__doc__)
    parser.add_argument("--version", action="version", version=f"rlpulse {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"rlpulse.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse ``argv`` and run the chosen subcommand."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, KeyError) as exc:
        print(f"rlpulse {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
