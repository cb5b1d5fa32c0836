"""The NVML collector against a fake at the pynvml call boundary, scraped over real HTTP."""

from __future__ import annotations

import logging
import os
import time

import pytest

from harness.fake_nvml import MEMORY_V2, FakeGpu, FakeNvml
from rlpulse.runtime.exporter import Exporter
from tests.conftest import promtool_check_metrics, samples, scrape, value

GIB = 1 << 30


def _exp(nvml: FakeNvml, timeout: float = 0.5) -> Exporter:
    return Exporter(
        port=0, run_id="gpu", host=False, nvml=nvml, collector_timeout=timeout, collector_ttl=0.0
    ).start()


def test_gpu_series_have_identity_labels_and_base_units() -> None:
    nvml = FakeNvml(
        [
            FakeGpu(
                uuid="GPU-a",
                util=87,
                mem_used=60 * GIB,
                power_mw=612_500,
                temp_c=71,
                sm_mhz=1755,
                processes=[(os.getpid(), 5 * GIB), (1, GIB)],
            ),
            FakeGpu(uuid="GPU-b", name="NVIDIA A100-SXM4-40GB", throttle=0x40),
        ]
    )
    exp = _exp(nvml)
    try:
        text = scrape(exp.url)
        check = promtool_check_metrics(text)
        assert check.returncode == 0, check.stdout + check.stderr
        ids = {"gpu": "0", "uuid": "GPU-a", "model": "NVIDIA H100 80GB HBM3", "run_id": "gpu"}
        assert value(text, "rl_gpu_utilization_ratio", **ids) == 0.87
        assert value(text, "rl_gpu_memory_used_bytes", **ids) == 60 * GIB
        assert value(text, "rl_gpu_memory_total_bytes", **ids) == 80 * GIB
        assert value(text, "rl_gpu_power_watts", **ids) == 612.5
        assert value(text, "rl_gpu_power_limit_watts", **ids) == 700
        assert value(text, "rl_gpu_temperature_celsius", **ids) == 71
        assert value(text, "rl_gpu_sm_clock_hertz", **ids) == 1.755e9
        assert value(text, "rl_gpu_process_memory_bytes", **ids) == 5 * GIB
        assert value(text, "rl_gpu_throttled", gpu="1", reason="thermal") == 1
        assert value(text, "rl_gpu_throttled", gpu="1", reason="power") == 0
        assert value(text, "rl_gpu_ecc_errors_total", gpu="0", error_type="uncorrected") == 0
        assert value(text, "rlpulse_collector_up", collector="gpu") == 1
        assert value(text, "rlpulse_collector_enabled", collector="gpu") == 1
    finally:
        exp.close()


def test_memory_used_leaves_out_driver_reserved_memory_as_nvidia_smi_does() -> None:
    """Measured on an H200: v1's used (total - free) was 615 MiB above nvidia-smi's memory.used."""
    for v2, used in ((MEMORY_V2, 5 * GIB), (None, 5 * GIB + (615 << 20))):
        nvml = FakeNvml([FakeGpu(mem_used=5 * GIB, mem_reserved=615 << 20)])
        nvml.nvmlMemory_v2 = v2  # None: bindings older than the v2 query, v1's reading served
        exp = _exp(nvml)
        try:
            assert value(scrape(exp.url), "rl_gpu_memory_used_bytes", gpu="0") == used
        finally:
            exp.close()


def test_unsupported_fields_are_left_out() -> None:
    exp = _exp(FakeNvml([FakeGpu(ecc_supported=False)]))
    try:
        text = scrape(exp.url)
        assert "rl_gpu_ecc_errors_total" not in text
        assert value(text, "rl_gpu_utilization_ratio", gpu="0") == 0
        assert value(text, "rlpulse_collector_up", collector="gpu") == 1
    finally:
        exp.close()


