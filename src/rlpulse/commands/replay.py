"""``rlpulse replay``: evaluate the generated alert rules over finished runs' logs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rlpulse.offline.logs import FORMATS


def register(sub: Any) -> None:
    """Add the ``replay`` subcommand."""
    from rlpulse.offline.replay import DEFAULT_STEP_SECONDS, MAX_EVALUATIONS

    p = sub.add_parser(
        "replay",
        help="would rlpulse have paged on this run? replay logs through the alert rules",
        description="Map a finished run's logged keys as live log() does, turn them into the "
        "series Prometheus would have scraped, evaluate the generated alert rules over the "
        "whole run with promtool, and report which alerts fire from which step.",
    )
    p.add_argument("logs", nargs="+", type=Path, metavar="LOG", help="log file or run directory")
    p.add_argument("--format", choices=("auto", *FORMATS), default="auto")
    p.add_argument(
        "--step-seconds",
        type=float,
        default=DEFAULT_STEP_SECONDS,
        help="run time per step when the log has no timestamps (default %(default)g)",
    )
    p.add_argument(
        "--clock",
        choices=("log", "rows"),
        default="log",
        help="log: the run's own times (its timestamps, else --step-seconds per step); rows: "
        "every logged step one scrape after the one before (how many steps the rules need, "
        "apart from how fast the run logged them)",
    )
    p.add_argument("--config", type=Path, help="rlpulse.yaml with threshold overrides")
    p.add_argument(
        "--run",
        action="append",
        dest="runs",
        metavar="NAME",
        help="replay only this run of a log that holds several (e.g. 'DQN #2'); repeatable",
    )
    p.add_argument(
        "--max-evaluations",
        type=int,
        default=MAX_EVALUATIONS,
        help="rule evaluations a run may take; a longer run is replayed on a compressed clock "
        "(default %(default)d; 0: no limit)",
    )
    p.add_argument("--framework", help="key map searched first (default: from the format)")
    p.add_argument(
        "--key-map",
        type=Path,
        help="YAML/JSON file: logged key -> objective | catalog metric | "
        "{metric, labels, scale} | null, searched before the framework tables",
    )
    p.add_argument(
        "--reference-band",
        type=Path,
        help="compare each run with earlier healthy runs: a band file rlpulse band build wrote",
    )
    p.add_argument(
        "--report", type=Path, help="write a report: FILE.md (PNG charts beside it) or FILE.html"
    )
    p.add_argument("--json", action="store_true", help="print JSON: per log, the alerts that fired")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Replay every log; print the alerts; optionally write the report."""
    from rlpulse.keys import framework_name
    from rlpulse.offline.replay import replay_runs, report
    from rlpulse.stack import config

    cfg = config.load(args.config) if args.config else config.Config()
    framework = framework_name(args.framework)
    if args.report is not None:
        if args.report.suffix.lower() not in (".md", ".html", ".htm"):
            raise ValueError(f"--report {args.report}: use a .md or .html file name")
        if not args.report.parent.is_dir():
            raise FileNotFoundError(f"--report {args.report}: no directory {args.report.parent}")
    results = [
        result
        for log in args.logs
        for result in replay_runs(
            log,
            fmt=args.format,
            cfg=cfg,
            step_seconds=args.step_seconds,
            framework=framework,
            key_map=args.key_map,
            max_evaluations=args.max_evaluations,
            runs=args.runs,
            reference_band=args.reference_band,
            rows=args.clock == "rows",
        )
    ]
    print(report.as_json(results) if args.json else report.text(results))
    if args.report is not None:
        report.write(results, args.report)
    return 0
