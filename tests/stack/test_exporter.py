"""The in-process exporter over real HTTP: exposition, identity, lifecycle and the hot path."""

from __future__ import annotations

import logging
import math
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import rlpulse
from harness.stackutil import free_port, taken_port
from rlpulse import catalog
from rlpulse.integrations.common import exporter_for
from rlpulse.runtime.exporter import Exporter, PortInUseError
from tests.conftest import (
    promtool_check_metrics,
    samples,
    scrape,
    scrape_as_prometheus,
    self_signed,
    value,
)


def test_scrape_passes_promtool_and_covers_three_layers(exporter: Exporter) -> None:
    exporter.log({"rl_entropy": 1.5, "rl_truncation_ratio": 0.1, "rl_kl_reference": 0.02}, step=3)
    exporter.observe_rollouts(
        latency_seconds=[0.2, 0.4],
        response_tokens=[100, 300],
        rewards=[1.0, 0.0],
        components={"format": [1.0, 1.0]},
    )
    with exporter.phase("rollout"):
        pass
    text = scrape(exporter.url)
    check = promtool_check_metrics(text)
    assert check.returncode == 0, check.stdout + check.stderr
    assert value(text, "rl_entropy", run_id="test-run", rank="0") == 1.5
    assert value(text, "rl_step") == 3
    assert value(text, "rl_rollout_duration_seconds_count") == 2
    assert value(text, "rl_reward_component_mean", component="format") == 1.0
    assert value(text, "rl_phase_duration_seconds_count", phase="rollout") == 1
    layers = {catalog.get(n).layer for (n, _) in samples(text) if n in catalog.BY_NAME}
    assert {"system", "rl", "task", "meta"} <= layers


def test_every_series_carries_identity_labels(exporter: Exporter) -> None:
    exporter.log({"rl_entropy": 1.0, "something/custom": 2.0})
    for (_name, labels), _v in samples(scrape(exporter.url)).items():
        assert {"run_id", "rank"} <= {k for k, _ in labels}


def test_run_info_and_hyperparameters() -> None:
    exp = Exporter(
        port=0,
        run_id="meta",
        gpu=False,
        host=False,
        metadata={"model": "qwen2.5-1.5b", "framework": "trl", "grader": "v3", "git_sha": "abc"},
        config={"lr": 1e-6, "ppo": {"clip": 0.2, "epochs": 4}, "use_kl": True, "name": "x"},
    ).start()
    try:
        text = scrape(exp.url)
        assert value(text, "rl_run_info", model="qwen2.5-1.5b", grader_version="v3") == 1
        assert value(text, "rl_run_info", rlpulse_version=rlpulse.__version__, git_sha="abc") == 1
        assert value(text, "rl_hyperparameter", name="ppo.clip") == 0.2
        assert value(text, "rl_hyperparameter", name="use_kl") == 1.0
        assert not [k for k in samples(text) if ("name", "name") in k[1]]
    finally:
        exp.close()


def test_openmetrics_scrape_carries_rollout_exemplars(exporter: Exporter) -> None:
    exporter.observe_rollouts(
        latency_seconds=[0.05, 3.0], response_tokens=[12, 900], rollout_ids=["r-1", "r-2"]
    )
    text = scrape(exporter.url, accept="application/openmetrics-text; version=1.0.0")
    lines = [ln for ln in text.splitlines() if ' # {rollout_id="' in ln]
    assert any(ln.startswith("rl_rollout_duration_seconds_bucket") and "r-2" in ln for ln in lines)
    assert any(ln.startswith("rl_response_length_tokens_bucket") and "r-1" in ln for ln in lines)
    assert text.rstrip().endswith("# EOF")


def test_histogram_batch_matches_per_sample_semantics(exporter: Exporter) -> None:
    bounds = catalog.get("rl_rollout_duration_seconds").buckets
    data = [0.005, 0.0051, 1.0, 2.5, 700.0, *bounds]  # values on a bound fall in that bucket
    exporter.observe("rl_rollout_duration_seconds", data)
    text = scrape(exporter.url)
    for le in bounds:
        expected = sum(1 for x in data if x <= le)
        got = value(text, "rl_rollout_duration_seconds_bucket", le=repr(float(le)))
        assert got == expected, le
    assert value(text, "rl_rollout_duration_seconds_bucket", le="+Inf") == len(data)
    assert math.isclose(value(text, "rl_rollout_duration_seconds_sum"), sum(data))


def test_zero_std_groups_and_ratios(exporter: Exporter) -> None:
    exporter.observe_rollouts(
        rewards=[1, 1, 1, 1, 0, 1, 0, 0],
        group_size=4,
        truncated=[1, 0, 0, 0, 0, 0, 0, 0],
        format_ok=[1, 1, 1, 1, 1, 1, 0, 0],
        prompt_tokens=[10] * 8,
    )
    text = scrape(exporter.url)
    assert value(text, "rl_zero_std_groups_ratio") == 0.5
    assert value(text, "rl_truncation_ratio") == 0.125
    assert value(text, "rl_format_compliance_ratio") == 0.75
    assert value(text, "rl_prompt_tokens_total") == 80
    assert value(text, "rl_samples_total") == 8


