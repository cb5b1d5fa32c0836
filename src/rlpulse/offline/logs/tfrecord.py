"""TFRecord framing, as TensorBoard event files use it, read incrementally.

Each record is ``uint64 length | uint32 masked_crc32c(length) | data | uint32
masked_crc32c(data)``, little-endian. ``RecordReader.read`` returns the records completed since
the last call and keeps the offset of an incomplete tail, so a file that is still being written
can be polled; ``pending`` tells how many bytes of such a tail are waiting."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

from rlpulse.offline.logs.base import LogFormatError

HEADER = 12
FOOTER = 4
MAX_RECORD = 1 << 30
READ_CHUNK = 1 << 22


def _table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum TFRecord uses."""
    table = _CRC_TABLE
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC: rotate right by 15 and add a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """``data`` framed as one TFRecord (for writers and tests)."""
    length = struct.pack("<Q", len(data))
    return (
        length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))
    )


def looks_like_tfrecord(head: bytes) -> bool:
    """Whether ``head`` starts with a valid TFRecord length header."""
    return len(head) >= HEADER and struct.unpack("<I", head[8:12])[0] == masked_crc(head[:8])


class RecordReader:
    """Polls one TFRecord file for newly completed records."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0  # start of the next unread record
        self.pending = 0  # bytes of an incomplete record after ``offset`` at the last read

    def read(self) -> Iterator[tuple[int, bytes]]:
        """(byte offset, data) of each record completed since the last read."""
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            buf = b""
            while True:
                chunk = fh.read(READ_CHUNK)
                buf += chunk
                pos = 0
                while len(buf) - pos >= HEADER:
                    head = buf[pos : pos + HEADER]
                    (length,) = struct.unpack("<Q", head[:8])
                    if struct.unpack("<I", head[8:])[0] != masked_crc(head[:8]):
                        raise LogFormatError(
                            self.path,
                            f"byte {self.offset}",
                            "record length fails its CRC (corrupt)",
                        )
                    if length > MAX_RECORD:
                        raise LogFormatError(
                            self.path,
                            f"byte {self.offset}",
                            f"record length {length} is implausible",
                        )
                    end = pos + HEADER + length + FOOTER
                    if len(buf) < end:
                        break
                    data = buf[pos + HEADER : end - FOOTER]
                    if struct.unpack("<I", buf[end - FOOTER : end])[0] != masked_crc(data):
                        raise LogFormatError(
                            self.path, f"byte {self.offset}", "record data fails its CRC (corrupt)"
                        )
                    start, self.offset = self.offset, self.offset + end - pos
                    pos = end
                    yield start, data
                buf = buf[pos:]
                if not chunk:
                    self.pending = len(buf)
                    return
