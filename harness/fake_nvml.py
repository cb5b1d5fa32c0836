"""A fake of the ``pynvml`` module's call boundary, for tests on machines without a GPU."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

MEMORY_V2 = 0x02000028  # the version argument of NVML's v2 memory query


class NVMLError(Exception):
    """Base of the fake's errors, like pynvml.NVMLError."""


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_GpuIsLost(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


@dataclass
class FakeGpu:
    """One simulated board; fields in NVML's own units (percent, bytes, mW, °C, MHz)."""

    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    name: str = "NVIDIA H100 80GB HBM3"
    util: int = 0
    mem_util: int = 0
    mem_used: int = 1 << 30
    mem_total: int = 80 << 30
    mem_reserved: int = (
        0  # driver-reserved: in v1's used (total - free), not in v2's (nvidia-smi's)
    )
    power_mw: int = 70_000
    power_limit_mw: int = 700_000
    temp_c: int = 35
    sm_mhz: int = 1980
    throttle: int = 0
    ecc: dict[int, int] = field(default_factory=lambda: {0: 0, 1: 0})
    ecc_supported: bool = True
    processes: list[tuple[int, int]] = field(default_factory=list)  # (pid, bytes)
    lost: bool = False


class FakeNvml:
    """Implements the pynvml functions rlpulse calls; ``hang`` blocks every call until set."""

    def __init__(self, gpus: list[FakeGpu] | None = None, *, missing: bool = False) -> None:
        self.gpus = gpus if gpus is not None else [FakeGpu()]
        self.missing = missing
        self.hang = threading.Event()
        self.hang.set()
        self.calls = 0

    def _gpu(self, handle: int) -> FakeGpu:
        self.hang.wait()
        self.calls += 1
        gpu = self.gpus[handle]
        if gpu.lost:
            raise NVMLError_GpuIsLost("GPU is lost")
        return gpu

    def nvmlInit(self) -> None:
        if self.missing:
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        self.hang.wait()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._gpu(index)
        return index

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self._gpu(h).uuid

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self._gpu(h).name.encode()  # old bindings return bytes

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        g = self._gpu(h)
        return SimpleNamespace(gpu=g.util, memory=g.mem_util)

    nvmlMemory_v2: int | None = MEMORY_V2

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> Any:
        g = self._gpu(h)
        free = g.mem_total - g.mem_used - g.mem_reserved
        if version == MEMORY_V2:
            return SimpleNamespace(used=g.mem_used, total=g.mem_total, free=free)
        return SimpleNamespace(used=g.mem_total - free, total=g.mem_total, free=free)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._gpu(h).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return self._gpu(h).power_limit_mw

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return self._gpu(h).temp_c

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return self._gpu(h).sm_mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self._gpu(h).throttle

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        g = self._gpu(h)
        if not g.ecc_supported:
            raise NVMLError_NotSupported("Not Supported")
        return g.ecc[kind]

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self._gpu(h).processes]
