"""GPU readings from NVML (``nvidia-ml-py``, imported as ``pynvml``), taken at scrape time."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from rlpulse.runtime.collectors.base import CollectorDisabled, Reading, log

# NVML clock-event (throttle) reason bits, grouped into the reasons rlpulse reports.
THROTTLE_REASONS: dict[str, int] = {
    "power": 0x4 | 0x80,  # SwPowerCap | HwPowerBrakeSlowdown
    "thermal": 0x20 | 0x40,  # SwThermalSlowdown | HwThermalSlowdown
    "hw_slowdown": 0x8,  # HwSlowdown
}
_TEMPERATURE_GPU = 0
_CLOCK_SM = 1
_ECC_TYPES = {"corrected": 0, "uncorrected": 1}
_VOLATILE_ECC = 0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class GpuReader:
    """Reads every GPU on the machine; ``nvml`` is the ``pynvml`` module (or a test fake)."""

    def __init__(self, nvml: Any = None, pid: int | None = None) -> None:
        self._nvml = nvml
        self._pid = pid if pid is not None else os.getpid()
        self._ready = False
        self._lost: set[int] = set()

    def _init(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                raise CollectorDisabled(f"nvidia-ml-py is not installed ({exc})") from None
            self._nvml = pynvml
        nv = self._nvml
        try:
            nv.nvmlInit()
            count = nv.nvmlDeviceGetCount()
        except Exception as exc:
            raise CollectorDisabled(f"NVML unavailable: {exc}") from None
        if count == 0:
            raise CollectorDisabled("NVML reports no GPU")
        self._ready = True
        return nv

    def __call__(self) -> Reading:
        nv = self._nvml if self._ready else self._init()
        out: Reading = []
        for index in range(nv.nvmlDeviceGetCount()):
            try:
                out.extend(self._device(nv, index))
            except Exception as exc:  # one lost board must not hide the others
                if index not in self._lost:
                    log.warning(
                        "rlpulse: GPU %d unreadable, its series are left out: %s", index, exc
                    )
                self._lost.add(index)
            else:
                self._lost.discard(index)
        return out

    def _device(self, nv: Any, index: int) -> Reading:
        h = nv.nvmlDeviceGetHandleByIndex(index)
        ids = {
            "gpu": str(index),
            "uuid": _text(nv.nvmlDeviceGetUUID(h)),
            "model": _text(nv.nvmlDeviceGetName(h)),
        }
        out: Reading = []

        def add(name: str, read: Callable[[], float], **extra: str) -> None:
            try:
                value = float(read())
            except Exception as exc:  # NotSupported on this board: leave the series out
                if type(exc).__name__ == "NVMLError_GpuIsLost":
                    raise
                return
            out.append((name, {**ids, **extra}, value))

        add("rl_gpu_utilization_ratio", lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu / 100)
        add(
            "rl_gpu_memory_utilization_ratio",
            lambda: nv.nvmlDeviceGetUtilizationRates(h).memory / 100,
        )
        mem = self._memory(nv, h)
        out.append(("rl_gpu_memory_used_bytes", dict(ids), float(mem.used)))
        out.append(("rl_gpu_memory_total_bytes", dict(ids), float(mem.total)))
        add("rl_gpu_power_watts", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000)
        add("rl_gpu_power_limit_watts", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000)
        add(
            "rl_gpu_temperature_celsius",
            lambda: nv.nvmlDeviceGetTemperature(h, _TEMPERATURE_GPU),
        )
        add("rl_gpu_sm_clock_hertz", lambda: nv.nvmlDeviceGetClockInfo(h, _CLOCK_SM) * 1e6)
        reasons = self._throttle_mask(nv, h)
        if reasons is not None:
            for reason, bits in THROTTLE_REASONS.items():
                out.append(
                    ("rl_gpu_throttled", {**ids, "reason": reason}, float(bool(reasons & bits)))
                )
        for kind, code in _ECC_TYPES.items():
            add(
                "rl_gpu_ecc_errors_total",
                functools.partial(nv.nvmlDeviceGetTotalEccErrors, h, code, _VOLATILE_ECC),
                error_type=kind,
            )
        add("rl_gpu_process_memory_bytes", lambda: self._process_memory(nv, h))
        return out

    @staticmethod
    def _memory(nv: Any, h: Any) -> Any:
        """NVML's v2 memory query where the driver has it: its ``used`` leaves out the memory the
        driver reserves (615 MiB on an H200), as nvidia-smi does; v1's ``used`` is total - free."""
        v2 = getattr(nv, "nvmlMemory_v2", None)
        if v2 is not None:
            try:
                return nv.nvmlDeviceGetMemoryInfo(h, version=v2)
            except Exception:  # an older driver: v1 below
                pass
        return nv.nvmlDeviceGetMemoryInfo(h)

    @staticmethod
    def _throttle_mask(nv: Any, h: Any) -> int | None:
        for fn in (
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
        ):
            if hasattr(nv, fn):
                try:
                    return int(getattr(nv, fn)(h))
                except Exception:
                    return None
        return None

    def _process_memory(self, nv: Any, h: Any) -> float:
        used = 0.0
        for proc in nv.nvmlDeviceGetComputeRunningProcesses(h):
            if proc.pid == self._pid and proc.usedGpuMemory is not None:
                used += float(proc.usedGpuMemory)
        return used
