"""Ray RLlib / Tune trial results: ``result.json`` (``rllib-json``, one JSON object per
training iteration) and ``progress.csv`` (``rllib-csv``, the same results as CSV columns).

Step = ``training_iteration``; time = ``timestamp`` (Unix seconds). Nested results flatten to
``a/b`` keys (``info/learner/default_policy/learner_stats/entropy``). ``config`` (the trial's
hyperparameters, repeated on every row) and host bookkeeping (``pid``, ``date`` …) are skipped.
Tune writes a metric with no value (``episode_reward_mean`` of an iteration in which no
episode finished) as a bare ``NaN`` token: an episode statistic (``episode_*``) that is NaN in an
iteration whose episode count (``episodes_this_iter``, ``num_episodes``) is 0 or absent is no
value and left out; elsewhere NaN is read as NaN, which the exporter counts as non-finite.
Older ``progress.csv`` files hold the nested results (``info``) as a Python-repr dict in one
cell; it is read with a literal-only parser (numbers, strings, dicts, ``nan``/
``inf``), never evaluated, and bounded by the CSV field limit.
"""

from __future__ import annotations

import ast
import csv
import math
from collections.abc import Iterator
from pathlib import Path

from rlpulse.offline.logs.base import (
    MAX_DEPTH,
    LogFormatError,
    Record,
    as_step,
    flat,
    lines,
    number,
)
from rlpulse.offline.logs.jsonl import objects

STEP_KEY = "training_iteration"
TIME_KEY = "timestamp"
SKIPPED = frozenset({"config", "pid", "node_ip", "hostname", "date", "experiment_id", "done"})
_NAMES = {"nan": math.nan, "inf": math.inf, "True": True, "False": False, "None": None}
# an iteration's finished episodes (``episodes``: 2018's RLlib; ``episodes_total`` is a total)
EPISODE_COUNTS = ("episodes_this_iter", "num_episodes", "episodes")


def looks_like_rllib(keys: object) -> bool:
    """Whether a first row's keys (a dict or a CSV header) are a Tune trial result."""
    return isinstance(keys, dict | list) and STEP_KEY in keys


def _record(path: Path, where: str, row: dict[str, object]) -> Record:
    step = as_step(row.get(STEP_KEY))
    if step is None:
        raise LogFormatError(path, where, f"{STEP_KEY} {row.get(STEP_KEY)!r} is not an integer")
    ts = number(row.get(TIME_KEY))
    values = flat(path, where, {k: v for k, v in row.items() if k not in SKIPPED})
    for k in (STEP_KEY, TIME_KEY):
        values.pop(k, None)
    if not _episodes_ended(values):
        for k in [k for k, v in values.items() if _episode_stat(k) and math.isnan(v)]:
            del values[k]  # Tune's NaN for "no episode ended": no value, not a failure
    return Record(step, ts if ts is not None and math.isfinite(ts) else None, values, where)


def _episode_stat(key: str) -> bool:
    return key.rsplit("/", 1)[-1].startswith("episode_")


def _episodes_ended(values: dict[str, float]) -> bool:
    """Whether the iteration says an episode finished in it (its count above 0)."""
    return any(v > 0 for k, v in values.items() if k.rsplit("/", 1)[-1] in EPISODE_COUNTS)


def read_rllib_json(path: Path) -> Iterator[Record]:
    """One record per line of a trial's ``result.json``."""
    for lineno, obj in objects(path):
        yield _record(path, f"line {lineno}", obj)


def _literal(node: ast.AST, depth: int = 0) -> object:
    """The value of a Python literal made of dicts, numbers, strings and nan/inf names."""
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    if isinstance(node, ast.Dict):
        return {
            _literal(k, depth + 1): _literal(v, depth + 1)
            for k, v in zip(node.keys, node.values, strict=True)
            if k is not None
        }
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _literal(node.operand, depth + 1)
        if isinstance(inner, int | float) and not isinstance(inner, bool):
            return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return None  # per-episode lists (hist_stats): not scalars
    raise ValueError(f"not a literal: {type(node).__name__}")


def _cell(path: Path, where: str, name: str, cell: str) -> object:
    if not cell.startswith("{"):
        return number(cell)
    try:
        return _literal(ast.parse(cell, mode="eval").body)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as exc:
        raise LogFormatError(path, where, f"column {name!r}: not a dict literal ({exc})") from None


def read_rllib_csv(path: Path) -> Iterator[Record]:
    """One record per row of a trial's ``progress.csv``."""
    with open(path, encoding="utf-8", errors="replace", newline="") as fh:
        reader = csv.reader(line for _, line in lines(path, fh))
        try:
            header = next(reader, [])
            for row in reader:
                where = f"line {reader.line_num}"
                if not row:
                    continue
                if len(row) != len(header):
                    raise LogFormatError(
                        path, where, f"{len(row)} fields where the header has {len(header)}"
                    )
                cells = {
                    k: _cell(path, where, k, c)
                    for k, c in zip(header, row, strict=True)
                    if k not in SKIPPED
                }
                yield _record(path, where, cells)
        except csv.Error as exc:
            raise LogFormatError(path, f"line {reader.line_num}", f"bad CSV: {exc}") from None