def test_episodes_keep_a_rolling_mean(exporter: Exporter) -> None:
    for i in range(150):
        exporter.observe_episodes([float(i)], [10], success=[i % 2])
    text = scrape(exporter.url)
    assert value(text, "rl_episodes_total") == 150
    assert value(text, "rl_episode_return") == pytest.approx(sum(range(50, 150)) / 100)


def test_log_before_start_and_after_close_is_harmless() -> None:
    rlpulse.close()
    rlpulse.log({"rl_entropy": 1.0}, step=1)
    rlpulse.observe_rollouts(rewards=[1.0])
    with rlpulse.phase("update"):
        pass


def test_start_is_idempotent_and_close_frees_the_port() -> None:
    exp = rlpulse.start(port=0, run_id="idem", gpu=False, host=False)
    try:
        assert rlpulse.start(port=0) is exp
        port = exp.port
        assert scrape(exp.url)
    finally:
        rlpulse.close()
    again = Exporter(port=port, run_id="again", gpu=False, host=False).start()
    try:
        assert "again" in scrape(again.url)
    finally:
        again.close()


@pytest.mark.parametrize(
    "start",
    [
        lambda port: Exporter(port=port, addr="127.0.0.1", gpu=False, host=False).start(),
        lambda port: exporter_for(None, "trl", port=port, addr="127.0.0.1", gpu=False, host=False),
    ],
    ids=["trainer", "integration"],
)
def test_a_taken_port_falls_back_to_a_free_one_and_says_so(
    start: Callable[[int], Exporter | None], caplog: pytest.LogCaptureFixture
) -> None:
    """Whether the trainer or an integration (``exporter_for``) starts it, training goes on,
    served elsewhere."""
    caplog.set_level(logging.INFO, "rlpulse")
    with taken_port() as port:
        exp = start(port)
        assert exp is not None
        try:
            assert exp.serving and exp.port not in (port, 0)
            said = f"port {port} is in use; run {exp.run_id} rank 0 serving at {exp.url} instead"
            assert said in caplog.text
            assert "rl_run_info" in scrape(exp.url)
        finally:
            exp.close()
            rlpulse.close()
        strict = Exporter(port=port, addr="127.0.0.1", gpu=False, host=False, strict=True)
        with pytest.raises(PortInUseError, match=rf"port {port} .*RLPULSE_PORT.*port=0"):
            strict.start()  # strict (tests): the taken port is an error


