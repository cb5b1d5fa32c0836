"""Trace-level rollout sampling: keep raw rollouts, with every reward component, next to the
metrics, in a bounded per-run SQLite store (see docs/rollouts.md).

``Recorder(run_id).record(...)`` samples a batch on the training thread with numpy and queues
the kept rows for a writer thread; ``rlpulse rollouts list|show`` and ``server.serve`` read them.
"""

from rlpulse.rollouts.paths import default_data_dir, list_runs, run_file
from rlpulse.rollouts.recorder import Recorder, record_rollouts
from rlpulse.rollouts.sampler import SamplingConfig

__all__ = [
    "Recorder",
    "SamplingConfig",
    "default_data_dir",
    "list_runs",
    "record_rollouts",
    "run_file",
]
