"""TensorBoard event files (CleanRL, OpenRLHF, SB3's tensorboard logger, verl's tensorboard
backend, anything using a ``SummaryWriter``), decoded without TensorFlow.

An event file is a TFRecord stream of ``Event`` protos: ``wall_time`` (1, double), ``step``
(2, int64), ``summary`` (5) holding ``value`` entries with a ``tag`` (1) and either a
``simple_value`` (2, float) or a scalar ``tensor`` (8, TensorProto). Only scalars are kept.

``EventFileReader.poll()`` returns the records completed since the last poll, so a file still
being written can be followed; ``LogdirFollower`` does that for every event file under a
directory, including files that appear later (what ``rlpulse tail-tensorboard`` needs)."""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from pathlib import Path

from rlpulse.offline.logs.base import LogFormatError, Record
from rlpulse.offline.logs.protowire import FIXED32, FIXED64, ProtoError, fields, packed, signed64
from rlpulse.offline.logs.tfrecord import RecordReader

EVENT_GLOB = "*tfevents*"
# TensorFlow DataType -> (struct code for tensor_content, TensorProto field of typed values)
_DTYPES: dict[int, tuple[str, int, str]] = {
    1: ("f", 5, "f"),  # DT_FLOAT: float_val
    2: ("d", 6, "d"),  # DT_DOUBLE: double_val
    3: ("i", 7, "v"),  # DT_INT32: int_val
    9: ("q", 10, "v"),  # DT_INT64: int64_val
    10: ("?", 11, "v"),  # DT_BOOL: bool_val
    19: ("e", 13, "v"),  # DT_HALF: half_val (uint16 bits in an int32)
    14: ("bf16", 13, "v"),  # DT_BFLOAT16: half_val
}
_SCALAR_PLUGINS = {"", "scalars"}


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise ProtoError(0, "a string field holds a varint")
    return value.decode("utf-8", errors="replace")


def _bf16(bits: int) -> float:
    return float(struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0])


def _half(bits: int) -> float:
    return float(struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0])


def _tensor_scalar(buf: bytes) -> float | None:
    """The single number of a rank-0 (or one-element) numeric TensorProto, else None."""
    by_field: dict[int, list[tuple[int, int | bytes]]] = {}
    for number, wire, value in fields(buf):
        by_field.setdefault(number, []).append((wire, value))
    dtype = next((v for _w, v in by_field.get(1, []) if isinstance(v, int)), 0)
    dims = [
        next((signed64(s) for k, _x, s in fields(dim) if k == 1 and isinstance(s, int)), 0)
        for _w, shape in by_field.get(2, [])
        if isinstance(shape, bytes)
        for n, _wd, dim in fields(shape)
        if n == 2 and isinstance(dim, bytes)
    ]
    spec = _DTYPES.get(dtype)
    if spec is None or math.prod(dims) != 1:
        return None
    code, field, fmt = spec
    content = next((v for _w, v in by_field.get(4, []) if isinstance(v, bytes)), b"")
    if content:
        if code == "bf16":
            return _bf16(struct.unpack("<H", content)[0]) if len(content) == 2 else None
        if len(content) != struct.calcsize(code):
            return None
        return float(struct.unpack("<" + code, content)[0])
    typed = [x for wire, value in by_field.get(field, []) for x in packed(wire, value, fmt)]
    if len(typed) != 1:
        return None
    if code == "e":
        return _half(int(typed[0]))
    if code == "bf16":
        return _bf16(int(typed[0]))
    return float(typed[0])


def _plugin(buf: bytes) -> str:
    for number, _wire, value in fields(buf):  # SummaryMetadata.plugin_data
        if number == 1 and isinstance(value, bytes):
            for n, _w, name in fields(value):  # PluginData.plugin_name
                if n == 1:
                    return _text(name)
    return ""


def _summary_value(buf: bytes) -> tuple[str, float] | None:
    tag, simple, tensor, plugin = "", None, None, ""
    for number, wire, value in fields(buf):
        if number == 1 or (number == 7 and not tag):
            tag = _text(value)
        elif number == 2 and wire == FIXED32 and isinstance(value, bytes):
            simple = float(struct.unpack("<f", value)[0])
        elif number == 8 and isinstance(value, bytes):
            tensor = value
        elif number == 9 and isinstance(value, bytes):
            plugin = _plugin(value)
    if simple is None and tensor is not None and plugin in _SCALAR_PLUGINS:
        simple = _tensor_scalar(tensor)
    return (tag, simple) if tag and simple is not None else None


