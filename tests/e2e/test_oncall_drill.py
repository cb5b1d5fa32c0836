"""A fast subset of the on-call drill (``harness/drill.py``): kl-blowup --onset 60
--save-every 25 against a real fast stack; its first PagerDuty page names the step the failure
began (61), the last good step (60), checkpoint-50, and a dashboard link pinned around its
start. The full drill: ``python -m benchmarks.oncall_drill``."""

from __future__ import annotations

from pathlib import Path

from harness import drill


def test_the_kl_page_names_onset_last_good_step_and_checkpoint(tmp_path: Path) -> None:
    checks = drill.drill(tmp_path, only=["kl"], watchdog=False)
    assert checks and all(c.right for c in checks), drill.table(checks)
