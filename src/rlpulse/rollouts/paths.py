"""Where rollout stores live: one data directory shared by the exporter, the demo and the CLI.

The directory is ``$RLPULSE_DATA_DIR`` if set, else ``$XDG_DATA_HOME/rlpulse``, else
``~/.local/share/rlpulse``. Each run is one SQLite file ``<data dir>/rollouts/<run id>.sqlite``
(characters outside ``[A-Za-z0-9._-]`` in the run id are %-escaped, so any run id maps to one
safe file name inside the directory). A name that would pass ``MAX_NAME_CHARS`` is cut and ends
in ``+<hash of the run id>``; the run id is then read from the file itself.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path
from urllib.parse import quote, unquote

SUFFIX = ".sqlite"
MAX_NAME_CHARS = 200  # file names stay under the 255 bytes filesystems allow (-wal/-journal too)
_HASHED = "+"  # quote() always escapes '+', so only a cut name holds one


def default_data_dir() -> Path:
    """The data directory the exporter, ``rlpulse demo`` and ``rlpulse rollouts`` share."""
    env = os.environ.get("RLPULSE_DATA_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "rlpulse"


def rollouts_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder holding one rollout store per run."""
    return (Path(data_dir).expanduser() if data_dir else default_data_dir()) / "rollouts"


def run_file(run_id: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The SQLite file of ``run_id``."""
    if not run_id:
        raise ValueError("run id must be a non-empty string")
    name = quote(run_id, safe="-_").replace(".", "%2E")  # so '..' cannot name a parent
    if len(name) > MAX_NAME_CHARS:
        digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        name = f"{name[: MAX_NAME_CHARS - len(digest) - 1]}{_HASHED}{digest}"
    return rollouts_dir(data_dir) / (name + SUFFIX)


def list_runs(data_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Run ids that have a rollout store in the data directory, sorted."""
    folder = rollouts_dir(data_dir)
    if not folder.is_dir():
        return []
    runs = (_run_id(p) for p in folder.glob("*" + SUFFIX))
    return sorted(r for r in runs if r is not None)


def _run_id(path: Path) -> str | None:
    """The run id a store file is named for (None: an unreadable file with a cut name)."""
    stem = path.name[: -len(SUFFIX)]
    if _HASHED not in stem:
        return unquote(stem)
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1.0)
        try:
            row = conn.execute("SELECT value FROM run WHERE key = 'run_id'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return None if row is None else str(row[0])
