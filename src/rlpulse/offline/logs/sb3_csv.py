"""Stable-Baselines3 CSV logs, streamed row by row.

* ``monitor.csv`` (SB3 ``Monitor`` / baselines ``bench``): a ``#{"t_start": …}`` JSON line, then
  ``r,l,t`` (+ info keywords) per finished episode. Records are episodes: step = environment
  steps so far, timestamp = ``t_start + t``.
* ``progress.csv`` (SB3 / OpenAI-baselines ``CSVOutputFormat``): a header of logger keys, one row
  per dump; empty cells are keys absent from that dump. Step = the update counter
  (``train/n_updates``, baselines' ``nupdates``) when the file has one, as the live SB3
  callback passes it (the step drives ``rl_train_steps_total``); a row before the
  first update has step 0. Else the total-timesteps column, else the row index. Timestamp = the
  elapsed-time column when there is one.

* a run directory (``sb3-run``): the ``progress.csv`` that ``configure(folder, ["csv"])`` writes
  and the ``Monitor`` files beside it (``monitor.csv``, ``0.monitor.csv`` …: ``Monitor(env,
  folder)``, ``make_vec_env(monitor_dir=folder)``), read as the live SB3 callback sees the run:
  each episode as it ends, at the update counter of the last row dumped before it, between the
  rows. An episode's place is its env step: its env's steps so far times the number of envs
  (a ``VecEnv`` steps them together), against the rows' ``time/total_timesteps``.

Lines are read at most ``MAX_LINE`` characters at a time; a CSV error (a field over the csv
module's limit) is a ``LogFormatError`` naming the line.
"""

from __future__ import annotations

import csv
import heapq
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from rlpulse.offline.logs.base import LogFormatError, Record, as_step, lines, number

UPDATE_COLUMNS = ("train/n_updates", "misc/nupdates", "nupdates")
STEP_COLUMNS = ("time/total_timesteps", "total_timesteps", "misc/total_timesteps", "TimestepsSoFar")
TIME_COLUMNS = ("time/time_elapsed", "time_elapsed", "TimeElapsed", "misc/time_elapsed")
_BOOLS = {"True": 1.0, "False": 0.0, "true": 1.0, "false": 0.0}


def read_sb3_csv(path: Path) -> Iterator[Record]:
    """Episodes of a Monitor file or rows of a progress file, whichever ``path`` is."""
    with open(path, encoding="utf-8", errors="replace", newline="") as fh:
        first = _line(path, fh, 1)
        if first.startswith("#"):
            yield from _monitor(path, fh, first)
        else:
            yield from _progress(path, fh, first)


def _line(path: Path, fh: TextIO, lineno: int) -> str:
    return next(lines(path, fh, lineno), (lineno, ""))[1]


def _header(path: Path, line: str, lineno: int) -> list[str]:
    try:
        return next(csv.reader([line]), [])
    except csv.Error as exc:
        raise LogFormatError(path, f"line {lineno}", f"bad CSV header: {exc}") from None


def _rows(
    path: Path, fh: TextIO, header: list[str], offset: int
) -> Iterator[tuple[int, list[str]]]:
    reader = csv.reader(line for _, line in lines(path, fh, offset + 1))
    rows = iter(reader)
    while True:
        try:
            row = next(rows, None)
        except csv.Error as exc:
            raise LogFormatError(
                path, f"line {reader.line_num + offset}", f"bad CSV: {exc}"
            ) from None
        if row is None:
            return
        lineno = reader.line_num + offset
        if not row:
            continue
        if len(row) != len(header):
            raise LogFormatError(
                path,
                f"line {lineno}",
                f"{len(row)} fields where the header has {len(header)} (truncated or malformed)",
            )
        yield lineno, row


def _monitor_start(path: Path, first: str) -> float:
    """The ``t_start`` of a Monitor file's first line."""
    try:
        return float(json.loads(first[1:]).get("t_start", 0.0))
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        raise LogFormatError(
            path, "line 1", "monitor header is not '#{\"t_start\": …}' JSON"
        ) from None


