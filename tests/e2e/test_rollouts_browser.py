"""A real browser (Debian's chromium, driven through Debian's chromedriver) opens the viewer from
a Grafana panel's data link and from a PagerDuty page's rollout link, and sees what a person
would: that run's rollouts of that step range in the order that shows the failure, their reward
components, and hostile completion text as inert, escaped text."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rlpulse.rollouts import Recorder, SamplingConfig
from rlpulse.rollouts.server import serve
from rlpulse.stack import panels, rules, ruletests
from rlpulse.stack.config import Config
from rlpulse.stack.dashboards import training

CHROMEDRIVER = "/usr/bin/chromedriver"
HOSTILE = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"
webdriver = pytest.importorskip("selenium.webdriver")

pytestmark = pytest.mark.skipif(
    not (Path(CHROMEDRIVER).exists() and shutil.which("chromium")),
    reason="Debian's chromium and chromium-driver (scripts/setup installs them)",
)


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A hacked run: from step 30 on, the format component pays for answers that are wrong."""
    d = tmp_path_factory.mktemp("browser")
    rec = Recorder("hack run", data_dir=d, sampling=SamplingConfig(per_step=100, seed=0))
    for step in range(10, 60, 10):
        correct = np.array([1.0, 0.0, 0.0, 1.0])
        fmt = np.array([0.5, 0.5, 3.0 if step >= 30 else 0.5, 0.5])
        rec.record(
            step=step,
            rollout_ids=[f"{step}-{i}" for i in range(4)],
            group_ids=[f"{step}-g0"] * 4,
            prompts=["What is 2+2?"] * 4,
            responses=["4", "5", HOSTILE if step == 40 else "FORMAT FORMAT", "four"],
            rewards=correct + fmt,
            components={"correct": correct, "format": fmt},
        )
    rec.close()
    srv = serve(d)
    yield f"http://127.0.0.1:{srv.port}"
    srv.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = shutil.which("chromium") or "chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def seen(driver: object) -> list[dict[str, str]]:
    """What a person reads on the page: per rollout, its step, reward, components, response."""
    from selenium.webdriver.common.by import By

    out = []
    for card in driver.find_elements(By.CSS_SELECTOR, "article.rollout"):  # type: ignore[attr-defined]
        comps = card.find_element(By.CSS_SELECTOR, "table.components")
        out.append(
            {
                "step": card.find_element(By.CSS_SELECTOR, ".meta .step b").text,
                "reward": card.find_element(By.CSS_SELECTOR, ".meta .reward b").text,
                "components": comps.text,
                "response": card.find_element(By.CSS_SELECTOR, "pre.response").text,
            }
        )
    return out


def test_from_the_reward_panels_data_link(viewer: str, browser: object) -> None:
    model = training.build("rlpulse-training", Config())
    every = [*model["panels"], *(q for p in model["panels"] for q in p.get("panels", []))]
    reward = next(p for p in every if p.get("title") == panels.REWARD and p["type"] != "row")
    link = reward["fieldConfig"]["defaults"]["links"][1]["url"]  # best, in the steps shown
    url = (
        link.replace("${rollouts}", viewer)
        .replace("${run_id:percentencode}", "hack%20run")
        .replace("${step_min}", "20")
        .replace("${step_max}", "40")
    )
    browser.get(url)  # type: ignore[attr-defined]
    rows = seen(browser)
    assert {r["step"] for r in rows} == {"20", "30", "40"}
    rewards = [float(r["reward"]) for r in rows]
    assert rewards == sorted(rewards, reverse=True) and rewards[0] == 3.0  # the hack first
    assert rows[0]["step"] in ("30", "40") and "format" in rows[0]["components"]
    assert "3" in rows[0]["components"].split("format")[-1]
    assert browser.title != "pwned"  # type: ignore[attr-defined]
    assert HOSTILE in [r["response"] for r in rows]  # shown as text, never run


def test_from_a_pagerduty_payloads_rollout_link(viewer: str, browser: object) -> None:
    cfg = Config()
    template = rules.links("RLRewardHacking", "task", cfg)["rollouts_url"]
    resume = (29.0, "checkpoint-25", 25.0)  # the last good step the page names
    filled = ruletests.fill(template, {"run_id": "hack run"}, 0.0, "RLRewardHacking", resume)
    payload = {"payload": {"custom_details": {"rollouts": filled}}}  # as Alertmanager sends it
    url = json.loads(json.dumps(payload))["payload"]["custom_details"]["rollouts"]
    assert url.startswith(cfg.links.rollouts_url)
    browser.get(url.replace(cfg.links.rollouts_url, viewer))  # type: ignore[attr-defined]
    rows = seen(browser)
    assert rows and all(int(r["step"]) >= 29 for r in rows)
    assert [float(r["reward"]) for r in rows][:2] == [3.0, 3.0]  # highest reward first
    page = browser.page_source  # type: ignore[attr-defined]
    assert "highest reward" in page and "<script>document" not in page
    assert browser.title != "pwned"  # type: ignore[attr-defined]
