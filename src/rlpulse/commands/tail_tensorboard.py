"""``rlpulse tail-tensorboard LOGDIR``: follow a run's TensorBoard event files as they grow and
serve their scalars on /metrics, mapped through the key map of ``--framework``.

The tailer's run ends like a trainer's: ``finish()`` when it stops (``--duration``, ``--once``,
Ctrl-C), so Prometheus does not page for the target going away; ``crashed`` if it fails.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rlpulse import keys
from rlpulse.integrations.tensorboard import POLL_INTERVAL, TensorBoardTailer
from rlpulse.runtime.exporter import Exporter
from rlpulse.runtime.options import DEFAULT_PORT


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
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"metrics port (default $RLPULSE_PORT or {DEFAULT_PORT}; 0 picks a free port)",
    )
    p.add_argument("--addr", default=None, help="listen address (default 0.0.0.0)")
    p.add_argument("--run-id", default=None, help="run_id label (default: the logdir's name)")
    p.add_argument("--interval", type=float, default=POLL_INTERVAL, help="seconds between polls")
    p.add_argument(
        "--duration", type=float, default=None, help="stop after this many seconds (default: never)"
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="backfill: export everything LOGDIR holds (a finished run), end the run and exit",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="wait for LOGDIR to appear (a run not started yet) instead of failing",
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
    if not (args.wait or args.logdir.is_dir()):
        raise FileNotFoundError(f"{args.logdir}: no such log directory (--wait waits for it)")
    exporter = Exporter(
        args.port,
        addr=args.addr,
        run_id=args.run_id or args.logdir.resolve().name,
        metadata={"framework": framework},
        gpu=False,
        host=False,
    )
    exporter.start()
    print(f"rlpulse tail-tensorboard: following {args.logdir}, serving {exporter.url}", flush=True)
    records = 0
    try:
        records = _follow(args, exporter)
    except KeyboardInterrupt:
        pass
    except BaseException as exc:
        exporter.end("crashed", type(exc).__name__)
        raise
    exporter.finish()
    print(f"rlpulse tail-tensorboard: exported {records} records", flush=True)
    return 0


def _follow(args: argparse.Namespace, exporter: Exporter) -> int:
    """Wait for the log directory if asked, then export it (once, or until stopped); the
    number of records exported."""
    deadline = None if args.duration is None else time.monotonic() + args.duration
    if not _wait_for_dir(args.logdir, args.interval, deadline):
        return 0
    tailer = TensorBoardTailer(args.logdir, exporter)
    if args.once:
        tailer.poll()
    else:
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        tailer.run(args.interval, duration=left)
    return tailer.records


def _wait_for_dir(logdir: Path, interval: float, deadline: float | None) -> bool:
    """Poll until ``logdir`` exists (or the deadline passes); whether it does."""
    if not logdir.is_dir():
        print(f"rlpulse tail-tensorboard: waiting for {logdir} to appear", flush=True)
    while not logdir.is_dir():
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True
