"""``rlpulse stack up|down|status``: Prometheus and Alertmanager run locally, without Docker."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from rlpulse.offline import stackrun
from rlpulse.rollouts.paths import default_data_dir
from rlpulse.rollouts.server import VIEWER_PORT
from rlpulse.runtime import discovery
from rlpulse.runtime.options import DEFAULT_PORT

MISSING_BINARY = 3
"""Exit status of ``up`` when a binary is not installed (``scripts/demo`` then runs the trainer
alone)."""


def register(sub: Any) -> None:
    """Add ``stack`` and its ``up``, ``down`` and ``status`` subcommands."""
    p = sub.add_parser("stack", help="run the generated Prometheus + Alertmanager locally")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    default_dir = Path(os.environ.get(stackrun.DIR_ENV) or stackrun.DEFAULT_DIR)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        q: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        q.add_argument(
            "--dir",
            type=Path,
            default=default_dir,
            help=f"state directory: config, data, logs, pid files (default ${stackrun.DIR_ENV} "
            f"or {stackrun.DEFAULT_DIR})",
        )
        return q

    u = add(
        "up",
        "generate the config and start Prometheus, Alertmanager, the local inbox and the "
        "rollout viewer",
    )
    u.add_argument("--fast", action="store_true", help="the fast preset: alerts within seconds")
    u.add_argument("--config", type=Path, help="YAML overriding thresholds and windows")
    u.add_argument(
        "--pagerduty-url",
        help="Events API v2 endpoint for critical alerts (default: the local inbox)",
    )
    u.add_argument(
        "--pagerduty-key-file",
        type=Path,
        help="file holding the routing key (default: a placeholder written into --dir)",
    )
    u.add_argument("--prometheus-port", type=int, default=9090)
    u.add_argument("--alertmanager-port", type=int, default=9093)
    u.add_argument("--inbox-port", type=int, default=9095, help="local PagerDuty/webhook stand-in")
    u.add_argument(
        "--rollouts-port",
        type=int,
        default=VIEWER_PORT,
        help="the rollout viewer (links.rollouts_url defaults to it)",
    )
    u.add_argument(
        "--data-dir", type=Path, help="rollout stores the viewer reads (default $RLPULSE_DATA_DIR)"
    )
    u.add_argument(
        "--pushgateway-port",
        type=int,
        default=9091,
        help="the Pushgateway's port, when prometheus-pushgateway is installed",
    )
    env_dir = os.environ.get(discovery.TARGETS_ENV, "").strip()
    u.add_argument(
        "--targets-dir",
        type=Path,
        default=Path(env_dir)
        if env_dir and env_dir.lower() not in discovery.OFF
        else discovery.default_dir(),
        help="the discovery directory every trainer on this machine registers in (default "
        f"${discovery.TARGETS_ENV} or {discovery.default_dir()})",
    )
    u.set_defaults(func=run_up)
    add("down", "stop what `stack up` started (idempotent)").set_defaults(func=run_down)
    add("status", "what runs, and the notifications received so far").set_defaults(func=run_status)


def run_up(args: argparse.Namespace) -> int:
    """Start (or reload) the stack and print what to open."""
    opts = stackrun.StackOptions(
        dir=args.dir,
        fast=args.fast,
        config=args.config,
        pagerduty_url=args.pagerduty_url,
        pagerduty_key_file=args.pagerduty_key_file,
        prometheus_port=args.prometheus_port,
        alertmanager_port=args.alertmanager_port,
        inbox_port=args.inbox_port,
        rollouts_port=args.rollouts_port,
        data_dir=args.data_dir,
        pushgateway_port=args.pushgateway_port,
        targets_dir=args.targets_dir,
    )
    try:
        svcs = stackrun.up(opts)
    except stackrun.MissingBinary as exc:
        print(f"rlpulse stack up: error: {exc}", file=sys.stderr)
        return MISSING_BINARY
    except RuntimeError as exc:
        print(f"rlpulse stack up: error: {exc}", file=sys.stderr)
        return 1
    if warning := stackrun.placeholder_key_warning(opts):
        banner = "!" * 72
        print(f"{banner}\n{warning}\n{banner}", file=sys.stderr)
    d = args.dir
    inbox = next(s for s in svcs if s.name == "inbox")
    if inbox.port != args.inbox_port:
        print(f"rlpulse stack: port {args.inbox_port} is in use; the inbox listens on {inbox.port}")
    preset = "fast preset: alerts within seconds" if args.fast else "default timings"
    print(f"rlpulse stack: running from {d} ({preset})")
    for what, url in stackrun.iter_urls(svcs):
        print(f"  {what + ':':<55} {url}")
    critical = args.pagerduty_url or f"the inbox, {d / stackrun.INBOX_FILE}"
    print(f"  critical alerts page {critical}; warnings go to the inbox")
    print(f"  dead man's switch: {stackrun.dead_mans_switch(opts)}")
    print(f"  logs: {d}/*.log; stop with: rlpulse stack down --dir {d}")
    static = ", ".join(stackrun.stack_config(opts).scrape.static_targets) or "no static target"
    print(
        f"Trainers: every rlpulse run on this machine registers itself in {args.targets_dir} "
        f"(any port, default {DEFAULT_PORT}); Prometheus also scrapes {static} and the "
        f"file_sd targets in {d}/prometheus/targets/*.json"
    )
    prometheus = next(s for s in svcs if s.name == "prometheus").url
    print(
        "Dashboards: in Grafana 11, Dashboards > New > Import each of "
        f"{d / 'grafana' / 'dashboards'}/*.json and pick a Prometheus datasource at {prometheus}"
    )
    data = (args.data_dir or default_data_dir()).expanduser().resolve()
    print(
        f"Rollouts: the viewer reads the stores in {data / 'rollouts'}, where trainers with the "
        "same RLPULSE_DATA_DIR (or the default) record them"
    )
    return 0


def run_down(args: argparse.Namespace) -> int:
    """Stop the stack; saying so when nothing ran."""
    stopped = stackrun.down(args.dir)
    print(
        f"rlpulse stack: stopped {', '.join(stopped)}" if stopped else "rlpulse stack: not running"
    )
    return 0


def run_status(args: argparse.Namespace) -> int:
    """Print each service's state and the notifications received; 1 when nothing runs."""
    state = stackrun.status(args.dir)
    for name, info in state.items():
        where = f"pid {info['pid']}, {info['url']}" if info["pid"] else "stopped"
        print(f"{name:<13} {'ready' if info['ready'] else 'not ready':<10} {where}")
    notes = stackrun.notifications(args.dir)
    print(f"{len(notes)} notifications received ({args.dir / stackrun.INBOX_FILE})")
    for note in notes:
        print(f"  {stackrun.describe(note)}")
    return 0 if any(info["pid"] for info in state.values()) else 1