def test_no_nvml_disables_the_collector_with_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="rlpulse"):
        exp = _exp(FakeNvml(missing=True))
        try:
            for _ in range(3):
                text = scrape(exp.url)
        finally:
            exp.close()
    assert value(text, "rlpulse_collector_enabled", collector="gpu") == 0
    assert "rl_gpu_" not in text
    assert 'rlpulse_collector_up{collector="gpu"' not in text
    assert len([r for r in caplog.records if "gpu collector disabled" in r.getMessage()]) == 1


def test_no_gpu_disables_the_collector() -> None:
    exp = _exp(FakeNvml([]))
    try:
        assert value(scrape(exp.url), "rlpulse_collector_enabled", collector="gpu") == 0
    finally:
        exp.close()


def test_real_pynvml_without_a_driver_disables_cleanly() -> None:
    exp = Exporter(port=0, host=False).start()  # the real nvidia-ml-py; no GPU on CI machines
    try:
        text = scrape(exp.url)
        enabled = value(text, "rlpulse_collector_enabled", collector="gpu")
        assert enabled in (0.0, 1.0)
    finally:
        exp.close()


def test_hung_nvml_call_does_not_hang_the_scrape() -> None:
    nvml = FakeNvml([FakeGpu()])
    exp = _exp(nvml, timeout=0.3)
    try:
        assert value(scrape(exp.url), "rlpulse_collector_up", collector="gpu") == 1
        nvml.hang.clear()  # every NVML call now blocks
        t0 = time.monotonic()
        text = scrape(exp.url)
        elapsed = time.monotonic() - t0
        assert value(text, "rlpulse_collector_up", collector="gpu") == 0
        assert value(text, "rlpulse_collector_errors_total", collector="gpu") == 1
        assert "rl_gpu_utilization_ratio" not in text
        assert elapsed < 5, elapsed  # bounded by the collector timeout, not by NVML
        text = scrape(exp.url)  # still hung: no second call piles up, the scrape still answers
        assert value(text, "rlpulse_collector_errors_total", collector="gpu") == 2
        nvml.hang.set()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            text = scrape(exp.url)
            if value(text, "rlpulse_collector_up", collector="gpu") == 1:
                break
        assert value(text, "rl_gpu_utilization_ratio", gpu="0") == 0
    finally:
        nvml.hang.set()
        exp.close()


def test_a_lost_gpu_drops_only_its_own_series() -> None:
    nvml = FakeNvml([FakeGpu(uuid="GPU-a"), FakeGpu(uuid="GPU-b")])
    exp = _exp(nvml)
    try:
        assert len([k for k in samples(scrape(exp.url)) if k[0] == "rl_gpu_power_watts"]) == 2
        nvml.gpus[1].lost = True
        text = scrape(exp.url)
        powers = [k for k in samples(text) if k[0] == "rl_gpu_power_watts"]
        assert len(powers) == 1 and ("uuid", "GPU-a") in powers[0][1]
        assert value(text, "rlpulse_collector_up", collector="gpu") == 1
    finally:
        exp.close()


def test_readings_are_cached_between_close_scrapes() -> None:
    nvml = FakeNvml([FakeGpu()])
    exp = Exporter(port=0, host=False, nvml=nvml, collector_ttl=60).start()
    try:
        scrape(exp.url)
        calls = nvml.calls
        scrape(exp.url)
        assert nvml.calls == calls
    finally:
        exp.close()


def test_host_collector_reports_process_and_machine() -> None:
    exp = Exporter(port=0, gpu=False).start()
    try:
        text = scrape(exp.url)
        assert value(text, "rl_process_resident_memory_bytes") > 10 * (1 << 20)
        assert value(text, "rl_host_memory_total_bytes") >= value(text, "rl_host_memory_used_bytes")
        assert 0 <= value(text, "rl_host_cpu_utilization_ratio") <= 1
        assert value(text, "rlpulse_collector_up", collector="host") == 1
    finally:
        exp.close()
