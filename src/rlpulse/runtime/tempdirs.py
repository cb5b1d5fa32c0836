"""Private temporary directories that a killed process does not leave behind for long.

``private_dir(kind)`` makes ``<tmp>/rlpulse-<kind>-<pid>-<random>`` (mode 0700) after removing
the directories of that kind left by processes of this user that no longer run: a rank or a
replay killed with SIGKILL never runs its own cleanup.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path


def private_dir(kind: str) -> str:
    """A new private directory for ``kind`` (``workers``, ``tls``, ``replay`` …)."""
    sweep(kind)
    return tempfile.mkdtemp(prefix=f"rlpulse-{kind}-{os.getpid()}-")


@contextlib.contextmanager
def temporary_dir(kind: str) -> Iterator[str]:
    """``private_dir(kind)``, removed when the block ends."""
    path = private_dir(kind)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def sweep(kind: str) -> int:
    """Remove this user's ``kind`` directories whose process is gone; how many went."""
    removed = 0
    for path in Path(tempfile.gettempdir()).glob(f"rlpulse-{kind}-*-*"):
        pid = _owner(path.name, kind)
        if pid is None or _alive(pid):
            continue
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def _owner(name: str, kind: str) -> int | None:
    pid, _, _ = name[len(f"rlpulse-{kind}-") :].partition("-")
    return int(pid) if pid.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
