"""``--format auto``: tell a log's format from its first bytes (not its name)."""

from __future__ import annotations

import json
from pathlib import Path

from rlpulse.logs.base import LogFormatError
from rlpulse.logs.tensorboard import EVENT_GLOB, event_files
from rlpulse.logs.tfrecord import looks_like_tfrecord
from rlpulse.logs.verl_console import metrics_line

HEAD_BYTES = 1 << 20  # verl prints its config and samples before the first metrics line


def detect_format(path: Path) -> str:
    """The format name of ``path`` (see ``rlpulse.logs.FORMATS``), or a clear error."""
    if path.is_dir():
        event_files(path)  # raises when the directory holds no run
        return "tensorboard"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such log file")
    with open(path, "rb") as fh:
        head = fh.read(HEAD_BYTES)
    if looks_like_tfrecord(head) or (not head and path.match(EVENT_GLOB)):
        return "tensorboard"
    text = head.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    first_line = stripped.split("\n", 1)[0]
    if stripped.startswith("["):
        return "trl"
    if stripped.startswith("{"):
        try:
            first = json.loads(first_line)
        except json.JSONDecodeError:
            return "trl"  # a pretty-printed document: trainer_state.json
        if isinstance(first, dict) and "log_history" in first:
            return "trl"
        if isinstance(first, dict) and set(first) == {"step", "data"}:
            return "verl-jsonl"
        return "jsonl"
    if first_line.startswith("#{"):
        return "sb3-csv"
    if any(metrics_line(line) for line in text.splitlines()):
        return "verl-log"
    lines = [ln for ln in text.splitlines()[:3] if ln.strip()]
    if len(lines) >= 2 and "," in lines[0] and lines[0].count(",") == lines[1].count(","):
        return "sb3-csv"
    raise LogFormatError(
        path,
        "start",
        "cannot tell the log format; pass --format (trl, verl-log, verl-jsonl, "
        "sb3-csv, tensorboard, jsonl)",
    )
