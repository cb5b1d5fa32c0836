"""The rollout store under faults (full disk, locked file, unwritable directory), redaction,
and sharing one run file across restarts and ranks."""

from __future__ import annotations

import sqlite3

import numpy as np

from rlpulse.rollouts import Recorder, SamplingConfig, default_data_dir, list_runs, run_file
from rlpulse.rollouts.query import Filter, open_run, query

KEEP_ALL = SamplingConfig(per_step=1000, seed=0)


def rows(data_dir, run_id: str) -> list[dict]:
    conn = open_run(run_id, data_dir)
    try:
        return query(conn, Filter(limit=10_000))
    finally:
        conn.close()


def texts(n: int, size: int, tag: str) -> dict:
    return {
        "rollout_ids": [f"{tag}-{i}" for i in range(n)],
        "rewards": np.arange(n, dtype=float),
        "responses": [f"{tag} " + "x" * size] * n,
    }


def file_text(path) -> bytes:
    out = b""
    for p in (path, path.with_name(path.name + "-wal")):
        if p.exists():
            out += p.read_bytes()
    return out


def test_full_disk_is_counted_and_training_continues(tmp_path):
    """A page limit makes SQLite report SQLITE_FULL exactly as a full disk does."""
    rec = Recorder("full", data_dir=tmp_path, sampling=KEEP_ALL, page_limit=64)  # 256 KiB
    for step in range(30):
        rec.record(step=step, **texts(10, 3000, f"s{step}"))
        assert rec.flush(30)
    stats = rec.stats()
    kept = rows(tmp_path, "full")
    rec.close()
    assert stats["dropped:disk_full"] > 0
    assert stats["evicted:disk_full"] > 0  # room was made for later batches …
    assert {r["step"] for r in kept} & set(range(25, 30))  # … so the newest steps got in
    assert run_file("full", tmp_path).stat().st_size <= 64 * 4096


