"""The quickstart's FrozenLake tutorial under the real fast stack, 10 seeds on the plain and on
the slippery map: each run's success rates and every alert Prometheus fired for it.

    python -m benchmarks.tutorial_seeds [--seeds 10]

A false page on the tutorial is the worst bug rlpulse can ship: this runs the block of
docs/quickstart.md as written, but for the run id, the seeds and the map.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from harness.doc_blocks import REPO, marked
from harness.runstack import stack_up
from harness.stackutil import results


def variant(code: str, slippery: bool, seed: int) -> tuple[str, str]:
    """The tutorial with its own run id, seeds and map."""
    run_id = f"fl-{'slip' if slippery else 'plain'}-{seed}"
    for old, new in (
        ('run_id="frozenlake-q"', f'run_id="{run_id}"'),
        ("default_rng(0)", f"default_rng({seed})"),
        ("env.reset(seed=e)", f"env.reset(seed=e + {1000 * seed})"),
        ("is_slippery=False", f"is_slippery={slippery}"),
    ):
        assert old in code, old
        code = code.replace(old, new)
    return run_id, code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    code = marked(REPO / "docs" / "quickstart.md", "stack").code
    tmp = Path(tempfile.mkdtemp(prefix="rlpulse-tutorial-"))
    rates: dict[str, str] = {}
    with stack_up(tmp) as stack:
        started = time.time()
        for slippery in (False, True):
            for seed in range(args.seeds):
                run_id, src = variant(code, slippery, seed)
                script = tmp / f"{run_id}.py"
                script.write_text(src)
                run = stack.run(script, check=True)
                rates[run_id] = " ".join(line.split()[-1] for line in run.stdout.splitlines())
        time.sleep(15)  # the last evaluations and keep_firing_for (fast preset)
        span = int(time.time() - started) + 30
        fired = results(
            stack.prometheus,
            "max by (run_id, alertname, severity) "
            f'(max_over_time(ALERTS{{alertstate="firing", run_id!=""}}[{span}s]))',
        )
    alerts: dict[str, list[str]] = {}
    for a in fired:
        m = a["metric"]
        alerts.setdefault(m["run_id"], []).append(f"{m['alertname']} ({m['severity']})")
    for run_id, rate in rates.items():
        print(f"{run_id:<14} success per 100 episodes {rate}  alerts: {alerts.get(run_id, 'none')}")
    print(f"{len(rates)} runs, {sum(1 for r in rates if r in alerts)} with an alert")
    return 1 if alerts else 0


if __name__ == "__main__":
    sys.exit(main())
