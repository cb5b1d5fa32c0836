"""``rlpulse tail-tensorboard LOGDIR``: follow a run's TensorBoard event files as they grow and
serve their scalars on /metrics, mapped through the key map of ``--framework``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rlpulse import keys
from rlpulse.exporter import DEFAULT_PORT, Exporter
from rlpulse.integrations.tensorboard import POLL_INTERVAL, TensorBoardTailer


def register(sub: Any) -> None:
    """Add the ``tail-tensorboard`` subcommand."""
    p = sub.add_parser(
        "tail-tensorboard",
        help="export the scalars of a run's TensorBoard event files as they are written",
    )
    p.add_argument("logdir", type=Path, help="the run's log directory (its event files)")
    p.add_argument(
        "--framework",
        help="key map for the tags: trl, verl, openrlhf, sb3, cleanrl … (default: try all)",
    )
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    p.add_argument("--addr", default=None, help="listen address (default 0.0.0.0)")
    p.add_argument("--run-id", default=None, help="run_id label (default: the logdir's name)")
    p.add_argument("--interval", type=float, default=POLL_INTERVAL, help="seconds between polls")
    p.add_argument(
        "--duration", type=float, default=None, help="stop after this many seconds (default: never)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve /metrics and follow the event files until interrupted (or ``--duration``)."""
    if args.interval <= 0:
        raise ValueError(f"--interval {args.interval}: must be > 0 seconds")
    try:
        framework = keys.framework_name(args.framework) or ""
    except ValueError as exc:
        raise ValueError(f"--framework: {exc}") from None
    if not args.logdir.is_dir():
        raise FileNotFoundError(f"{args.logdir}: no such log directory")
    exporter = Exporter(
        args.port,
        addr=args.addr,
        run_id=args.run_id or args.logdir.resolve().name,
        metadata={"framework": framework},
        gpu=False,
        host=False,
    )
    tailer = TensorBoardTailer(args.logdir, exporter)
    exporter.start()
    print(f"rlpulse tail-tensorboard: following {args.logdir}, serving {exporter.url}", flush=True)
    try:
        tailer.run(args.interval, duration=args.duration)
    except KeyboardInterrupt:
        pass
    finally:
        exporter.close()
    print(f"rlpulse tail-tensorboard: exported {tailer.records} records", flush=True)
    return 0
