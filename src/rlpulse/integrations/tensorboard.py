"""TensorBoard event files (CleanRL, OpenRLHF, SB3's and verl's tensorboard loggers, anything
with a ``SummaryWriter``): follow a run's log directory as it grows and export every scalar.

``TensorBoardTailer(logdir, exporter).poll()`` exports the scalars written since the last poll
(each tag goes through ``Exporter.log`` and the key map of the exporter's framework, at the
event's step); ``run()`` polls until stopped. Event files that appear later (a restarted run, a
sub-writer) are picked up. A corrupt file is reported once and left; the others go on.
No TensorFlow or tensorboard package is needed (``rlpulse.offline.logs.tensorboard`` decodes them).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from rlpulse.offline.logs.base import LogFormatError
from rlpulse.offline.logs.tensorboard import EVENT_GLOB, EventFileReader
from rlpulse.runtime.exporter import Exporter

log = logging.getLogger("rlpulse")

POLL_INTERVAL = 2.0


class TensorBoardTailer:
    """Follows every event file under ``logdir`` (one run) into ``exporter``."""

    def __init__(self, logdir: Path | str, exporter: Exporter) -> None:
        self.logdir = Path(logdir)
        if not self.logdir.is_dir():
            raise FileNotFoundError(f"log directory {str(self.logdir)!r} does not exist")
        self.exporter = exporter
        self.readers: dict[Path, EventFileReader] = {}
        self.broken: dict[Path, str] = {}  # file -> the error that stopped following it
        self.records = 0

    def poll(self) -> int:
        """Export what was written since the last poll; returns the number of records."""
        for path in sorted(self.logdir.rglob(EVENT_GLOB)):
            if path.is_file() and path not in self.readers and path not in self.broken:
                self.readers[path] = EventFileReader(path)
        exported = 0
        for path, reader in list(self.readers.items()):
            try:
                for record in reader.records():
                    self.exporter.log(record.values, step=record.step)
                    exported += 1
            except (LogFormatError, OSError) as exc:
                del self.readers[path]
                self.broken[path] = str(exc)
                log.error("rlpulse tail-tensorboard: no longer following %s: %s", path, exc)
        self.records += exported
        return exported

    def run(
        self,
        interval: float = POLL_INTERVAL,
        stop: threading.Event | None = None,
        duration: float | None = None,
    ) -> None:
        """Poll every ``interval`` seconds until ``stop`` is set or ``duration`` has passed."""
        stop = stop or threading.Event()
        deadline = None if duration is None else time.monotonic() + duration
        while True:
            self.poll()
            left = interval if deadline is None else min(interval, deadline - time.monotonic())
            if left <= 0 or stop.wait(left):
                self.poll()
                return
