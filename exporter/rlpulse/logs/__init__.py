"""Readers for finished (or growing) training logs: each yields ``Record``s in file order.

Formats: ``trl`` (trainer_state.json ``log_history``), ``verl-log`` (console lines),
``verl-jsonl`` (verl's ``file`` logger), ``sb3-csv`` (Monitor or progress CSV), ``tensorboard``
(event files), ``jsonl`` (one object per line). ``read_log(path)`` detects the format."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from rlpulse.logs.base import LogFormatError, Record
from rlpulse.logs.detect import detect_format
from rlpulse.logs.jsonl import read_jsonl, read_verl_jsonl
from rlpulse.logs.sb3_csv import read_sb3_csv
from rlpulse.logs.tensorboard import EventFileReader, LogdirFollower, read_tensorboard
from rlpulse.logs.trl import read_trl
from rlpulse.logs.verl_console import read_verl_log

FORMATS: dict[str, Callable[[Path], Iterator[Record]]] = {
    "trl": read_trl,
    "verl-log": read_verl_log,
    "verl-jsonl": read_verl_jsonl,
    "sb3-csv": read_sb3_csv,
    "tensorboard": read_tensorboard,
    "jsonl": read_jsonl,
}


def resolve_format(path: Path | str, fmt: str = "auto") -> str:
    """``fmt`` checked against ``FORMATS``, or detected from the file when ``"auto"``."""
    if fmt == "auto":
        return detect_format(Path(path))
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; choose auto or one of {', '.join(FORMATS)}")
    return fmt


def read_log(path: Path | str, fmt: str = "auto") -> Iterator[Record]:
    """The records of the log at ``path`` in format ``fmt`` (``"auto"``: detected), streamed."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such log file or directory")
    return FORMATS[resolve_format(p, fmt)](p)


__all__ = [
    "FORMATS",
    "EventFileReader",
    "LogFormatError",
    "LogdirFollower",
    "Record",
    "detect_format",
    "read_log",
    "resolve_format",
]
