"""The classic tutorial as an acceptance test: the FrozenLake Q-learning block of
docs/quickstart.md, run as written (a script that logs ``{"episode": e, "reward": r}`` and
exits) while a real Prometheus scrapes it once a second and evaluates the generated rules: the
short run's data reaches Prometheus, the run is finished, and nothing pages."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rlpulse import keys
from rlpulse.stack import config, rules
from tests.doc_blocks import REPO, marked
from tests.stackutil import api, free_port, prometheus, results, wait_for

RUN = 'run_id="frozenlake-q"'
EPISODES = 500


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Prometheus (1 s scrapes of the tutorial's port, the generated rules with the fast
    preset) and the tutorial run once against it; yields (Prometheus URL, the finished run)."""
    tmp = tmp_path_factory.mktemp("tutorial")
    script = tmp / "frozenlake.py"
    script.write_text(marked(REPO / "docs" / "quickstart.md", "stack").code)
    port = free_port()
    rule_files = []
    for rel, text in rules.render(config.fast()).items():
        path = tmp / Path(rel).name
        path.write_text(text)
        rule_files.append(str(path))
    prom_config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": rule_files,
        "scrape_configs": [
            {"job_name": "rlpulse", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
        ],
    }
    env = {**os.environ, "RLPULSE_PORT": str(port), "RLPULSE_EXPECT_SCRAPE": "1"}
    with prometheus(tmp, prom_config) as prom:
        run = subprocess.run(
            [sys.executable, str(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
            cwd=tmp,
        )
        yield prom, run


def _last(prom: str, expr: str) -> list[dict[str, Any]]:
    """``expr``'s samples over the last 10 minutes, newest value per series (the run's series
    are stale once it has ended)."""
    return results(prom, f"last_over_time({expr}[10m])")


def test_the_short_run_reaches_prometheus_and_ends_finished(tutorial: Any) -> None:
    prom, run = tutorial
    assert run.returncode == 0, run.stderr
    assert "waiting up to" in run.stderr  # the wait for a last scrape is visible
    [step] = _last(prom, f"rl_step{{{RUN}}}")
    assert step["value"][1] == str(EPISODES - 1)  # the last step made it
    [outcome] = _last(prom, f'rl_run_outcome{{{RUN}, outcome="finished"}}')
    assert outcome["value"][1] == "1"
    [info] = _last(prom, f"rl_run_info{{{RUN}}}")
    assert info["metric"]["env"] == "FrozenLake-v1" and info["metric"]["algo"] == "q-learning"
    reward = keys.resolve("reward", None)
    assert reward is not None
    assert _last(prom, f"{reward.metric}{{{RUN}}}"), "the reward is queryable"


def test_nothing_pages(tutorial: Any) -> None:
    prom, _ = tutorial
    down = wait_for(
        lambda: results(prom, 'up{job="rlpulse"} == 0'), 60, "the ended run's target down"
    )
    after = float(down[0]["value"][0]) + 5  # RLTargetDown's `for` (fast preset) and more

    def evaluated_since() -> bool | None:
        groups = api(f"{prom}/api/v1/rules")["data"]["groups"]
        return all(_epoch(g["lastEvaluation"]) > after for g in groups) or None

    wait_for(evaluated_since, 60, "every rule group evaluated after the run ended")
    alerts = api(f"{prom}/api/v1/alerts")["data"]["alerts"]
    critical = [a["labels"] for a in alerts if a["labels"].get("severity") == "critical"]
    assert critical == [], critical


@pytest.mark.xfail(
    strict=True,
    reason="classic-RL key aliases (episode/reward onto episodes and episode return, a success "
    "rate from them) are being added to keys.py in another change",
)
def test_classic_keys_land_on_episode_metrics(tutorial: Any) -> None:
    prom, _ = tutorial
    assert _last(prom, f"rl_episode_return{{{RUN}}}"), "reward as the episode return"
    assert _last(prom, f"rl_success_ratio{{{RUN}}}"), "a success rate"
    assert not _last(prom, f"rl_samples_total{{{RUN}}} > 0"), "episodes are not samples"


def _epoch(rfc3339: str) -> float:
    """Seconds since the epoch of an RFC 3339 time as the Prometheus API writes it."""
    head, _, frac = rfc3339.rstrip("Z").partition(".")
    stamp = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.UTC)
    digits = "".join(c for c in frac if c.isdigit())[:6]
    return stamp.timestamp() + (float(f"0.{digits}") if digits else 0.0)


def test_epoch_parses_the_api_time() -> None:
    assert _epoch("1970-01-01T00:00:01.5Z") == 1.5 and time.time() > _epoch("2026-01-01T00:00:00Z")
