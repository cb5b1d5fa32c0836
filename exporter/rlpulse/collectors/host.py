"""Host and trainer-process readings from psutil, taken at scrape time."""

from __future__ import annotations

import psutil

from rlpulse.collectors.base import Reading


class HostReader:
    """CPU and memory of the machine and of this process."""

    def __init__(self) -> None:
        self._proc = psutil.Process()
        psutil.cpu_percent(None)  # prime the counters: the first call returns 0
        self._proc.cpu_percent(None)

    def __call__(self) -> Reading:
        vm = psutil.virtual_memory()
        return [
            ("rl_host_cpu_utilization_ratio", {}, psutil.cpu_percent(None) / 100),
            ("rl_host_memory_used_bytes", {}, float(vm.total - vm.available)),
            ("rl_host_memory_total_bytes", {}, float(vm.total)),
            ("rl_process_cpu_utilization_ratio", {}, self._proc.cpu_percent(None) / 100),
            ("rl_process_resident_memory_bytes", {}, float(self._proc.memory_info().rss)),
        ]