def test_locked_file_is_counted_and_recording_resumes(tmp_path):
    rec = Recorder("locked", data_dir=tmp_path, sampling=KEEP_ALL, lock_timeout_s=5.0)
    rec.record(step=0, **texts(5, 10, "before"))
    assert rec.flush(30)
    other = sqlite3.connect(rec.path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        rec.record(step=1, **texts(5, 10, "during"))
        # record() returned while the writer still waits out the 5 s lock: it never waits itself
        assert rec.stats().get("dropped:locked", 0) == 0
        assert rec.flush(30)
        assert rec.stats()["dropped:locked"] == 5
    finally:
        other.execute("ROLLBACK")
        other.close()
    rec.record(step=2, **texts(5, 10, "after"))
    assert rec.flush(30)
    ids = {r["rollout_id"] for r in rows(tmp_path, "locked")}
    rec.close()
    assert {f"before-{i}" for i in range(5)} <= ids
    assert {f"after-{i}" for i in range(5)} <= ids
    assert not any(i.startswith("during") for i in ids)


def test_unwritable_data_dir_is_counted(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    rec = Recorder("nowhere", data_dir=blocker, sampling=KEEP_ALL)
    rec.record(step=0, **texts(3, 10, "a"))
    assert rec.flush(30)
    assert rec.stats()["dropped:store_error"] == 3
    rec.close()


def test_queue_full_drops_and_counts(tmp_path):
    """A writer stuck behind a lock: the bounded queue fills, record() drops instead of waiting."""
    rec = Recorder("q", data_dir=tmp_path, sampling=KEEP_ALL, queue_size=2, lock_timeout_s=10)
    rec.record(step=0, **texts(2, 10, "first"))
    assert rec.flush(30)
    other = sqlite3.connect(rec.path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    for step in range(1, 8):
        rec.record(step=step, **texts(2, 10, f"s{step}"))
    # every call returned while the writer is still stuck behind the lock: none waited for it
    assert rec.stats()["recorded"] == 2
    other.execute("ROLLBACK")
    other.close()
    assert rec.flush(30)
    stats = rec.stats()
    rec.close()
    # a batch or two taken by the writer (as the lock found it), 2 queued: the rest dropped,
    # and every rollout is either recorded or counted
    assert stats["dropped:queue_full"] >= 2 * 3
    assert stats["recorded"] == 2 * 8 - stats["dropped:queue_full"]
    small = Recorder("q2", data_dir=tmp_path, sampling=KEEP_ALL, queue_bytes=50_000)
    assert len(small.record(step=0, **texts(10, 10_000, "big"))) == 10  # 100 kB > 50 kB
    assert small.flush(30)
    assert small.stats()["dropped:queue_full"] == 10
    small.close()


def test_redaction_runs_before_anything_is_stored(tmp_path):
    secret = "sk-live-7f3a9c1e5b"

    def redact(row: dict) -> dict | None:
        if "DROP-ME" in (row["response"] or ""):
            return None
        if "EXPLODE" in (row["response"] or ""):
            raise RuntimeError("hook bug")
        row["prompt"] = row["prompt"].replace(secret, "[key]")
        row["metadata"] = {k: v for k, v in row["metadata"].items() if k != "api_key"}
        row["tool_calls"] = [{**c, "args": "[redacted]"} for c in row["tool_calls"]]
        return row

    rec = Recorder("redact", data_dir=tmp_path, sampling=KEEP_ALL, redact=redact)
    rec.record(
        step=0,
        rollout_ids=["a", "b", "c"],
        prompts=[f"use key {secret}", "p", f"again {secret}"],
        responses=["fine", "DROP-ME", f"EXPLODE {secret}"],
        rewards=[1.0, 0.0, 0.5],
        tool_calls=[[{"tool": "http", "args": secret}]] * 3,
        metadata=[{"api_key": secret, "env": "web"}] * 3,
    )
    assert rec.flush(30)
    stats = rec.stats()
    rec.close()
    stored = rows(tmp_path, "redact")
    assert [r["rollout_id"] for r in stored] == ["a"]
    assert stored[0]["prompt"] == "use key [key]"
    assert stored[0]["metadata"] == {"env": "web"}
    assert stored[0]["tool_calls"] == [{"tool": "http", "args": "[redacted]"}]
    assert stats["dropped:redacted"] == 1 and stats["dropped:redact_error"] == 1
    assert secret.encode() not in file_text(run_file("redact", tmp_path))


def test_restarts_and_ranks_share_one_run_file(tmp_path):
    first = Recorder("shared", data_dir=tmp_path, sampling=KEEP_ALL, rank=0)
    second = Recorder("shared", data_dir=tmp_path, sampling=KEEP_ALL, rank=1)
    first.record(step=0, rollout_ids=["x", "y"], rewards=[1.0, 2.0])
    assert first.flush(30)  # rank 0's rows are the older ones
    second.record(step=0, rollout_ids=["x", "z"], rewards=[3.0, 4.0])
    first.close()
    second.close()
    again = Recorder("shared", data_dir=tmp_path, sampling=KEEP_ALL, max_rows=4)
    again.record(step=1, rollout_ids=["w"], rewards=[5.0])
    again.close()
    stored = rows(tmp_path, "shared")
    assert sorted((r["rank"], r["rollout_id"]) for r in stored) == [
        (0, "w"),
        (0, "y"),
        (1, "x"),
        (1, "z"),
    ]  # max_rows=4 across processes: the oldest ("x" of rank 0) went first
    assert list_runs(tmp_path) == ["shared"]


def test_data_dir_from_environment_and_odd_run_ids(tmp_path, monkeypatch):
    monkeypatch.setenv("RLPULSE_DATA_DIR", str(tmp_path / "env"))
    assert default_data_dir() == tmp_path / "env"
    odd = "../exp 1/ränk:0..%"
    path = run_file(odd)
    assert path.parent == tmp_path / "env" / "rollouts"
    rec = Recorder(odd, sampling=KEEP_ALL)
    rec.record(rewards=[1.0])
    rec.close()
    assert list_runs() == [odd]
    assert [r["reward"] for r in rows(None, odd)] == [1.0]
    monkeypatch.delenv("RLPULSE_DATA_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_data_dir() == tmp_path / "xdg" / "rlpulse"
