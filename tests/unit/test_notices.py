"""Problems reach a user's stderr without any logging set-up: the first of each kind (each
dropped key), once;
``RLPULSE_QUIET=1`` silences them and a configured logging set-up takes over."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

HINT = "[RLPULSE_QUIET=1 silences rlpulse notices]"
SCRIPT = """
import rlpulse
exp = rlpulse.start(port=0, addr="127.0.0.1", gpu=True, host=False, nvml=False, run_id="n",
                    metadata={"job": "x", "__y": "z"})
for step in range(3):
    rlpulse.log({"loss": "nan-ish", "lr": None, "entropy": [1, 2]}, step=step)
exp.flush()
list(exp.scrape_samples())  # a scrape: the GPU collector finds no NVML and disables itself
"""


def _run(prelude: str = "", **env: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(prelude) + SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, **env},
    )
    return out.stderr


def test_first_of_each_kind_on_stderr_without_logging_set_up() -> None:
    err = _run()
    notices = [line for line in err.splitlines() if line.endswith(HINT)]
    # each dropped key once, at once (three steps of three bad keys: three notices)
    assert sum("dropped" in line and "bad_metadata" not in line for line in notices) == 3, err
    assert sum("bad_metadata" in line for line in notices) == 2, err  # two keys: two notices
    assert sum("collector disabled" in line for line in notices) == 1, err
    assert sum("reached no Prometheus" in line for line in notices) == 1, err  # said once
    assert len(notices) == 7, err
    assert "serving at http://127.0.0.1:" in err  # where the run is served, without any set-up


def test_quiet_silences_them() -> None:
    assert "rlpulse" not in _run(RLPULSE_QUIET="1")


def test_a_configured_logging_set_up_decides_alone() -> None:
    prelude = """
    import logging, sys
    logging.basicConfig(stream=sys.stderr, format="LOGGED %(message)s")
    """
    err = _run(prelude)
    assert HINT not in err
    assert "LOGGED rlpulse: dropped" in err  # one per key, as the exporter logs them
