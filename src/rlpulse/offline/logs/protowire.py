"""A minimal protocol-buffers wire-format reader: enough to walk messages field by field.

Each field comes back as (number, wire type, value): an int for varints, raw bytes for the
fixed 32/64-bit and length-delimited types; the caller knows which proto type a field has."""

from __future__ import annotations

import struct
from collections.abc import Iterator

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5


class ProtoError(ValueError):
    """Bytes that are not a well-formed protobuf message; ``offset`` is within the message."""

    def __init__(self, offset: int, problem: str) -> None:
        super().__init__(f"{problem} at message offset {offset}")
        self.offset = offset


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    if pos < len(buf) and buf[pos] < 0x80:  # the common one-byte case
        return buf[pos], pos + 1
    result = shift = 0
    start = pos
    while True:
        if pos >= len(buf):
            raise ProtoError(start, "varint runs past the end")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtoError(start, "varint longer than 10 bytes")


def signed64(value: int) -> int:
    """A varint read as a two's-complement int64."""
    return value - (1 << 64) if value >= 1 << 63 else value


def fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) for each field of one message."""
    pos, end = 0, len(buf)
    while pos < end:
        start = pos
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtoError(start, "field number 0")
        value: int | bytes
        if wire == VARINT:
            value, pos = varint(buf, pos)
        elif wire == FIXED64:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == FIXED32:
            value, pos = buf[pos : pos + 4], pos + 4
        elif wire == LENGTH:
            size, pos = varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        else:
            raise ProtoError(start, f"unsupported wire type {wire} (field {number})")
        if pos > end:
            raise ProtoError(start, f"field {number} runs past the end of the message")
        yield number, wire, value


def packed(wire: int, value: int | bytes, fmt: str) -> list[float]:
    """The numbers of a repeated scalar field, packed (length-delimited) or not.

    ``fmt`` is a struct code for fixed-size types (``f``, ``d``) or ``v`` for varints."""
    if wire != LENGTH:
        if fmt == "v" and isinstance(value, int):
            return [float(signed64(value))]
        if fmt != "v" and isinstance(value, bytes) and len(value) == struct.calcsize(fmt):
            return [struct.unpack("<" + fmt, value)[0]]
        raise ProtoError(0, f"wire type {wire} does not hold {fmt!r} values")
    if not isinstance(value, bytes):
        raise ProtoError(0, "packed field is not length-delimited")
    if fmt != "v":
        size = struct.calcsize(fmt)
        if len(value) % size:
            raise ProtoError(0, f"packed field of {len(value)} bytes is not a multiple of {size}")
        return list(struct.unpack(f"<{len(value) // size}{fmt}", value))
    out, pos = [], 0
    while pos < len(value):
        v, pos = varint(value, pos)
        out.append(float(signed64(v)))
    return out
