"""Break-test regressions (issue 16, item 7): the rollout store on a small, really full
filesystem (a 4 MiB tmpfs) and two writers on one store."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlpulse.rollouts import Recorder, SamplingConfig
from rlpulse.rollouts.store import Batch, Counters, Writer, file_bytes

TEXT = "x" * 1500
SIZE = 4 * 2**20
RESERVE = 512 * 2**10


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (mounting needs root, as in CI; skipped where it is refused)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _record(rec: Recorder, step: int, n: int = 16) -> None:
    rec.record(
        step=step,
        rollout_ids=[f"{step}-{i}" for i in range(n)],
        rewards=[float(i) for i in range(n)],
        responses=[TEXT] * n,
    )


def test_a_store_larger_than_the_disk_leaves_the_trainer_its_reserve(small_disk: Path) -> None:
    rec = Recorder(
        "full",
        data_dir=small_disk,
        max_bytes=64 * 2**20,  # more than the disk holds
        min_free_bytes=RESERVE,
        sampling=SamplingConfig(per_step=16, seed=0),
    )
    for step in range(400):
        _record(rec, step)
        if step % 20 == 0:
            rec.flush()
    rec.flush()
    first = rec.stats()
    for step in range(400, 450):  # the store keeps recording new rollouts after that
        _record(rec, step)
    rec.flush()
    later = rec.stats()
    free = shutil.disk_usage(small_disk).free
    checkpoint = small_disk / "checkpoint.pt"
    checkpoint.write_bytes(b"\0" * (RESERVE // 2))  # the trainer's own write
    rec.close()
    print(f"\n4 MiB disk: {free} bytes free after the store filled it; {later}")
    assert first.get("dropped:disk_full", 0) > 0
    assert later["recorded"] > first["recorded"]
    assert free >= RESERVE // 2


def _write_together(writer: Writer, batches: list[Batch]) -> None:
    """Have the writer thread take ``batches`` in one transaction, as it does under load: it
    waits on its ``busy`` lock (with an empty batch) while they are queued."""
    with writer.busy:
        writer.submit(Batch([], [], []))
        while writer.queue.qsize():
            time.sleep(0.001)
        for batch in batches:
            assert writer.submit(batch)
    assert writer.flush()


def test_a_large_transaction_after_an_unchecked_wal_keeps_the_reserve(small_disk: Path) -> None:
    """The WAL not yet copied into the file is space a checkpoint will still take: a large
    transaction on top of it once filled the disk (1 run in 10 of the test above), and its
    rows were counted both recorded and dropped."""
    counters = Counters()
    writer = Writer(
        small_disk / "wal.sqlite",
        run_id="wal",
        session=1,
        rank=0,
        max_rows=10**6,
        max_bytes=64 * 2**20,
        queue_size=64,
        queue_bytes=2**30,
        timeout_s=2.0,
        page_limit=None,
        min_free_bytes=RESERVE,
        redact=None,
        counters=counters,
    )
    seq, lowest = 0, SIZE
    for group in (20, 9, 12, 17, 1, 15, 8):  # a WAL of 1.5 MB, then 17 batches at once
        batches = []
        for _ in range(group):
            rows = [{"rollout_id": str(seq + i), "step": 0, "response": TEXT} for i in range(16)]
            batches.append(Batch(rows, list(range(seq, seq + 16)), []))
            seq += 16
        _write_together(writer, batches)
        lowest = min(lowest, shutil.disk_usage(small_disk).free)
    writer.close()
    stats = counters.snapshot()
    dropped = sum(v for k, v in stats.items() if k.startswith("dropped:"))
    print(f"\nlowest free {lowest} bytes; {stats}")
    assert lowest >= RESERVE
    assert stats["recorded"] + dropped == seq  # each rollout stored or dropped, once


def _fill(path: Path) -> int:
    """Write zeros to ``path`` until the filesystem is full; bytes written."""
    written = 0
    with contextlib.suppress(OSError), open(path, "wb", buffering=0) as f:
        for size in (65536, 4096, 512):
            with contextlib.suppress(OSError):
                while True:
                    written += f.write(b"\0" * size)
    return written


def test_a_disk_filled_by_someone_else_does_not_wedge_the_store(small_disk: Path) -> None:
    rec = Recorder("wedge", data_dir=small_disk, max_bytes=2**20, min_free_bytes=0)
    for step in range(20):
        _record(rec, step)
    assert rec.flush()
    filler = small_disk / "filler"
    _fill(filler)
    with pytest.raises(OSError) as err:  # the disk really is full
        (small_disk / "probe").write_bytes(b"\0" * 8192)
    assert err.value.errno == errno.ENOSPC
    for step in range(20, 40):
        _record(rec, step)
    rec.flush()
    full = rec.stats()
    filler.unlink()
    for step in range(40, 60):
        _record(rec, step)
    rec.flush()
    after = rec.stats()
    rec.close()
    print(f"\nwhile full: {full}\nafter the filler went: {after}")
    assert full.get("evicted:disk_full", 0) > 0  # eviction ran on the full disk
    assert after["recorded"] > full["recorded"]


def test_two_writers_on_one_store_stay_within_the_bound(tmp_path: Path) -> None:
    max_bytes = 2**20
    recs = [
        Recorder("two", data_dir=tmp_path, max_bytes=max_bytes, queue_size=256) for _ in range(2)
    ]
    peak, stop = [0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], file_bytes(recs[0].path))
            time.sleep(0.005)

    def write(rec: Recorder, k: int) -> None:
        for step in range(150):
            rec.record(
                step=step,
                rollout_ids=[f"{k}-{step}-{i}" for i in range(16)],
                rewards=[float(i) for i in range(16)],
                responses=[f"{k}{step}{i} " * 60 for i in range(16)],
            )
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    writers = [threading.Thread(target=write, args=(r, k)) for k, r in enumerate(recs)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    for r in recs:
        assert r.flush()
    stop.set()
    watcher.join()
    at_rest = file_bytes(recs[0].path)
    for r in recs:
        r.close()
    print(
        f"\ntwo writers, max_bytes 1 MiB: peak {peak[0] / max_bytes:.1f}x, "
        f"at rest {at_rest / max_bytes:.2f}x"
    )
    assert at_rest < 1.6 * max_bytes
    assert peak[0] < 4 * max_bytes
    assert os.path.exists(f"{recs[0].path}-lock")
