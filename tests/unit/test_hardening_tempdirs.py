"""Break-test regression (issue 16, item 13): the private directory of a rank killed with
SIGKILL (its worker socket) is removed by the next one."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from rlpulse.runtime import tempdirs

RANK = textwrap.dedent(
    """
    import sys, time
    from rlpulse.runtime import workers
    from rlpulse.runtime.exporter import Exporter
    hub = workers.serve(Exporter(port=0, run_id="killed", gpu=False, host=False), env=False)
    print(hub.address.path, flush=True)
    time.sleep(60)
    """
)


def test_a_killed_ranks_worker_directory_is_swept_by_the_next() -> None:
    proc = subprocess.Popen([sys.executable, "-c", RANK], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    left = Path(proc.stdout.readline().strip()).parent
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert left.is_dir()  # SIGKILL: no cleanup ran
    mine = tempdirs.private_dir("workers")  # what the next rank's hub does first
    try:
        assert not left.exists()
        assert Path(mine).is_dir()
    finally:
        Path(mine).rmdir()


def test_a_live_processes_directory_is_kept() -> None:
    alive = Path(tempdirs.private_dir("workers"))
    try:
        assert tempdirs.sweep("workers") == 0
        assert alive.is_dir()
    finally:
        alive.rmdir()
    other = Path(tempfile.mkdtemp(prefix="rlpulse-workers-notapid-"))
    try:
        tempdirs.sweep("workers")
        assert other.is_dir()  # not named by a pid: not ours to judge
    finally:
        other.rmdir()
