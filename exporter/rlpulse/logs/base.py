"""What every log parser yields, and the error a bad log raises."""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

Kind = Literal["metrics", "episode"]


class Record(NamedTuple):
    """One logged row: the trainer's step, its wall time if the log has one, and its numbers.

    ``kind`` is ``"episode"`` for per-episode rows (SB3 Monitor: ``values`` holds ``r`` and
    ``l``), ``"metrics"`` for a trainer's metrics dict. ``where`` locates the row in its file
    (``"line 12"``, ``"byte 4096"``) for reports and errors.
    """

    step: int
    timestamp: float | None
    values: dict[str, float]
    where: str = ""
    kind: Kind = "metrics"


class LogFormatError(ValueError):
    """A malformed or truncated log; the message names the file and the line or byte offset."""

    def __init__(self, path: object, where: str, problem: str) -> None:
        super().__init__(f"{path}: {where}: {problem}")
        self.path = str(path)
        self.where = where
        self.problem = problem


def number(value: object) -> float | None:
    """A logged value as a float, or None when it is not a number (strings, lists, bools)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
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


def flatten(obj: dict[str, object], prefix: str = "") -> dict[str, float]:
    """The numeric leaves of a nested dict, with keys joined by ``/`` (W&B / verl style)."""
    out: dict[str, float] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}/"))
            continue
        v = number(value) if not isinstance(value, str) else None
        if v is not None:
            out[name] = v
    return out
