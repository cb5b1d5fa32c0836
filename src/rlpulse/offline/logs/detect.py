"""``--format auto``: tell a log's format from its first bytes (not its name)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

from rlpulse.offline.logs.base import LogFormatError
from rlpulse.offline.logs.deepspeed_chat import is_step_line
from rlpulse.offline.logs.digest import looks_like_digest
from rlpulse.offline.logs.documents import DOPAMINE_KEYS
from rlpulse.offline.logs.rllib import looks_like_rllib
from rlpulse.offline.logs.sb3_csv import is_sb3_run
from rlpulse.offline.logs.tensorboard import EVENT_GLOB, event_files
from rlpulse.offline.logs.tfrecord import looks_like_tfrecord
from rlpulse.offline.logs.verl_console import metrics_line

HEAD_BYTES = 1 << 20  # verl prints its config and samples before the first metrics line


def detect_format(path: Path) -> str:
    """The format name of ``path`` (see ``rlpulse.offline.logs.FORMATS``), or a clear error."""
    if path.is_dir():
        if is_sb3_run(path):
            return "sb3-run"
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
        first_object = _FIRST_OBJECT.match(stripped)
        keys = set(_KEY.findall(first_object.group(1))) if first_object else set()
        return "dopamine" if keys >= set(DOPAMINE_KEYS) else "trl"
    if stripped.startswith("{"):
        return _json_format(stripped, first_line)
    if first_line.startswith("#{"):
        return "sb3-csv"
    if looks_like_digest(text):
        return "env-digest"
    rows = text.splitlines()
    if any(is_step_line(line) for line in rows):
        return "deepspeed-chat"
    if any(metrics_line(line) for line in rows):
        return "verl-log"
    csv_format = _csv_format(rows)
    if csv_format:
        return csv_format
    raise LogFormatError(
        path,
        "start",
        f"cannot tell the log format; pass --format ({', '.join(NAMES)})",
    )


NAMES = (
    "trl",
    "verl-log",
    "verl-jsonl",
    "sb3-csv",
    "sb3-run",
    "sb3-eval-json",
    "tensorboard",
    "jsonl",
    "rllib-json",
    "rllib-csv",
    "dopamine",
    "json-columns",
    "deepspeed-chat",
    "env-digest",
)
# the first element of a Dopamine long-format array holds Iteration, Value and Agent
_FIRST_OBJECT = re.compile(r"\[\s*(\{[^{}]*\})")
_KEY = re.compile(r'"([^"\\]+)"\s*:')
_SB3_HISTORY = re.compile(r'^\s{0,8}"training_history"\s*:', re.MULTILINE)
# a member whose value is an array of numbers: a column of a dict-of-arrays dump
_COLUMN = re.compile(r'"[^"\\]+"\s*:\s*\[\s*(-?[\d.]|null|NaN|-?Infinity)')


def _json_format(stripped: str, first_line: str) -> str:
    try:
        first = json.loads(first_line)
    except (json.JSONDecodeError, RecursionError):
        # a pretty-printed document: trainer_state.json, or an SB3 evaluation history
        if '"log_history"' not in stripped and _SB3_HISTORY.search(stripped):
            return "sb3-eval-json"
        if '"log_history"' not in stripped and _COLUMN.search(stripped):
            return "json-columns"
        return "trl"
    if isinstance(first, dict) and "log_history" in first:
        return "trl"
    if isinstance(first, dict) and set(first) == {"step", "data"}:
        return "verl-jsonl"
    if looks_like_rllib(first):
        return "rllib-json"
    if stripped.strip() == first_line.strip() and _COLUMN.search(first_line):
        return "json-columns"  # the whole file is one object holding arrays of numbers
    return "jsonl"


def _csv_format(rows: list[str]) -> str | None:
    rows = [ln for ln in rows[:3] if ln.strip()]
    if len(rows) < 2 or "," not in rows[0]:
        return None
    try:
        parsed = list(csv.reader(rows[:2]))
    except csv.Error:
        return None
    if len(parsed) < 2 or len(parsed[0]) != len(parsed[1]):
        return None
    return "rllib-csv" if looks_like_rllib(parsed[0]) else "sb3-csv"
