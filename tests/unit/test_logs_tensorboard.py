"""TensorBoard event files written by a real SummaryWriter (tensorboardX), read by rlpulse's own
TFRecord + protobuf decoder: values, tensor scalars, growing files, truncation, corruption."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest
from tensorboardX import SummaryWriter
from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboardX.proto.tensor_pb2 import TensorProto
from tensorboardX.proto.tensor_shape_pb2 import TensorShapeProto

from rlpulse.offline.logs import (
    EventFileReader,
    LogdirFollower,
    LogFormatError,
    detect_format,
    read_log,
)
from rlpulse.offline.logs.tfrecord import crc32c, frame, masked_crc

T = TypeVar("T")


def f32(x: float) -> float:
    return float(np.float32(x))


def event_file(logdir: Path) -> Path:
    (path,) = logdir.glob("events.out.tfevents.*")
    return path


def poll_until(poll: Callable[[], list[T]], count: int, timeout: float = 10.0) -> list[T]:
    """Poll until ``count`` items arrived: tensorboardX hands events to a writer thread, so a
    ``flush()`` can return before they reach the file; its thread flushes every ``flush_secs``."""
    got: list[T] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += poll()
        if len(got) < count:
            time.sleep(0.02)
    return got


def test_crc32c_reference_vector() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0
    framed = frame(b"abc")
    assert struct.unpack("<I", framed[8:12])[0] == masked_crc(framed[:8])


def test_summary_writer_scalars(tmp_path: Path) -> None:
    writer = SummaryWriter(str(tmp_path / "run"))
    for step in range(50):
        writer.add_scalar("charts/episodic_return", step * 1.5, step, walltime=1000.0 + step)
        writer.add_scalar("losses/approx_kl", 0.01 * step, step, walltime=1000.0 + step)
    writer.add_histogram("weights", np.arange(10.0), 3)
    writer.add_text("notes", "not a scalar", 3)
    writer.add_hparams({"lr": 0.1}, {"hparam/score": 1.0})  # its own subdirectory
    writer.close()
    run = tmp_path / "run"
    assert detect_format(run) == detect_format(event_file(run)) == "tensorboard"
    records = list(read_log(run))
    assert [r.step for r in records] == list(range(50))
    assert records[7].timestamp == 1007.0
    assert records[7].values == {"charts/episodic_return": 10.5, "losses/approx_kl": f32(0.07)}


def test_tensor_scalars(tmp_path: Path) -> None:
    """TF2-style scalars live in a TensorProto; only numeric one-element tensors are scalars."""
    scalars = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    hparams = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="hparams"))
    half = int(np.float16(1.5).view(np.uint16))

    def value(tag: str, tensor: TensorProto, md: SummaryMetadata = scalars) -> Summary.Value:
        return Summary.Value(tag=tag, metadata=md, tensor=tensor)

    writer = SummaryWriter(str(tmp_path))
    writer.file_writer.add_summary(
        Summary(
            value=[
                value(
                    "float_val",
                    TensorProto(dtype=1, float_val=[2.5], tensor_shape=TensorShapeProto()),
                ),
                value("content", TensorProto(dtype=1, tensor_content=np.float32(7.25).tobytes())),
                value("double", TensorProto(dtype=2, double_val=[1 / 3])),
                value("int64", TensorProto(dtype=9, int64_val=[-5])),
                value("half", TensorProto(dtype=19, half_val=[half])),
                value(
                    "vector",
                    TensorProto(
                        dtype=1,
                        float_val=[1, 2],
                        tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=2)]),
                    ),
                ),
                value("hparams", TensorProto(dtype=1, float_val=[0]), hparams),
                value("text", TensorProto(dtype=7, string_val=[b"hi"])),
            ]
        ),
        global_step=-3,
    )
    writer.close()
    (rec,) = read_log(event_file(tmp_path))
    assert rec.step == -3
    assert rec.values == {
        "float_val": 2.5,
        "content": 7.25,
        "double": 1 / 3,
        "int64": -5.0,
        "half": 1.5,
    }


def test_follow_a_file_while_it_grows(tmp_path: Path) -> None:
    writer = SummaryWriter(str(tmp_path), flush_secs=0.05)
    writer.add_scalar("loss", 1.0, 0)
    writer.flush()
    reader = EventFileReader(event_file(tmp_path))
    assert [(r.step, r.values) for r in poll_until(reader.poll, 1)] == [(0, {"loss": 1.0})]
    assert reader.poll() == []
    for step in (1, 2):
        writer.add_scalar("loss", 1.0 / (step + 1), step)
    writer.flush()
    got = poll_until(reader.poll, 2)
    assert [(r.step, r.values["loss"]) for r in got] == [(1, 0.5), (2, f32(1 / 3))]
    writer.close()
    assert reader.poll() == [] and reader.pending == 0


def test_truncated_last_record(tmp_path: Path) -> None:
    writer = SummaryWriter(str(tmp_path / "src"))
    for step in range(5):
        writer.add_scalar("reward", float(step), step)
    writer.close()
    data = event_file(tmp_path / "src").read_bytes()
    growing = tmp_path / "events.out.tfevents.1.host"
    growing.write_bytes(data[:-10])  # the writer is mid-record
    reader = EventFileReader(growing)
    assert [r.step for r in reader.poll()] == [0, 1, 2, 3]
    assert reader.pending > 0
    with pytest.raises(LogFormatError, match=rf"byte {reader.offset}: truncated"):
        list(read_log(growing))
    with open(growing, "ab") as fh:
        fh.write(data[-10:])
    assert [(r.step, r.values) for r in reader.poll()] == [(4, {"reward": 4.0})]
    assert reader.pending == 0


def test_corrupt_record_names_its_offset(tmp_path: Path) -> None:
    writer = SummaryWriter(str(tmp_path))
    for step in range(3):
        writer.add_scalar("reward", float(step), step)
    writer.close()
    path = event_file(tmp_path)
    offsets = [int(r.where.split()[1]) for r in read_log(path)]
    data = bytearray(path.read_bytes())
    data[offsets[1] + 14] ^= 0xFF  # inside the second scalar's data
    path.write_bytes(bytes(data))
    with pytest.raises(LogFormatError, match=rf"byte {offsets[1]}: record data fails its CRC"):
        list(read_log(path))
    data[offsets[1] + 2] ^= 0xFF  # and its length
    path.write_bytes(bytes(data))
    with pytest.raises(LogFormatError, match="record length fails its CRC"):
        list(read_log(path))


def test_logdir_follower_picks_up_new_runs(tmp_path: Path) -> None:
    follower = LogdirFollower(tmp_path)
    assert follower.poll() == []
    first = SummaryWriter(str(tmp_path / "run_a"), flush_secs=0.05)
    first.add_scalar("kl", 0.1, 1)
    first.flush()
    got = poll_until(follower.poll, 1)
    assert [(p.parent.name, r.values) for p, r in got] == [("run_a", {"kl": f32(0.1)})]
    second = SummaryWriter(str(tmp_path / "run_b"))
    second.add_scalar("kl", 0.2, 1)
    first.add_scalar("kl", 0.3, 2)
    second.close()
    first.close()
    got = sorted((p.parent.name, r.step) for p, r in follower.poll())
    assert got == [("run_a", 2), ("run_b", 1)]


def test_run_directory_with_several_runs_is_an_error(tmp_path: Path) -> None:
    for name in ("a", "b"):
        w = SummaryWriter(str(tmp_path / "runs" / name))
        w.add_scalar("x", 1.0, 0)
        w.close()
    with pytest.raises(LogFormatError, match="several runs"):
        list(read_log(tmp_path / "runs"))
    assert len(list(read_log(tmp_path / "runs" / "a"))) == 1


def _field(number: int, wire: int, payload: bytes) -> bytes:
    key = bytes([number << 3 | wire])
    return key + (bytes([len(payload)]) + payload if wire == 2 else payload)


@pytest.mark.parametrize(
    "value",
    [
        bytes([1 << 3 | 0, 5]) + _field(2, 5, b"\0\0\x80?"),  # tag as a varint
        _field(1, 2, b"t") + _field(8, 2, _field(1, 0, b"\x01") + _field(5, 1, b"\0" * 8)),
        _field(1, 2, b"t") + _field(8, 2, _field(1, 0, b"\x01") + _field(5, 2, b"\0" * 5)),
    ],
    ids=["tag-varint", "float-as-fixed64", "packed-odd-length"],
)
def test_crafted_event_protos_are_log_format_errors(tmp_path: Path, value: bytes) -> None:
    event = _field(1, 1, struct.pack("<d", 1.0)) + _field(5, 2, _field(1, 2, value))
    path = tmp_path / "events.out.tfevents.1.crafted"
    path.write_bytes(frame(event))
    with pytest.raises(LogFormatError, match=r"byte 0: bad Event proto"):
        list(read_log(path))
