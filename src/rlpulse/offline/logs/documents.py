"""Whole-document JSON logs, streamed with ``JsonStream`` (one array element at a time):

* ``dopamine``: Dopamine's baseline data (``baselines/<suite>/data/<game>.json``), one array in
  long format, ``{"Iteration": i, "Value": v, "Agent": name}`` per row. The file has no seed
  column: the runs of one agent follow each other and are told apart only by ``Iteration``
  starting again, so each run becomes its own segment, ``<Agent> #<n>``. ``Value`` is the
  mean training-episode return of the iteration, what Dopamine's runner writes to TensorBoard
  as ``Train/AverageReturns``; the records carry it under that key.
* ``sb3-eval-json``: a Stable-Baselines3 run's evaluation history, ``{..summary scalars..,
  "training_history": [{"step", "mean_reward", "std_reward"}, ...]}``. Each entry is one
  ``evaluate_policy`` result and is read under EvalCallback's keys (``eval/mean_reward``,
  ``eval/std_reward``); the summary scalars describe the finished run, not a step, and are
  not replayed.
* ``json-columns``: one object of arrays, ``{"episode_rewards": [...], "eval_scores": [...]}``
  (what a hand-written loop dumps at the end). Arrays of one length are the columns of one
  table, a row per index (the step); arrays of another length are another series, logged at
  another cadence nobody wrote down, so each length is its own **segment** named by its keys
  rather than aligned by a guess. Top-level scalars describe the whole run and are not
  replayed; a ``null`` in an array is a non-finite value (``base.Nulls``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlpulse.offline.logs.base import LogFormatError, Nulls, Record, as_step, number
from rlpulse.offline.logs.trl import JsonStream

DOPAMINE_KEYS = ("Iteration", "Value", "Agent")
DOPAMINE_RETURN = "Train/AverageReturns"
SB3_HISTORY = "training_history"


def _entry(path: Path, where: str, entry: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(entry, dict) or not set(keys) <= set(entry):
        shown = sorted(entry)[:6] if isinstance(entry, dict) else type(entry).__name__
        raise LogFormatError(path, where, f"expected an object with {', '.join(keys)}; got {shown}")
    return entry


def _step(path: Path, where: str, raw: object) -> int:
    step = as_step(raw)
    if step is None:
        raise LogFormatError(path, where, f"step {raw!r} is not an integer")
    return step


def read_dopamine(path: Path) -> Iterator[Record]:
    """One record per (run, iteration); a run ends where ``Iteration`` stops increasing."""
    runs: dict[str, int] = {}  # agent -> runs seen
    last: tuple[str, int] | None = None
    nulls = Nulls()
    with open(path, encoding="utf-8", errors="replace") as fh:
        for where, raw in JsonStream(path, fh).array():
            entry = _entry(path, where, raw, DOPAMINE_KEYS)
            agent, step = str(entry["Agent"]), _step(path, where, entry["Iteration"])
            if last is None or last[0] != agent or step <= last[1]:
                runs[agent] = runs.get(agent, 0) + 1
            last = (agent, step)
            value = number(entry["Value"])
            values = {} if value is None else {DOPAMINE_RETURN: value}
            nulls(values, {DOPAMINE_RETURN: entry["Value"]})
            yield Record(step, None, values, where, segment=f"{agent} #{runs[agent]}")


def read_json_columns(path: Path) -> Iterator[Record]:
    """One record per index of each group of equally long arrays (a segment per length when
    the arrays differ in length, the longest first)."""
    columns: dict[str, list[Any]] = {}
    with open(path, encoding="utf-8", errors="replace") as fh:
        stream = JsonStream(path, fh)
        for key in stream.members():
            value = stream.value()
            if isinstance(value, list):
                columns[key] = value
    if not columns:
        raise LogFormatError(path, "start", "no array in this JSON object (json-columns)")
    lengths = sorted({len(v) for v in columns.values()}, reverse=True)
    for length in lengths:
        names = [k for k, v in columns.items() if len(v) == length]
        segment = "+".join(names) if len(lengths) > 1 else ""
        nulls = Nulls()
        for i in range(length):
            row = {k: columns[k][i] for k in names}
            values = {k: v for k, v in ((k, number(x)) for k, x in row.items()) if v is not None}
            yield Record(i, None, nulls(values, row), f"index {i}", segment=segment)


def read_sb3_eval_json(path: Path) -> Iterator[Record]:
    """One record per ``training_history`` entry, at its ``step`` (environment steps)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        stream = JsonStream(path, fh)
        found, nulls = False, Nulls()
        for key in stream.members():
            if key != SB3_HISTORY:
                stream.value()
                continue
            found = True
            for where, raw in stream.array():
                entry = _entry(path, where, raw, ("step",))
                row = {f"eval/{k}": x for k, x in entry.items() if k != "step"}
                values = {
                    k: v for k, v in ((k, number(x)) for k, x in row.items()) if v is not None
                }
                nulls(values, row)
                yield Record(_step(path, where, entry["step"]), None, values, where)
        if not found:
            raise stream.error(f"no {SB3_HISTORY!r} list in this document")
