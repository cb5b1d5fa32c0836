"""Faults of the monitoring stack itself, on the generated stack (``rlpulse.offline.stackrun``, fast
preset) scraping a real exporter: Alertmanager down while an alert fires (the page is delivered
once it is back), and Prometheus restarted mid-run (scraping resumes, counters stay monotonic,
the firing alert does not page twice). Expected behaviour and figures: docs/reliability.md."""

from __future__ import annotations

import itertools
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from harness.stackutil import api, results, wait_for
from rlpulse import catalog
from rlpulse.runtime.exporter import Exporter
from rlpulse.stack import config
from tests.stack.test_faults_support import LocalStack, local_stack

ALERT = "RLNonFiniteLoss"
STEPS = catalog.get("rl_env_steps_total").name
# run metadata the page carries (looked up in rl_run_info by the rule's run_info annotation)
METADATA = {"model": "tiny-policy", "git_sha": "abc1234", "framework": "trl", "owner": "alice"}


@contextmanager
def training(run_id: str) -> Iterator[Exporter]:
    """A started exporter counting env steps every 10 ms until the block ends."""
    exp = Exporter(
        port=0, addr="127.0.0.1", run_id=run_id, gpu=False, host=False, metadata=METADATA
    ).start()
    stop = threading.Event()

    def loop() -> None:
        step = 0
        while not stop.wait(0.01):
            exp.log({"rl_entropy": 1.0}, step=step)
            exp.count(STEPS, 1)
            step += 1

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield exp
    finally:
        stop.set()
        thread.join(5)
        exp.close()


@contextmanager
def scraped_training(tmp_path: Path, run_id: str) -> Iterator[tuple[Exporter, LocalStack]]:
    """A ``training`` under the local stack, entered once Prometheus has scraped it."""
    with (
        training(run_id) as exp,
        local_stack(tmp_path, [f"127.0.0.1:{exp.port}"]) as stack,
    ):
        prom = stack.url("prometheus")
        wait_for(lambda: results(prom, f'rl_step{{run_id="{run_id}"}}'), 30, "the first scrape")
        yield exp, stack


def _firing(stack: LocalStack, run_id: str) -> bool:
    alerts = api(stack.url("prometheus") + "/api/v1/alerts")["data"]["alerts"]
    return any(
        a["labels"]["alertname"] == ALERT
        and a["labels"]["run_id"] == run_id
        and a["state"] == "firing"
        for a in alerts
    )


def _notification_errors(stack: LocalStack) -> float:
    """Prometheus' own count of failed alert batches (from its /metrics: it does not scrape
    itself in the generated config)."""
    with urllib.request.urlopen(stack.url("prometheus") + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "prometheus_notifications_errors_total"
    )


def test_alertmanager_down_while_an_alert_fires(tmp_path: Path) -> None:
    run = "am-down"
    with scraped_training(tmp_path, run) as (exp, stack):
        stack.stop("alertmanager")
        exp.log({"rl_loss": float("nan")})  # diverged while nobody can be paged
        wait_for(lambda: _firing(stack, run), 30, f"{ALERT} firing in Prometheus")
        wait_for(lambda: _notification_errors(stack) > 0, 30, "Prometheus failing to notify")
        time.sleep(2)
        assert not stack.pages(ALERT), "paged while Alertmanager was down"
        back = time.time()
        stack.restart("alertmanager")
        (page,) = wait_for(lambda: stack.pages(ALERT), 60, "the page after Alertmanager returned")
        delay = page["received"] - back
        details = page["payload"]["custom_details"]
        assert details["run_id"] == run and details["team"] == "research"
        assert details["run"] == " ".join(f"{k}={v}" for k, v in METADATA.items())
        assert page["payload"]["severity"] == "critical"
        errors = _notification_errors(stack)
    print(
        f"\nAlertmanager down: alert fired while it was down ({errors:.0f} failed notification "
        f"batches), paged {delay:.1f}s after it came back (resend delay "
        f"{config.FAST_RESEND_S:g}s; 1m in production, where the page follows Alertmanager's "
        "return within that minute plus group_wait)"
    )


def _samples(prom: str, expr: str, seconds: float) -> list[tuple[float, float]]:
    """The raw (timestamp, value) samples of the one series ``expr`` over the last seconds."""
    found = results(prom, f"{expr}[{int(seconds) + 1}s]")
    assert len(found) == 1, found
    return [(float(t), float(v)) for t, v in found[0]["values"]]


def test_prometheus_restarted_mid_run(tmp_path: Path) -> None:
    run = "prom-restart"
    start = time.time()
    with scraped_training(tmp_path, run) as (exp, stack):
        prom = stack.url("prometheus")
        exp.log({"rl_loss": float("nan")})
        wait_for(lambda: stack.pages(ALERT), 60, "the page before the restart")
        stack.stop("prometheus")
        down = time.time()
        time.sleep(3)  # the exporter keeps counting while nobody scrapes
        stack.restart("prometheus")
        back = time.time()
        wait_for(
            lambda: [t for t, _ in _samples(prom, STEPS, time.time() - start) if t > back],
            30,
            "a scrape after the restart",
        )
        wait_for(lambda: _firing(stack, run), 30, f"{ALERT} firing again after the restart")
        time.sleep(7)  # past the fast group_interval (5s): a duplicate page would be out now
        samples = _samples(prom, STEPS, time.time() - start)
        resets = results(prom, f"resets({STEPS}[{int(time.time() - start) + 60}s])")
        pages = stack.pages(ALERT)
    values = [v for _, v in samples]
    assert values == sorted(values) and values[-1] > values[0]  # monotonic across the restart
    assert [float(r["value"][1]) for r in resets] == [0.0]
    gap, resumed = max((b - a, b) for (a, _), (b, _) in itertools.pairwise(samples))
    assert gap > back - down - 1, "no gap in the samples: was Prometheus really down?"
    assert len(pages) == 1, [p["received"] for p in pages]  # not paged again for the same alert
    print(
        f"\nPrometheus restarted: down {back - down:.1f}s (until ready again), first sample "
        f"{resumed - back:.1f}s after ready, gap in the samples {gap:.1f}s, counter monotonic "
        f"({values[0]:.0f} -> {values[-1]:.0f}, 0 resets), 1 page"
    )
