"""``rlpulse demo``: a small real RL training run (numpy GRPO) that exports all three layers."""

from __future__ import annotations

import argparse
from typing import Any

from rlpulse.demo.run import DemoOptions, run_demo
from rlpulse.demo.scenarios import SCENARIOS


def register(sub: Any) -> None:
    """Add the ``demo`` subcommand."""
    p: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="run the demo trainer (healthy, or an induced failure) and serve its metrics",
        description=__doc__,
        epilog="scenarios: " + "; ".join(f"{s.name}: {s.cause}" for s in SCENARIOS.values()),
    )
    p.add_argument("--scenario", default="healthy", choices=list(SCENARIOS))
    p.add_argument("--steps", type=int, default=2000, help="training steps (default 2000)")
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help="metrics port (default $RLPULSE_PORT or 9400, which the generated Prometheus "
        "scrapes; 0 picks a free port)",
    )
    p.add_argument("--addr", default=None, help="address to serve on (default 0.0.0.0)")
    p.add_argument("--run-id", default=None, help="run_id label (default: random)")
    p.add_argument(
        "--step-delay",
        type=float,
        default=0.0,
        help="seconds to pause after each step, to pace the run for alert windows",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--onset",
        type=int,
        default=0,
        help="train healthy for this many steps, then switch to the scenario's settings",
    )
    p.add_argument(
        "--progress-every", type=int, default=50, help="print a progress line every N steps"
    )
    p.add_argument(
        "--no-rollouts",
        dest="record",
        action="store_false",
        help="do not store sampled rollouts for `rlpulse rollouts`",
    )
    p.add_argument("--data-dir", default=None, help="rollout store directory")
    p.add_argument(
        "--checkpoints",
        default=None,
        help="folder for checkpoint-<step>.npy: every --save-every steps and when an alert asks "
        "(RLPULSE_ON_ALERT with RLPULSE_ALERTMANAGER_URL: docs/quickstart.md)",
    )
    p.add_argument("--save-every", type=int, default=0, help="save a checkpoint every N steps")
    p.add_argument(
        "--log",
        default=None,
        metavar="FILE",
        help="also write each step's logged values to FILE as JSON lines (TRL's keys), which "
        "`rlpulse replay` and `rlpulse band build` read",
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    return run_demo(
        DemoOptions(
            scenario=args.scenario,
            steps=args.steps,
            port=args.port,
            addr=args.addr,
            run_id=args.run_id,
            step_delay=args.step_delay,
            seed=args.seed,
            onset=args.onset,
            progress_every=args.progress_every,
            record=args.record,
            data_dir=args.data_dir,
            checkpoints=args.checkpoints,
            save_every=args.save_every,
            log=args.log,
        )
    )
