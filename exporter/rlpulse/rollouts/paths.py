"""Where rollout stores live: one data directory shared by the exporter, the demo and the CLI.

The directory is ``$RLPULSE_DATA_DIR`` if set, else ``$XDG_DATA_HOME/rlpulse``, else
``~/.local/share/rlpulse``. Each run is one SQLite file ``<data dir>/rollouts/<run id>.sqlite``
(characters outside ``[A-Za-z0-9._-]`` in the run id are %-escaped, so any run id maps to one
safe file name inside the directory).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote, unquote

SUFFIX = ".sqlite"


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
    name = quote(run_id, safe="-_")  # '.' escaped too, so '..' cannot name a parent
    return rollouts_dir(data_dir) / (name.replace(".", "%2E") + SUFFIX)


def list_runs(data_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Run ids that have a rollout store in the data directory, sorted."""
    folder = rollouts_dir(data_dir)
    if not folder.is_dir():
        return []
    return sorted(unquote(p.name[: -len(SUFFIX)]) for p in folder.glob("*" + SUFFIX))
