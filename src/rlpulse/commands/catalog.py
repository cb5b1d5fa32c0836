"""``rlpulse catalog``: print the metric catalog as JSON or as the Markdown reference."""

from __future__ import annotations

import argparse
from typing import Any

from rlpulse.stack.docs import reference


def register(sub: Any) -> None:
    """Add the ``catalog`` subcommand."""
    p = sub.add_parser("catalog", help="print the metric catalog (json or markdown)")
    p.add_argument("--format", choices=("json", "markdown"), default="json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the catalog in the chosen format."""
    print(reference.as_json() if args.format == "json" else reference.as_markdown(), end="")
    return 0
