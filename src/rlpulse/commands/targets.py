"""``rlpulse targets``: write Prometheus file_sd targets for every rank of a multi-node job."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from rlpulse.runtime import targets
from rlpulse.runtime.options import DEFAULT_PORT


def register(sub: Any) -> None:
    """Add the ``targets`` subcommand."""
    p = sub.add_parser("targets", help="write file_sd target files for a multi-node job")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--hosts", help="comma-separated hosts, Slurm ranges allowed: gpu[01-16]")
    src.add_argument("--hostfile", type=Path, help="hostfile: 'host [slots=N]' per line")
    p.add_argument("--ranks-per-node", type=int, default=8, help="exporters per node (default 8)")
    p.add_argument("--base-port", type=int, default=DEFAULT_PORT)
    p.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="K=V",
        help="extra target label (not run_id, rank, local_rank, node, job or instance)",
    )
    p.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Build the target groups and write or print them."""
    if args.hosts:
        nodes = [targets.Node(h, args.ranks_per_node) for h in targets.expand_hostlist(args.hosts)]
    elif args.hostfile:
        nodes = targets.read_hostfile(args.hostfile, args.ranks_per_node)
    else:
        nodes = targets.nodes_from_env(os.environ, args.ranks_per_node)
    labels = {}
    for item in args.label:
        key, sep, val = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--label {item!r}: expected NAME=VALUE")
        labels[key] = val
    groups = targets.file_sd(nodes, args.base_port, labels)
    if args.output:
        targets.write(args.output, groups)
        n = sum(node.ranks for node in nodes)
        print(f"wrote {n} targets on {len(groups)} nodes to {args.output}")
    else:
        print(json.dumps(groups, indent=2))
    return 0
