"""verl's console logger output: ``step:N - key:value - key:value ...`` lines.

The metrics line may carry a prefix (Ray's ``(main_task pid=…)``, ANSI colours); every other
line of the log (warnings, samples, configs) is skipped. Values may be plain numbers or numpy
reprs such as ``np.float64(0.25)``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from rlpulse.offline.logs.base import LogFormatError, Record, lines, number

STEP_LINE = re.compile(r"(?<![\w/])step:(\d+) - (\S.*)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_WRAPPED = re.compile(r"^[A-Za-z_][\w.]*\((.*)\)$")  # np.float64(0.25), tensor(3.)


def metrics_line(line: str) -> tuple[int, str] | None:
    """(step, the ``key:value - …`` text) when ``line`` is a verl metrics line."""
    m = STEP_LINE.search(_ANSI.sub("", line).rstrip("\r\n"))
    return (int(m.group(1)), m.group(2)) if m else None


def _pairs(text: str, path: Path, where: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for pair in text.split(" - "):
        key, sep, raw = pair.strip().rpartition(":")
        wrapped = _WRAPPED.match(raw)
        v = number(wrapped.group(1) if wrapped else raw)
        if not sep or not key or v is None:
            raise LogFormatError(path, where, f"cannot read {pair.strip()!r} as key:number")
        values[key] = v
    return values


def read_verl_log(path: Path) -> Iterator[Record]:
    """One record per verl metrics line, streamed."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in lines(path, fh):
            found = metrics_line(line)
            if found is not None:
                where = f"line {lineno}"
                yield Record(found[0], None, _pairs(found[1], path, where), where)
