"""Check what ``rlpulse generate`` wrote with the stack's own tools before anyone loads it.

``promtool check config`` reads prometheus.yml and every rule file it names, ``amtool
check-config`` the Alertmanager config and its templates. A tool that is not installed is
reported as not run (the files are still written); a file a tool refuses is an error naming it.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

TIMEOUT_SECONDS = 120
CHECKS = (
    ("promtool", ("check", "config"), "prometheus/prometheus.yml"),
    ("amtool", ("check-config",), "alertmanager/alertmanager.yml"),
)


@dataclass
class Report:
    """What the tools said: files refused (with the tool's words) and tools not run."""

    errors: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def check(out: Path) -> Report:
    """Run each tool on its file under ``out`` (files that were not generated are skipped)."""
    report = Report()
    for tool, args, rel in CHECKS:
        path = out / rel
        if not path.is_file():
            continue
        exe = shutil.which(tool)
        if exe is None:
            report.missing.append(tool)
            continue
        try:
            run = subprocess.run(
                [exe, *args, rel],
                cwd=out,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            report.errors.append(f"{rel}: {tool} did not finish: {exc}")
            continue
        if run.returncode != 0:
            said = (run.stdout + run.stderr).strip().splitlines()[-6:]
            report.errors.append(f"{rel}: refused by {tool}:\n    " + "\n    ".join(said))
    return report
