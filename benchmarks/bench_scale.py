"""Many simulated ranks through Prometheus' own scale-out path, measured (``harness.scale``).

    python benchmarks/bench_scale.py [--ranks 256] [--per-process 16] [--gpus 8] \
        [--interval 5s] [--step-seconds 10] [--duration 120] [--reps 3] [--json out.json]

docs/scaling.md holds the measurements at 64, 128 and 256 ranks.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from harness.scale import main

if __name__ == "__main__":
    sys.exit(main())
