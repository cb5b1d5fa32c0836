"""Validate the NVML collector on a real GPU (shared/GPU-CHECK.md): idle scrape, loaded scrape.

Run on a GPU machine from the repository root: ``PYTHONPATH=exporter python3 scripts/gpu_check.py
OUTDIR``. It starts an exporter, scrapes ``/metrics`` idle and under a sustained bf16 matmul load
that this process runs (so its own GPU memory must be attributed), reads ``nvidia-smi`` at the same
moments, and writes ``gpu-check.json`` (both readings side by side and every check) to OUTDIR.
Exits 1 when a check fails. It changes no setting of the card.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from rlpulse.runtime.exporter import Exporter

SMI_FIELDS = (
    "index,uuid,name,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu,clocks.sm"
)


def smi() -> list[dict[str, str]]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    names = SMI_FIELDS.split(",")
    return [
        dict(zip(names, (v.strip() for v in line.split(",")), strict=True))
        for line in out.splitlines()
    ]


def scrape(port: int) -> tuple[dict[str, list[tuple[dict[str, str], float]]], float]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    took = time.perf_counter() - t0
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            series.setdefault(s.name, []).append((dict(s.labels), s.value))
    return series, took


def gpu0(series: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float | None:
    for labels, value in series.get(name, []):
        if labels.get("gpu") == "0":
            return value
    return None


def load(stop: threading.Event, ready: threading.Event) -> None:
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    keep = torch.empty(4 * 1024**3, dtype=torch.uint8, device="cuda")  # 4 GiB held by this process
    torch.cuda.synchronize()
    ready.set()
    while not stop.is_set():
        for _ in range(20):
            a = (a @ b).clamp_(-1, 1)
        torch.cuda.synchronize()
    del keep


def reading(port: int) -> dict[str, object]:
    smi_before = smi()
    series, took = scrape(port)
    smi_after = smi()
    names = [
        "rl_gpu_utilization_ratio",
        "rl_gpu_memory_used_bytes",
        "rl_gpu_memory_total_bytes",
        "rl_gpu_power_watts",
        "rl_gpu_power_limit_watts",
        "rl_gpu_temperature_celsius",
        "rl_gpu_sm_clock_hertz",
        "rl_gpu_process_memory_bytes",
    ]
    labels = series.get("rl_gpu_memory_total_bytes", [({}, 0.0)])[0][0]
    duration = [
        v
        for lab, v in series.get("rlpulse_collector_duration_seconds", [])
        if lab.get("collector") == "gpu"
    ]
    return {
        "exporter": {n: gpu0(series, n) for n in names},
        "labels": labels,
        "gpus_exported": sorted(
            {lab.get("gpu", "") for lab, _ in series.get("rl_gpu_memory_total_bytes", [])}
        ),
        "throttled": {
            lab["reason"]: v
            for lab, v in series.get("rl_gpu_throttled", [])
            if lab.get("gpu") == "0"
        },
        "collector_up": [
            v for lab, v in series.get("rlpulse_collector_up", []) if lab.get("collector") == "gpu"
        ],
        "collector_duration_s": duration,
        "scrape_s": took,
        "smi_before": smi_before,
        "smi_after": smi_after,
    }


def checks(idle: dict, busy: dict) -> list[tuple[str, bool, str]]:
    out: list[tuple[str, bool, str]] = []
    s0 = busy["smi_after"][0]
    ex = busy["exporter"]
    lab = busy["labels"]
    out.append(
        (
            "identity labels",
            lab.get("uuid") == s0["uuid"] and lab.get("model") == s0["name"],
            str(lab),
        )
    )
    out.append(
        (
            "every GPU exported",
            len(busy["gpus_exported"]) == len(busy["smi_after"]),
            str(busy["gpus_exported"]),
        )
    )
    out.append(
        (
            "idle utilization low",
            (idle["exporter"]["rl_gpu_utilization_ratio"] or 0) <= 0.2,
            str(idle["exporter"]["rl_gpu_utilization_ratio"]),
        )
    )
    out.append(
        (
            "loaded utilization high",
            (ex["rl_gpu_utilization_ratio"] or 0) >= 0.8,
            str(ex["rl_gpu_utilization_ratio"]),
        )
    )
    mib = 1024**2
    total_smi = float(s0["memory.total"]) * mib
    out.append(
        (
            "memory total (bytes) = smi MiB",
            abs((ex["rl_gpu_memory_total_bytes"] or 0) - total_smi) <= 2 * mib,
            f"{ex['rl_gpu_memory_total_bytes']} vs {total_smi}",
        )
    )
    used = [float(busy["smi_before"][0]["memory.used"]) * mib, float(s0["memory.used"]) * mib]
    out.append(
        (
            "memory used within smi readings ±256 MiB",
            min(used) - 256 * mib <= (ex["rl_gpu_memory_used_bytes"] or 0) <= max(used) + 256 * mib,
            f"{ex['rl_gpu_memory_used_bytes']} vs {used}",
        )
    )
    power = [float(busy["smi_before"][0]["power.draw"]), float(s0["power.draw"])]
    out.append(
        (
            "power (watts) near smi ±25%",
            min(power) * 0.75 <= (ex["rl_gpu_power_watts"] or 0) <= max(power) * 1.25,
            f"{ex['rl_gpu_power_watts']} vs {power}",
        )
    )
    out.append(
        (
            "loaded power above idle",
            (ex["rl_gpu_power_watts"] or 0) > (idle["exporter"]["rl_gpu_power_watts"] or 0),
            f"{idle['exporter']['rl_gpu_power_watts']} -> {ex['rl_gpu_power_watts']}",
        )
    )
    temp = [float(busy["smi_before"][0]["temperature.gpu"]), float(s0["temperature.gpu"])]
    out.append(
        (
            "temperature (celsius) near smi ±3",
            min(temp) - 3 <= (ex["rl_gpu_temperature_celsius"] or 0) <= max(temp) + 3,
            f"{ex['rl_gpu_temperature_celsius']} vs {temp}",
        )
    )
    clock = [float(busy["smi_before"][0]["clocks.sm"]) * 1e6, float(s0["clocks.sm"]) * 1e6]
    out.append(
        (
            "SM clock (hertz) near smi ±15%",
            min(clock) * 0.85 <= (ex["rl_gpu_sm_clock_hertz"] or 0) <= max(clock) * 1.15,
            f"{ex['rl_gpu_sm_clock_hertz']} vs {clock}",
        )
    )
    out.append(
        (
            "process memory attributed (>= 4 GiB under load)",
            (ex["rl_gpu_process_memory_bytes"] or 0) >= 4 * 1024**3,
            str(ex["rl_gpu_process_memory_bytes"]),
        )
    )
    out.append(("collector up", busy["collector_up"] == [1.0], str(busy["collector_up"])))
    out.append(
        (
            "collector read within its 0.5 s budget",
            all(d < 0.5 for d in busy["collector_duration_s"] + idle["collector_duration_s"]),
            f"idle {idle['collector_duration_s']} busy {busy['collector_duration_s']}",
        )
    )
    return out


def main(outdir: str) -> int:
    exp = Exporter(
        port=0, run_id="gpu-check", host=False, process=True, metadata={"framework": "check"}
    ).start()
    port = exp.port
    time.sleep(2)
    idle = reading(port)
    stop, ready = threading.Event(), threading.Event()
    t = threading.Thread(target=load, args=(stop, ready), daemon=True)
    t.start()
    ready.wait(120)
    time.sleep(8)  # NVML utilization is a 1/6 s - 1 s sampled average; let the load settle
    busy = reading(port)
    time.sleep(1.5)
    busy2 = reading(port)
    stop.set()
    t.join(60)
    exp.close()
    result = checks(idle, busy)
    for name, ok, detail in result:
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")
    Path(outdir).mkdir(parents=True, exist_ok=True)
    Path(outdir, "gpu-check.json").write_text(
        json.dumps({"idle": idle, "busy": busy, "busy_again": busy2, "checks": result}, indent=1)
    )
    return 0 if all(ok for _, ok, _ in result) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