def _monitor(path: Path, fh: TextIO, first: str) -> Iterator[Record]:
    t_start = _monitor_start(path, first)
    header = _header(path, _line(path, fh, 2), 2)
    if not {"r", "l"} <= set(header):
        raise LogFormatError(path, "line 2", f"monitor columns {header} lack 'r' and 'l'")
    steps = 0
    for lineno, row in _rows(path, fh, header, 2):
        values: dict[str, float] = {}
        for name, cell in zip(header, row, strict=True):
            v = _BOOLS.get(cell, number(cell))
            if v is not None:
                values[name] = v
        if "r" not in values or "l" not in values:
            raise LogFormatError(path, f"line {lineno}", f"episode row {row} has no numeric r, l")
        steps += int(values["l"])
        t = values.pop("t", None)
        yield Record(steps, None if t is None else t_start + t, values, f"line {lineno}", "episode")


def _progress(path: Path, fh: TextIO, first: str) -> Iterator[Record]:
    header = _header(path, first, 1)
    if not header:
        raise LogFormatError(path, "line 1", "empty CSV header")
    update_col = next((c for c in UPDATE_COLUMNS if c in header), None)
    step_col = update_col or next((c for c in STEP_COLUMNS if c in header), None)
    time_col = next((c for c in TIME_COLUMNS if c in header), None)
    step = 0
    for index, (lineno, row) in enumerate(_rows(path, fh, header, 1)):
        values = {}
        for name, cell in zip(header, row, strict=True):
            v = number(cell)
            if v is not None:
                values[name] = v
        if step_col is None:
            step = index
        elif step_col in values:
            parsed = as_step(values[step_col])
            if parsed is None:
                raise LogFormatError(path, f"line {lineno}", f"{step_col} is not an integer")
            step = parsed
        elif update_col is None:
            step = index
        ts = values.get(time_col) if time_col else None
        yield Record(step, ts, values, f"line {lineno}")


PROGRESS = "progress.csv"
MONITOR_GLOB = "*monitor.csv"


def is_sb3_run(path: Path) -> bool:
    """Whether the directory ``path`` is an SB3 run's log folder (it holds ``progress.csv``)."""
    return (path / PROGRESS).is_file()


def read_sb3_run(path: Path) -> Iterator[Record]:
    """The rows of ``path/progress.csv`` with the episodes of the Monitor files beside it, all
    on the rows' clock: a row's time is seconds since training began (``time_elapsed``), an
    episode's the Unix time it ended, so an episode's is taken from the earliest Monitor's
    ``t_start`` (the envs are made just before training; a first episode that ended after the
    first row read as a jump of decades, and the replay as a stall)."""
    monitors = sorted(p for p in path.glob(MONITOR_GLOB) if p.is_file())
    rows = read_sb3_csv(path / PROGRESS)
    if not monitors:
        yield from rows
        return
    origin = min(_t_start(m) for m in monitors)
    envs = len(monitors)
    episodes = heapq.merge(
        *(((rec.step * envs, n, rec) for rec in read_sb3_csv(m)) for n, m in enumerate(monitors)),
        key=lambda item: item[:2],
    )
    pending = next(episodes, None)
    step = 0
    for row in rows:
        done = row.values.get(STEP_COLUMNS[0])
        if done is None:
            raise LogFormatError(
                path / PROGRESS, row.where, f"no {STEP_COLUMNS[0]} to place the episodes by"
            )
        while pending is not None and pending[0] <= done:
            yield _on_rows_clock(pending[2], step, origin)
            pending = next(episodes, None)
        step = row.step
        yield row
    while pending is not None:
        yield _on_rows_clock(pending[2], step, origin)
        pending = next(episodes, None)


def _on_rows_clock(episode: Record, step: int, origin: float) -> Record:
    """An episode at the rows' ``step``, its time in seconds since ``origin``."""
    ts = episode.timestamp
    return episode._replace(step=step, timestamp=None if ts is None else ts - origin)


def _t_start(monitor: Path) -> float:
    """A Monitor file's ``t_start``."""
    with open(monitor, encoding="utf-8", errors="replace") as fh:
        return _monitor_start(monitor, _line(monitor, fh, 1))
