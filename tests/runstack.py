"""A real Prometheus watching one trainer port, for the tests of how runs end: 1 s scrapes of
``127.0.0.1:PORT`` under the job the rules select, the generated rules with the fast preset."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlpulse.stack import config, rules
from tests.stackutil import api, prometheus, results, wait_for

SETTLE_S = 5  # past RLTargetDown's `for` with the fast preset, a few evaluations


@contextlib.contextmanager
def watching(workdir: Path, port: int) -> Iterator[str]:
    """Prometheus scraping ``127.0.0.1:port`` every second with the fast rules; its URL."""
    rule_files = []
    for rel, text in rules.render(config.fast()).items():
        path = workdir / Path(rel).name
        path.write_text(text)
        rule_files.append(str(path))
    prom_config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": rule_files,
        "scrape_configs": [
            {"job_name": "rlpulse", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
        ],
    }
    with prometheus(workdir, prom_config) as prom:
        yield prom


def alerts_once_settled(prom: str) -> list[dict[str, Any]]:
    """The alerts (pending or firing) once the ended run's target is down and every rule group
    has evaluated ``SETTLE_S`` seconds past that."""
    down = wait_for(lambda: results(prom, 'up{job="rlpulse"} == 0'), 60, "the target down")
    after = float(down[0]["value"][0]) + SETTLE_S

    def evaluated_since() -> bool | None:
        groups = api(f"{prom}/api/v1/rules")["data"]["groups"]
        return all(epoch(g["lastEvaluation"]) > after for g in groups) or None

    wait_for(evaluated_since, 60, "every rule group evaluated after the run ended")
    return list(api(f"{prom}/api/v1/alerts")["data"]["alerts"])


def last(prom: str, expr: str) -> list[dict[str, Any]]:
    """``expr``'s newest sample per series over the last 10 minutes (an ended run's series are
    stale)."""
    return results(prom, f"last_over_time({expr}[10m])")


def epoch(rfc3339: str) -> float:
    """Seconds since the epoch of an RFC 3339 time as the Prometheus API writes it."""
    head, _, frac = rfc3339.rstrip("Z").partition(".")
    stamp = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.UTC)
    digits = "".join(c for c in frac if c.isdigit())[:6]
    return stamp.timestamp() + (float(f"0.{digits}") if digits else 0.0)
