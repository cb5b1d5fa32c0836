"""TRL / transformers ``trainer_state.json``: the ``log_history`` list (or a plain JSON list of
log dicts), streamed.

The file is one JSON document, so it cannot be read line by line. ``JsonStream`` reads it in
chunks and decodes one value at a time with ``json.JSONDecoder.raw_decode``: the top-level keys
other than ``log_history`` are decoded and dropped, and each ``log_history`` entry is yielded as
soon as it is complete, so memory stays at one entry plus one chunk however long the run (a
single value larger than ``MAX_VALUE`` characters is refused rather than read whole).

TRL writes a metric whose every value in the logging window was NaN (a reward function that
returned None for the whole batch, say) as ``null``: it is read back as NaN (``base.Nulls``, the
rule of every reader), so the exporter counts it in ``rl_nonfinite_values_total`` instead of
dropping it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from rlpulse.offline.logs.base import LogFormatError, Nulls, Record, as_step, flatten

CHUNK = 1 << 16
MAX_VALUE = 1 << 26  # characters of one JSON value (an entry, a top-level member)
_WS = " \t\r\n"
_NUMBER_CHARS = frozenset("0123456789.eE+-")


class JsonStream:
    """Incremental JSON tokens over a text file, with line numbers for errors."""

    def __init__(self, path: Path, fh: TextIO) -> None:
        self.path = path
        self._fh = fh
        self._buf = ""
        self._pos = 0
        self._line = 1  # line number at _pos
        self._eof = False
        self._decoder = json.JSONDecoder()

    @property
    def where(self) -> str:
        return f"line {self._line}"

    def error(self, problem: str, line: int | None = None) -> LogFormatError:
        return LogFormatError(self.path, f"line {line or self._line}", problem)

    def _more(self) -> bool:
        if self._eof:
            return False
        if self._pos > len(self._buf) // 2:
            self._buf, self._pos = self._buf[self._pos :], 0
        if len(self._buf) - self._pos > MAX_VALUE:
            raise self.error(f"one JSON value is longer than {MAX_VALUE} characters (not a log)")
        chunk = self._fh.read(max(CHUNK, len(self._buf)))
        self._eof = not chunk
        self._buf += chunk
        return bool(chunk)

    def _advance(self, end: int) -> None:
        self._line += self._buf.count("\n", self._pos, end)
        self._pos = end

    def peek(self) -> str:
        """The next non-blank character ('' at the end of the file)."""
        while True:
            end = self._pos
            while end < len(self._buf) and self._buf[end] in _WS:
                end += 1
            self._advance(end)
            if self._pos < len(self._buf) or not self._more():
                return self._buf[self._pos : self._pos + 1]

    def expect(self, chars: str) -> str:
        """Consume the next character, which must be one of ``chars``."""
        c = self.peek()
        if not c or c not in chars:
            found = repr(c) if c else "the end of the file (truncated?)"
            raise self.error(f"expected one of {' '.join(chars)} but found {found}")
        self._advance(self._pos + 1)
        return c

    def value(self) -> Any:
        """Decode the next complete JSON value."""
        self.peek()
        while True:
            try:
                obj, end = self._decoder.raw_decode(self._buf, self._pos)
            except RecursionError:
                raise self.error("JSON nested too deeply") from None
            except json.JSONDecodeError as exc:
                if self._more():
                    continue
                line = self._line + self._buf.count("\n", self._pos, exc.pos)
                problem = f"invalid JSON ({exc.msg})"
                if exc.pos >= len(self._buf.rstrip()):
                    problem = f"file ends inside a JSON value (truncated?): {exc.msg}"
                raise self.error(problem, line) from None
            # a number that reaches the end of the buffer may continue in the next chunk
            if not _number(obj) or _token_end(self._buf, end) < len(self._buf) or not self._more():
                self._advance(end)
                return obj

    def members(self) -> Iterator[str]:
        """The keys of the JSON object that starts here; the caller consumes each member's
        value (``value()``, ``array()``) before asking for the next key."""
        self.expect("{")
        if self.peek() == "}":
            self.expect("}")
            return
        while True:
            key = self.value()
            if not isinstance(key, str):
                raise self.error(f"object key {key!r} is not a string")
            self.expect(":")
            yield key
            if self.expect(",}") == "}":
                return

    def array(self) -> Iterator[tuple[str, Any]]:
        """(location, element) for each element of the JSON array that starts here."""
        self.expect("[")
        if self.peek() == "]":
            self.expect("]")
            return
        while True:
            self.peek()
            where = self.where
            yield where, self.value()
            if self.expect(",]") == "]":
                return


def _number(obj: object) -> bool:
    return isinstance(obj, int | float) and not isinstance(obj, bool)


def _token_end(buf: str, pos: int) -> int:
    while pos < len(buf) and buf[pos] in _NUMBER_CHARS:
        pos += 1
    return pos


def _entries(stream: JsonStream) -> Iterator[tuple[str, Any]]:
    first = stream.peek()
    if first == "[":
        yield from stream.array()
        return
    for key in stream.members():
        if key == "log_history":
            yield from stream.array()
            return
        stream.value()
    raise stream.error(
        "no 'log_history' in this trainer state; other JSON documents are read with --format "
        "sb3-eval-json ('training_history'), json-columns (an object of arrays) or dopamine (an "
        "array of {Iteration, Value, Agent})"
    )


def read_trl(path: Path) -> Iterator[Record]:
    """One record per ``log_history`` entry (the trainer's ``on_log`` dicts, eval ones too)."""
    nulls = Nulls()
    with open(path, encoding="utf-8", errors="replace") as fh:
        stream = JsonStream(path, fh)
        for where, entry in _entries(stream):
            if not isinstance(entry, dict):
                raise LogFormatError(
                    path, where, f"log entry is a {type(entry).__name__}, not an object"
                )
            step = as_step(entry.get("step"))
            if step is None:
                raise LogFormatError(
                    path, where, f"log entry has no integer 'step' ({entry.get('step')!r})"
                )
            row = {k: v for k, v in entry.items() if k != "step"}
            values = nulls(flatten(row), row)
            yield Record(step, None, values, where)