def decode_event(data: bytes) -> tuple[float, int, dict[str, float]]:
    """(wall_time, step, {tag: scalar}) of one serialized ``Event``."""
    wall_time, step, scalars = 0.0, 0, {}
    for number, wire, value in fields(data):
        if number == 1 and wire == FIXED64 and isinstance(value, bytes):
            wall_time = struct.unpack("<d", value)[0]
        elif number == 2 and isinstance(value, int):
            step = signed64(value)
        elif number == 5 and isinstance(value, bytes):
            for n, _w, entry in fields(value):
                if n == 1 and isinstance(entry, bytes):
                    found = _summary_value(entry)
                    if found is not None:
                        scalars[found[0]] = found[1]
    return wall_time, step, scalars


class EventFileReader:
    """Follows one event file: each ``poll()`` returns the scalars written since the last one.

    Consecutive events with the same step are merged into one record. A record cut off at the
    end of the file is left for the next poll (``pending`` > 0 says one is waiting)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._records = RecordReader(self.path)

    @property
    def pending(self) -> int:
        """Bytes of an incomplete record at the end of the file, as of the last poll."""
        return self._records.pending

    @property
    def offset(self) -> int:
        """Byte offset up to which the file has been read."""
        return self._records.offset

    def records(self) -> Iterator[Record]:
        """The records completed since the last read, streamed in file order."""
        held: Record | None = None
        for offset, data in self._records.read():
            try:
                wall_time, step, scalars = decode_event(data)
            except (ProtoError, struct.error, ValueError, OverflowError) as exc:
                raise LogFormatError(
                    self.path, f"byte {offset}", f"bad Event proto: {exc}"
                ) from None
            if not scalars:
                continue
            if held is not None and held.step == step:
                held.values.update(scalars)
                held = held._replace(timestamp=wall_time)
                continue
            if held is not None:
                yield held
            held = Record(step, wall_time, scalars, f"byte {offset}")
        if held is not None:
            yield held

    def poll(self) -> list[Record]:
        """The records completed since the last poll."""
        return list(self.records())


def event_files(path: Path) -> list[Path]:
    """The event files of one run: ``path`` itself, or those in the directory ``path`` (else
    in its one subdirectory that has any: SB3 writes ``PPO_1/``; ``add_hparams`` subdirectories
    beside top-level files are not the run)."""
    if not path.is_dir():
        return [path]
    files = sorted(p for p in path.glob(EVENT_GLOB) if p.is_file())
    if files:
        return files
    files = sorted(p for p in path.rglob(EVENT_GLOB) if p.is_file())
    if not files:
        raise LogFormatError(path, "directory", f"no TensorBoard event files ({EVENT_GLOB}) in it")
    parents = sorted({str(p.parent) for p in files})
    if len(parents) > 1:
        raise LogFormatError(
            path, "directory", f"event files of several runs ({', '.join(parents[:4])}); pass one"
        )
    return files


def read_tensorboard(path: Path) -> Iterator[Record]:
    """The scalars of a finished run (one event file, or a run directory of them, in name
    order). A record cut off at the end of a file is an error here, not a wait."""
    for file in event_files(Path(path)):
        reader = EventFileReader(file)
        yield from reader.records()
        if reader.pending:
            raise LogFormatError(
                file,
                f"byte {reader.offset}",
                f"truncated: the file ends {reader.pending} bytes into a record "
                "(writer killed, or still running: follow it instead)",
            )


class LogdirFollower:
    """Polls every event file under a log directory, picking up new files as they appear."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = Path(logdir)
        self._readers: dict[Path, EventFileReader] = {}

    def poll(self) -> list[tuple[Path, Record]]:
        """(event file, record) for everything written since the last poll."""
        for path in sorted(self.logdir.rglob(EVENT_GLOB)):
            if path.is_file() and path not in self._readers:
                self._readers[path] = EventFileReader(path)
        return [(path, rec) for path, reader in self._readers.items() for rec in reader.poll()]
