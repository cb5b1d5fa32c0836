"""Readers for finished (or growing) training logs: each yields ``Record``s in file order.

Formats: ``trl`` (trainer_state.json ``log_history``), ``verl-log`` (console lines),
``verl-jsonl`` (verl's ``file`` logger), ``sb3-csv`` (Monitor or progress CSV), ``sb3-run`` (a
run folder: progress.csv with its Monitor files' episodes),
``sb3-eval-json`` (an evaluation-history document), ``tensorboard`` (event files), ``jsonl``
(one object per line: tinker-cookbook ``metrics.jsonl``, W&B-style dumps), ``rllib-json`` and
``rllib-csv`` (Tune's ``result.json`` / ``progress.csv``), ``dopamine`` (baseline long-format
JSON, one segment per run), ``json-columns`` (an object of arrays, a segment per array length),
``deepspeed-chat`` (step-3 PPO console log), ``env-digest`` (a
per-environment epoch digest, one segment per environment). ``read_log(path)`` detects the
format. Every reader streams, bounds what it holds in memory (one line, one JSON value, one CSV
field) and reports a malformed file as one ``LogFormatError`` naming the file and position."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from rlpulse.offline.logs.base import LogFormatError, Record
from rlpulse.offline.logs.deepspeed_chat import read_deepspeed_chat
from rlpulse.offline.logs.detect import NAMES, detect_format
from rlpulse.offline.logs.digest import read_digest
from rlpulse.offline.logs.documents import read_dopamine, read_json_columns, read_sb3_eval_json
from rlpulse.offline.logs.jsonl import read_jsonl, read_verl_jsonl
from rlpulse.offline.logs.rllib import read_rllib_csv, read_rllib_json
from rlpulse.offline.logs.sb3_csv import read_sb3_csv, read_sb3_run
from rlpulse.offline.logs.tensorboard import EventFileReader, LogdirFollower, read_tensorboard
from rlpulse.offline.logs.trl import read_trl
from rlpulse.offline.logs.verl_console import read_verl_log

FORMATS: dict[str, Callable[[Path], Iterator[Record]]] = {
    "trl": read_trl,
    "verl-log": read_verl_log,
    "verl-jsonl": read_verl_jsonl,
    "sb3-csv": read_sb3_csv,
    "sb3-run": read_sb3_run,
    "sb3-eval-json": read_sb3_eval_json,
    "tensorboard": read_tensorboard,
    "jsonl": read_jsonl,
    "rllib-json": read_rllib_json,
    "rllib-csv": read_rllib_csv,
    "dopamine": read_dopamine,
    "json-columns": read_json_columns,
    "deepspeed-chat": read_deepspeed_chat,
    "env-digest": read_digest,
}
assert tuple(FORMATS) == NAMES


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
