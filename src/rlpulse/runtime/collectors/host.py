"""Host (node-level) and trainer-process (per-rank) readings from psutil, at scrape time."""

from __future__ import annotations

import psutil

from rlpulse.runtime.collectors.base import Reading


class HostReader:
    """CPU and memory of the whole machine: exported once per node."""

    def __init__(self) -> None:
        psutil.cpu_percent(None)  # prime the counter: the first call returns 0

    def __call__(self) -> Reading:
        vm = psutil.virtual_memory()
        return [
            ("rl_host_cpu_utilization_ratio", {}, psutil.cpu_percent(None) / 100),
            ("rl_host_memory_used_bytes", {}, float(vm.total - vm.available)),
            ("rl_host_memory_total_bytes", {}, float(vm.total)),
        ]


class ProcessReader:
    """CPU and resident memory of this trainer process: exported by every rank."""

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self._proc.cpu_percent(None)

    def __call__(self) -> Reading:
        return [
            ("rl_process_cpu_utilization_ratio", {}, self._proc.cpu_percent(None) / 100),
            ("rl_process_resident_memory_bytes", {}, float(self._proc.memory_info().rss)),
        ]
