"""Load: concurrent scrapers while several threads log and observe — exact totals, no deadlock,
bounded memory over a million steps. Figures are printed for docs/reliability.md."""

from __future__ import annotations

import threading
import time

import psutil

from rlpulse.runtime.exporter import Exporter
from tests.conftest import scrape, value

THREADS = 4
STEPS = 5_000
SCRAPERS = 3
PACE = 0.0005  # seconds a writer spends on one step besides recording (drops past that: test_calls)


def test_concurrent_scrapes_and_writers_lose_nothing() -> None:
    exp = Exporter(port=0, run_id="load", gpu=False, host=False).start()
    stop = threading.Event()
    served: list[int] = [0] * SCRAPERS
    worst = [0.0] * SCRAPERS
    errors: list[BaseException] = []

    def scraper(i: int) -> None:
        try:
            while not stop.is_set():
                t0 = time.perf_counter()
                scrape(exp.url)
                worst[i] = max(worst[i], time.perf_counter() - t0)
                served[i] += 1
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    def writer(t: int) -> None:
        try:
            for step in range(STEPS):
                exp.log({"rl_entropy": 1.0 / (step + 1), f"custom/thread_{t}": step}, step=step)
                exp.count("rl_env_steps_total", 8)
                exp.count("rl_tool_calls_total", 1, tool=f"tool-{t}")
                if step % 50 == 0:
                    exp.observe_rollouts(latency_seconds=[0.1] * 16, response_tokens=[64] * 16)
                    with exp.phase("update"):
                        pass
                time.sleep(PACE)  # a trainer's step; a tight loop would outrun the apply thread
        except BaseException as exc:
            errors.append(exc)

    scrapers = [threading.Thread(target=scraper, args=(i,)) for i in range(SCRAPERS)]
    writers = [threading.Thread(target=writer, args=(t,)) for t in range(THREADS)]
    t0 = time.perf_counter()
    for th in scrapers + writers:
        th.start()
    for th in writers:
        th.join(timeout=120)
        assert not th.is_alive(), "writer deadlocked"
    stop.set()
    for th in scrapers:
        th.join(timeout=30)
        assert not th.is_alive(), "scraper deadlocked"
    elapsed = time.perf_counter() - t0
    try:
        assert not errors, errors
        text = scrape(exp.url)
        assert value(text, "rl_env_steps_total") == THREADS * STEPS * 8
        for t in range(THREADS):
            assert value(text, "rl_tool_calls_total", tool=f"tool-{t}") == STEPS
            assert value(text, "rl_unmapped_metric", key=f"custom/thread_{t}") == STEPS - 1
        batches = THREADS * (STEPS // 50)
        assert value(text, "rl_rollout_duration_seconds_count") == batches * 16
        assert value(text, "rl_completion_tokens_total") == batches * 16 * 64
        assert value(text, "rl_samples_total") == batches * 16
        assert value(text, "rl_phase_duration_seconds_count", phase="update") == batches
        assert "rlpulse_dropped_values_total" not in text
        print(
            f"\nload: {THREADS} writers x {STEPS} steps, {SCRAPERS} scrapers, {elapsed:.1f}s: "
            f"{THREADS * STEPS} steps logged, {sum(served)} scrapes served, max scrape latency "
            f"{max(worst) * 1000:.1f} ms; totals exact: rl_env_steps_total "
            f"{value(text, 'rl_env_steps_total'):.0f}, rl_samples_total "
            f"{value(text, 'rl_samples_total'):.0f}, rl_completion_tokens_total "
            f"{value(text, 'rl_completion_tokens_total'):.0f}, 0 drops"
        )
    finally:
        exp.close()


def test_memory_stays_bounded_over_a_million_steps() -> None:
    exp = Exporter(port=0, run_id="soak", gpu=False, host=False).start()
    proc = psutil.Process()
    metrics = {f"rl_{n}": 0.0 for n in ("entropy", "loss", "policy_loss", "value_loss")}
    metrics |= {f"custom/{i}": 0.0 for i in range(28)}
    try:
        rss = []
        for step in range(1_000_000):
            metrics["rl_entropy"] = 1.0 / (step + 1)
            exp.log(metrics, step=step)
            if step % 100_000 == 0:
                scrape(exp.url)
                rss.append(proc.memory_info().rss)
        growth = (rss[-1] - rss[1]) / (1 << 20)
        print(
            f"\nsoak: 1,000,000 log() calls of 32 keys, RSS {rss[1] / (1 << 20):.0f} MiB after "
            f"warm-up, growth {growth:.1f} MiB over the next 800,000 calls"
        )
        assert growth < 50, rss
        # a loop this tight outruns the apply thread: every call is applied or counted dropped
        text = scrape(exp.url)
        dropped = exp.dropped.get("queue_full", 0)
        assert value(text, "rl_logged_steps_total") + dropped == 1_000_000
        assert set(exp.dropped) <= {"queue_full"}
    finally:
        exp.close()
