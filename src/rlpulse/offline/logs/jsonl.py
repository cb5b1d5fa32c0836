"""JSON Lines logs: one JSON object per line (``jsonl``), and verl's ``file`` logger backend
(``verl-jsonl``: ``{"step": N, "data": {key: value, ...}}`` per line, appended by
``verl.utils.tracking.FileLogger``). Both stream line by line.

verl's file logger, and most JSON writers, write a NaN or ±Inf metric as JSON ``null``: in both
formats a ``null`` is read back as NaN (``base.Nulls``, the rule of every reader), so the exporter
counts it in ``rl_nonfinite_values_total`` instead of dropping it; only a ``null`` for a key that
held text before is no value. Bare ``NaN``/``Infinity`` tokens (RLlib, Python's
``json.dumps``) are read as the non-finite numbers they stand for."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from rlpulse.offline.logs.base import LogFormatError, Nulls, Record, as_step, flat, lines, number

STEP_KEYS = ("step", "global_step", "_step", "train/global_step", "iteration", "timestep")
TIME_KEYS = ("timestamp", "_timestamp", "wall_time", "walltime")


def objects(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    """(line number, object) for each non-blank line; a clear error for anything else."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in lines(path, fh):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except RecursionError:
                raise LogFormatError(path, f"line {lineno}", "JSON nested too deeply") from None
            except json.JSONDecodeError as exc:
                problem = f"not valid JSON ({exc.msg} at column {exc.colno})"
                if not line.endswith("\n"):
                    problem = f"truncated last line: {problem}"
                raise LogFormatError(path, f"line {lineno}", problem) from None
            except ValueError:  # an integer past Python's 4,300-digit conversion limit
                raise LogFormatError(
                    path, f"line {lineno}", "a number of over 4300 digits"
                ) from None
            if not isinstance(obj, dict):
                raise LogFormatError(
                    path, f"line {lineno}", f"expected a JSON object, got {type(obj).__name__}"
                )
            yield lineno, obj


def _timestamp(value: object) -> float | None:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    v = number(value)
    return v if v is not None and math.isfinite(v) else None


def read_jsonl(path: Path) -> Iterator[Record]:
    """Rows of a generic JSONL metrics log. The step is the first of ``STEP_KEYS`` present
    (else the previous step + 1); nested objects flatten to ``a/b`` keys."""
    step, nulls = -1, Nulls()
    for lineno, obj in objects(path):
        values = nulls(flat(path, f"line {lineno}", obj), obj)
        raw = next((obj[k] for k in STEP_KEYS if k in obj), None)
        if raw is None:
            step += 1
        else:
            parsed = as_step(raw)
            if parsed is None:
                raise LogFormatError(path, f"line {lineno}", f"step {raw!r} is not an integer")
            step = parsed
        ts = next((_timestamp(obj[k]) for k in TIME_KEYS if k in obj), None)
        for k in (*STEP_KEYS, *TIME_KEYS):
            values.pop(k, None)
        yield Record(step, ts, values, f"line {lineno}")


def read_verl_jsonl(path: Path) -> Iterator[Record]:
    """Rows of verl's ``file`` logger: ``{"step": N, "data": {...}}`` per line."""
    nulls = Nulls()
    for lineno, obj in objects(path):
        step, data = as_step(obj.get("step")), obj.get("data")
        if step is None or not isinstance(data, dict):
            raise LogFormatError(
                path,
                f"line {lineno}",
                'expected {"step": <int>, "data": {...}} (verl file logger), '
                f"got keys {sorted(obj)[:6]}",
            )
        where = f"line {lineno}"
        yield Record(step, None, nulls(flat(path, where, data), data), where)
