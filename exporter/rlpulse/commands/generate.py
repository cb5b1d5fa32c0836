"""``rlpulse generate``: write (or ``--check``) the Prometheus, Alertmanager and Grafana files
(and, with ``--kubernetes``, the prometheus-operator manifests)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rlpulse.stack import config, generate


def register(sub: Any) -> None:
    """Add the ``generate`` subcommand."""
    p = sub.add_parser(
        "generate",
        help="write prometheus/, alertmanager/, grafana/, docker-compose.yml and docs from source",
    )
    p.add_argument("--config", type=Path, help="YAML overriding the default thresholds and windows")
    p.add_argument("--out", type=Path, default=Path("."), help="output root (default: .)")
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 naming the files that differ from what the source generates",
    )
    p.add_argument(
        "--fast",
        action="store_true",
        help="compress intervals, windows and `for` durations so alerts fire within seconds",
    )
    p.add_argument(
        "--kubernetes",
        action="store_true",
        help="also write (or --check) kubernetes/: a PodMonitor, a PrometheusRule and the "
        "dashboards as ConfigMaps for the Grafana sidecar (prometheus-operator); implied where "
        "the output root already has a kubernetes/ folder",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Generate, or check for drift."""
    cfg = config.load(args.config) if args.config else config.Config()
    if args.fast:
        cfg = config.fast(cfg)
    # once kubernetes/ exists, every generate keeps it in step with the rules and dashboards
    kubernetes = args.kubernetes or (args.out / generate.KUBERNETES_DIR).is_dir()
    files = generate.render(cfg, kubernetes=kubernetes)
    if args.check:
        drifted = generate.drift(files, args.out)
        if drifted:
            print(
                "rlpulse generate --check: out of date (run `rlpulse generate`):\n  "
                + "\n  ".join(drifted),
                file=sys.stderr,
            )
            return 1
        print(f"rlpulse generate --check: {len(files)} files up to date under {args.out}")
        return 0
    touched = generate.write(files, args.out)
    print(f"rlpulse generate: {len(files)} files under {args.out}, {len(touched)} changed")
    for rel in touched:
        print(f"  {rel}")
    return 0
