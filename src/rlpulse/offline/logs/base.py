"""What every log parser yields, and the error a bad log raises."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Literal, NamedTuple, TextIO

from rlpulse.runtime.coerce import int_float

Kind = Literal["metrics", "episode"]


class Record(NamedTuple):
    """One logged row: the trainer's step, its wall time if the log has one, and its numbers.

    ``kind`` is ``"episode"`` for per-episode rows (SB3 Monitor: ``values`` holds ``r`` and
    ``l``), ``"metrics"`` for a trainer's metrics dict. ``where`` locates the row in its file
    (``"line 12"``, ``"byte 4096"``) for reports and errors. ``segment`` names the run a row
    belongs to when one file holds several (Dopamine's seeds, a digest's environments); ``""``
    for a file of one run.
    """

    step: int
    timestamp: float | None
    values: dict[str, float]
    where: str = ""
    kind: Kind = "metrics"
    segment: str = ""


class LogFormatError(ValueError):
    """A malformed or truncated log; the message names the file and the line or byte offset."""

    def __init__(self, path: object, where: str, problem: str) -> None:
        super().__init__(f"{path}: {where}: {problem}")
        self.path = str(path)
        self.where = where
        self.problem = problem


def nan_if_none(value: object) -> object:
    """One sample's ``None`` (a reward function that could not score it) as NaN; anything
    else as it is. Metrics dicts go through ``Nulls``."""
    return math.nan if value is None else value


class Nulls:
    """One log's rule for ``null``, the same in every reader and integration: a null is a
    non-finite value (what most JSON writers make of a NaN: verl's file logger, TRL's all-NaN
    metrics, ``json.dumps`` workarounds) unless its key held a non-number (text, a flag, a list)
    before, where it only means "no value"."""

    def __init__(self) -> None:
        self.text: set[str] = set()

    def __call__(
        self, values: dict[str, float], obj: dict[str, object], prefix: str = ""
    ) -> dict[str, float]:
        """``values`` (``flatten(obj)``, which skips nulls) with the nulls of ``obj`` added as
        NaN under their ``/``-joined keys, but for keys that held a non-number before."""
        for key, value in obj.items():
            name = f"{prefix}{key}"
            if isinstance(value, dict):
                self(values, value, f"{name}/")
            elif value is None:
                if name not in self.text:
                    values[name] = math.nan
            elif name not in values:
                self.text.add(name)
        return values


def number(value: object) -> float | None:
    """A logged value as a float, or None when it is not a number (strings, lists, bools)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return int_float(value)  # a 401-digit literal is ±inf, not an error
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def as_step(value: object) -> int | None:
    """A step as an int (``12``, ``12.0``, ``"12"``); None when it is not a whole number."""
    v = number(value)
    if v is None or not math.isfinite(v) or v != int(v):
        return None
    return int(v)


MAX_DEPTH = 32  # nesting of a metrics dict; deeper is not a trainer's metrics
MAX_LINE = 1 << 24  # characters of one line of a text log


def flatten(obj: dict[str, object], prefix: str = "", depth: int = 0) -> dict[str, float]:
    """The numeric leaves of a nested dict, with keys joined by ``/`` (W&B / verl style).

    Raises ValueError for dicts nested deeper than ``MAX_DEPTH``."""
    if depth > MAX_DEPTH:
        raise ValueError(f"metrics nested more than {MAX_DEPTH} levels deep")
    out: dict[str, float] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}/", depth + 1))
            continue
        v = number(value) if not isinstance(value, str) else None
        if v is not None:
            out[name] = v
    return out


def flat(path: object, where: str, obj: dict[str, object]) -> dict[str, float]:
    """``flatten(obj)``, a too-deep dict reported as a ``LogFormatError`` at ``where``."""
    try:
        return flatten(obj)
    except ValueError as exc:
        raise LogFormatError(path, where, str(exc)) from None


def lines(path: object, fh: TextIO, first: int = 1) -> Iterator[tuple[int, str]]:
    """(line number, line) of a text log from its current position (line ``first``), each line
    read at most ``MAX_LINE`` characters at a time: a longer line (a huge one-line file) is
    refused without being read whole."""
    lineno = first - 1
    while True:
        line = fh.readline(MAX_LINE + 1)
        if not line:
            return
        lineno += 1
        if len(line) > MAX_LINE:
            raise LogFormatError(
                path, f"line {lineno}", f"line longer than {MAX_LINE} characters (not a log)"
            )
        yield lineno, line