def test_misused_options_are_one_line_errors_in_the_users_terms() -> None:
    with pytest.raises(
        TypeError, match=r"^rlpulse: unknown option 'runid' \(did you mean run_id\?\)$"
    ):
        rlpulse.start(runid="x")
    with pytest.raises(TypeError, match=r"unknown option 'on_alrt' \(did you mean on_alert\?\)"):
        rlpulse.start(on_alrt="stop")  # start()'s own options are known too
    with pytest.raises(ValueError, match=r"^rlpulse: port='abc' is not a port number"):
        rlpulse.start(port="abc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"port=70000 is not a port number"):
        Exporter(port=70000)
    assert rlpulse.get_exporter() is None  # nothing was left serving


def test_log_without_a_dict_is_counted_and_told_in_the_users_terms(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exp = Exporter(port=0, addr="127.0.0.1", gpu=False, host=False)
    exp.log("loss", 1)  # type: ignore[arg-type]
    assert exp.dropped == {"bad_call": 1}  # never raised inside training
    assert "log() takes a dict of metrics, not str (did you mean log({'loss': 1})?)" in caplog.text
    with pytest.raises(TypeError, match=r"did you mean log\(\{'loss': 1\}\)"):
        Exporter(port=0, strict=True).log("loss", 1)  # type: ignore[arg-type]


def test_rank_and_port_come_from_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    base = free_port()
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RLPULSE_PORT", str(base - 1))
    monkeypatch.setenv("RLPULSE_RUN_ID", "from-env")
    exp = Exporter(gpu=False, host=False, addr="127.0.0.1").start()
    try:
        assert exp.port == base
        text = scrape(exp.url)
        assert value(text, "rl_run_info", run_id="from-env", rank="5") == 1
    finally:
        exp.close()


def test_bad_environment_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "zero")
    with pytest.raises(ValueError, match="LOCAL_RANK='zero'"):
        Exporter(port=0, gpu=False, host=False)


def test_tls_passthrough(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    exp = Exporter(
        port=0, addr="127.0.0.1", gpu=False, host=False, certfile=cert, keyfile=key
    ).start()
    try:
        assert exp.url.startswith("https://")
        ctx = ssl.create_default_context(cafile=cert)
        with urllib.request.urlopen(exp.url, context=ctx, timeout=10) as resp:
            assert b"rl_run_info" in resp.read()
    finally:
        exp.close()


def test_known_keys_take_the_fast_path_after_first_sight(exporter: Exporter) -> None:
    exporter.log({"rl_entropy": 1.0, "rl_approx_kl": 0.01})
    exporter.flush()
    assert {"rl_entropy", "rl_approx_kl"} <= set(exporter.ingest.slots)
    before = len(exporter.store.series)
    for step in range(100):
        exporter.log({"rl_entropy": 1.0 - step / 1000, "rl_approx_kl": 0.01}, step=step)
    exporter.flush()
    assert len(exporter.store.series) == before


def test_numpy_and_int_values_are_recorded(exporter: Exporter) -> None:
    exporter.log(
        {
            "rl_entropy": np.float32(0.25),
            "rl_grad_norm_total": 3,
            "rl_loss": np.array(2.0),
            "rl_policy_loss": np.int64(-1),
        }
    )
    text = scrape(exporter.url)
    assert value(text, "rl_entropy") == 0.25
    assert value(text, "rl_loss") == 2.0
    assert value(text, "rl_policy_loss") == -1
    assert value(text, "rl_unmapped_metric", key="rl_grad_norm_total") == 3


def test_node_readings_come_from_local_rank_zero_only() -> None:
    from harness.fake_nvml import FakeNvml

    exps = [
        Exporter(
            port=0, run_id="multi", rank=8 + lr, local_rank=lr, node="node-3", nvml=FakeNvml()
        ).start()
        for lr in (0, 1)
    ]
    try:
        first, second = (scrape(e.url) for e in exps)
        assert value(first, "rl_gpu_power_watts", node="node-3", local_rank="0", rank="8") == 70
        assert value(first, "rl_host_memory_total_bytes", node="node-3") > 0
        assert "rl_gpu_" not in second and "rl_host_" not in second
        assert value(second, "rl_process_resident_memory_bytes", rank="9", local_rank="1") > 0
    finally:
        for e in exps:
            e.close()


def test_record_rollouts_links_exemplars_to_stored_rollouts(tmp_path: Path) -> None:
    from rlpulse.rollouts import SamplingConfig, query

    exp = Exporter(
        port=0,
        run_id="traces",
        gpu=False,
        host=False,
        rollouts={"data_dir": tmp_path, "sampling": SamplingConfig(per_step=2, extremes=1)},
    ).start()
    try:
        n = 256
        ids = [f"s1-{i}" for i in range(n)]
        rewards = np.linspace(0, 1, n)
        kept = exp.record_rollouts(rollout_ids=ids, step=1, rewards=rewards, lengths=[10] * n)
        assert 0 < len(kept) < n
        exp.observe_rollouts(
            latency_seconds=np.linspace(0.01, 100, n), rewards=rewards, rollout_ids=ids
        )
        text = scrape(exp.url, accept="application/openmetrics-text; version=1.0.0")
        linked = {
            ln.split('rollout_id="')[1].split('"')[0]
            for ln in text.splitlines()
            if 'rollout_id="' in ln
        }
        assert linked and linked <= {ids[i] for i in kept}
        assert value(text, "rlpulse_rollouts_offered_total") == n
        exp.close()  # flushes the store
        for rid in linked:
            assert query.find(rid, tmp_path, "traces") is not None, rid
    finally:
        exp.close()


def test_finish_waits_for_a_scrape_to_carry_the_mark_then_frees_the_port() -> None:
    exp = Exporter(port=0, addr="127.0.0.1", run_id="done", gpu=False, host=False).start()
    exp.log({"rl_entropy": 1.0}, step=9)
    port, seen = exp.port, []
    finished = catalog.get("rl_run_finished_timestamp_seconds").name

    def scraper() -> None:
        while not seen:
            try:
                text = scrape(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                return
            if any(name == finished for name, _ in samples(text)):
                seen.append(value(text, finished))

    scrape_as_prometheus(exp.url)  # Prometheus has been scraping it
    t0 = time.time()
    thread = threading.Thread(target=scraper)
    thread.start()
    assert exp.finish(wait=30) is True  # returned once a scrape carried the mark
    thread.join(timeout=10)
    assert seen and t0 <= seen[0] <= time.time()
    assert not exp.serving
    Exporter(port=port, addr="127.0.0.1", gpu=False, host=False).start().close()  # port freed


def test_finish_gives_up_after_wait_and_skips_it_when_never_scraped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exp = rlpulse.start(port=0, addr="127.0.0.1", run_id="lonely", gpu=False, host=False)
    scrape(exp.url)  # a person with curl is no scraper: nothing to wait for
    assert rlpulse.finish(wait=600) is False and not exp.serving
    exp = rlpulse.start(port=0, addr="127.0.0.1", run_id="lonely", gpu=False, host=False)
    scrape_as_prometheus(exp.url)  # a scraper was there once, then went away
    assert rlpulse.finish(wait=0.2) is False
    assert not exp.serving and rlpulse.get_exporter() is None
    assert "no scrape of" in caplog.text and "within 0.2 s after the run ended" in caplog.text
    assert rlpulse.finish() is False  # nothing running: a no-op
    caplog.clear()
    unscraped = Exporter(port=0, addr="127.0.0.1", gpu=False, host=False).start()
    assert unscraped.finish(wait=600) is False and not unscraped.serving
    assert "no scrape of" not in caplog.text  # nobody scrapes it: nobody to tell, no wait
