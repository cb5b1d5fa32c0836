"""What the integrations share: lazy library imports and turning logged values into numbers."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import torch

import rlpulse
from rlpulse.integrations.common import exporter_for, numbers, scalar


def test_importing_rlpulse_imports_no_trainer_library() -> None:
    code = (
        "import sys, rlpulse, rlpulse.integrations, rlpulse.cli\n"
        "rlpulse.cli.build_parser()\n"
        "heavy = {'torch', 'stable_baselines3', 'gymnasium', 'transformers', 'trl', 'verl'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_scalars_from_numpy_and_torch_and_what_is_left_out() -> None:
    assert scalar(np.float32(0.5)) == 0.5 and type(scalar(np.float32(0.5))) is float
    assert scalar(np.int64(7)) == 7
    assert scalar(torch.tensor(1.5)) == 1.5
    assert math.isnan(scalar(float("nan")) or 0.0)  # recorded and counted by the exporter
    for dropped in (None, True, np.bool_(False), "1.0", b"x", [1.0], np.zeros(3), torch.ones(2)):
        assert scalar(dropped) is None, dropped
    logged = {"a": 1, "b": np.float64(2.0), "video": object(), "skip": 3.0, "s": "text"}
    assert numbers(logged, frozenset({"skip"})) == {"a": 1, "b": 2.0}


def test_exporter_for_prefers_given_then_running_then_starts_one() -> None:
    rlpulse.close()
    assert exporter_for(None, "sb3", start=False) is None
    started = exporter_for(None, "sb3", "2.9", port=0, gpu=False, host=False)
    try:
        assert started is rlpulse.get_exporter() and started is not None
        assert exporter_for(None, "trl") is started  # a running exporter is reused
    finally:
        rlpulse.close()
