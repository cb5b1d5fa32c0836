"""Rollout sampling: the extremes are always kept, the reservoir is uniform, and memory and disk
stay within their bounds however many rollouts a run records."""

from __future__ import annotations

import gc
import threading

import numpy as np
import psutil
import pytest

from rlpulse.rollouts import Recorder, SamplingConfig
from rlpulse.rollouts.query import Filter, open_run, query
from rlpulse.rollouts.records import Columns
from rlpulse.rollouts.sampler import Sampler
from rlpulse.rollouts.store import file_bytes


def stored(rec: Recorder, **flt: object) -> list[dict]:
    assert rec.flush(30)
    conn = open_run(rec.run_id, rec.path.parent.parent)
    try:
        return query(conn, Filter(limit=10_000, **flt))  # type: ignore[arg-type]
    finally:
        conn.close()


def batch(n: int, rng: np.random.Generator, prefix: str) -> dict:
    """A batch whose two components agree (so disagreement is small) and nothing is flagged."""
    base = rng.uniform(0.2, 0.8, n)
    return {
        "rollout_ids": [f"{prefix}-{i}" for i in range(n)],
        "rewards": 2 * base,
        "components": {"correct": base.copy(), "format": base + rng.normal(0, 0.01, n)},
        "lengths": rng.integers(10, 500, n),
        "truncated": np.zeros(n, dtype=bool),
        "errors": [None] * n,
        "responses": ["ok"] * n,
    }


def test_extremes_are_kept_whatever_batch_they_arrive_in(tmp_path):
    rec = Recorder("extremes", data_dir=tmp_path, sampling=SamplingConfig(seed=1))
    rng = np.random.default_rng(0)
    planted = {}
    for b in range(20):  # one step arriving as 20 batches of 5,000
        cols = batch(5000, rng, f"b{b}")
        j = int(rng.integers(0, 5000))
        rid = cols["rollout_ids"][j]
        if b == 3:
            cols["rewards"][j] = 9.0
            planted["best"] = rid
        elif b == 7:
            cols["rewards"][j] = -9.0
            planted["worst"] = rid
        elif b == 11:
            cols["lengths"][j] = 100_000
            planted["longest"] = rid
        elif b == 2:
            cols["truncated"][j] = True
            planted["truncated"] = rid
        elif b == 5:
            cols["errors"][j] = "grader timed out"
            planted["error"] = rid
        elif b == 9:
            cols["components"]["format"][j] = np.nan
            planted["nonfinite"] = rid
        elif b == 13:
            cols["components"]["correct"][j] = 0.0  # wrong answer …
            cols["components"]["format"][j] = 1.0  # … paid for its format
            planted["disagreement"] = rid
        rec.record(step=4, **cols)
    rows = {r["rollout_id"]: r for r in stored(rec)}
    rec.close()
    for reason, rid in planted.items():
        assert rid in rows, f"{reason} rollout {rid} was not kept"
        assert reason in rows[rid]["kept_for"], (reason, rows[rid]["kept_for"])
    assert len(rows) <= SamplingConfig().rows_per_step
    assert rows[planted["nonfinite"]]["nonfinite"] == ["components.format"]
    assert np.isnan(rows[planted["nonfinite"]]["components"]["format"])


def test_every_step_keeps_its_own_extremes(tmp_path):
    rec = Recorder("steps", data_dir=tmp_path, sampling=SamplingConfig(seed=2))
    rng = np.random.default_rng(1)
    best = {}
    for step in range(30):
        cols = batch(1000, rng, f"s{step}")
        rec.record(step=step, **cols)
        best[step] = cols["rollout_ids"][int(np.argmax(cols["rewards"]))]
    by_id = {r["rollout_id"]: r for r in stored(rec)}
    rec.close()
    for step, rid in best.items():
        assert "best" in by_id[rid]["kept_for"] and by_id[rid]["step"] == step


def test_reservoir_is_uniform_across_batches():
    """Bottom-k of a uniform key: every rollout of a step is equally likely to be sampled,
    whether it came in the first batch or the last."""
    cfg = SamplingConfig(per_step=20, extremes=0, flagged=0, seed=3)
    sampler = Sampler(cfg)
    hits = np.zeros(10)
    for step in range(400):
        seqs = []
        for b in range(10):  # 10 batches of 50 rollouts
            cols = Columns.parse({"step": step, "rewards": np.zeros(50)})
            sel = sampler.select(cols, b * 50)
            seqs += [b * 50 + p for p in sel.keep]
        kept = {s for _, s in sampler._state(step).slots["sample"].items}
        assert len(kept) == 20 and kept <= set(seqs)
        for s in kept:
            hits[s // 50] += 1
    expected = 400 * 20 / 10
    chi2 = float(((hits - expected) ** 2 / expected).sum())
    assert chi2 < 27.9, (hits, chi2)  # 99.9th percentile of chi-square with 9 dof


def test_evicted_reservoir_rows_leave_the_store(tmp_path):
    cfg = SamplingConfig(per_step=5, extremes=0, flagged=0, seed=4)
    rec = Recorder("resample", data_dir=tmp_path, sampling=cfg)
    for b in range(50):
        rec.record(step=0, rollout_ids=[f"{b}-{i}" for i in range(100)], rewards=np.ones(100))
    rows = stored(rec)
    stats = rec.stats()
    rec.close()
    assert len(rows) == 5
    assert stats["evicted:resampled"] == stats["recorded"] - 5


def test_a_million_rollouts_stay_within_rows_bytes_and_memory(tmp_path):
    max_rows, max_bytes = 800, 1_000_000
    rec = Recorder("million", data_dir=tmp_path, max_rows=max_rows, max_bytes=max_bytes)
    rng = np.random.default_rng(5)
    n = 10_000
    prompts = [f"Question {i}: what is {i} times {i + 1}?" for i in range(n)]
    responses = [
        f"Let me think. {'step ' * (i % 80)} The answer is {i * (i + 1)}." for i in range(n)
    ]
    ids = [f"r{i}" for i in range(n)]
    proc = psutil.Process()
    rss0 = 0
    peak_disk = 0
    for b in range(100):
        rec.record(
            rollout_ids=ids,
            step=b,
            prompts=prompts,
            responses=responses,
            rewards=rng.random(n),
            components={"a": rng.random(n), "b": rng.random(n)},
            lengths=rng.integers(1, 4096, n),
            truncated=rng.random(n) < 0.05,
            tool_calls=[[{"tool": "calc", "ok": True}]] * n,
        )
        if b % 10 == 9:
            assert rec.flush(30)
            stats = rec.stats()
            assert stats["store_rows"] <= max_rows
            peak_disk = max(peak_disk, file_bytes(rec.path))
            if b == 19:
                gc.collect()
                rss0 = proc.memory_info().rss
    assert rec.flush(30)
    gc.collect()
    growth = proc.memory_info().rss - rss0
    stats = rec.stats()
    rows = stored(rec)
    assert len(rec._sampler._steps) <= rec.sampling.open_steps
    rec.close()
    assert stats["offered"] == 1_000_000
    assert stats["recorded"] > 2 * max_rows  # eviction really happened
    assert len(rows) == stats["store_rows"] <= max_rows
    assert sum(len(r["response"] or "") + len(r["prompt"] or "") for r in rows) < max_bytes
    # the file (with its WAL) stays near the payload bound: pages, indexes, a WAL ≤ bound/4
    assert peak_disk < 1.6 * max_bytes, peak_disk
    assert growth < 20 * 2**20, f"RSS grew {growth / 2**20:.1f} MiB over 800k rollouts"
    assert min(r["step"] for r in rows) > 50  # the oldest steps were the ones evicted


def test_threads_record_concurrently(tmp_path):
    rec = Recorder("threads", data_dir=tmp_path, sampling=SamplingConfig(seed=6), queue_size=4096)
    errors: list[BaseException] = []
    best: dict[tuple[int, int], str] = {}

    def worker(t: int) -> None:
        rng = np.random.default_rng(100 + t)
        try:
            for step in range(40):
                cols = batch(500, rng, f"t{t}-s{step}")
                rec.record(step=1000 * t + step, **cols)
                best[t, step] = cols["rollout_ids"][int(np.argmax(cols["rewards"]))]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    rows = stored(rec)
    stats = rec.stats()
    rec.close()
    assert not errors
    assert stats["offered"] == 8 * 40 * 500
    assert not any(k.startswith("dropped") for k in stats), stats
    ids = [r["rollout_id"] for r in rows]
    assert len(ids) == len(set(ids)) == stats["store_rows"]
    assert stats["recorded"] - stats.get("evicted:resampled", 0) == len(rows)
    assert set(best.values()) <= set(ids)


def test_bad_batches_are_counted_not_raised(tmp_path, caplog):
    rec = Recorder("bad", data_dir=tmp_path)
    assert rec.record(rewards=[1.0, 2.0], responses=["a"]) == []
    assert rec.record(rewards=["x", "y"]) == []
    assert rec.record(responses="not a column") == []
    assert rec.record(step=[1, 2, 3], rewards=[1.0, 2.0, 3.0], components=[1, 2, 3]) == []
    assert rec.record(rewards=[1.0, 2.0], group_ids={"a": 1, "b": 2}) == []  # a dict, not a column
    assert rec.record(rewards=[1.0, 2.0], prompts={"a", "b"}) == []  # unordered
    assert rec.stats()["dropped:invalid"] == 6
    assert "columns differ in length" in caplog.text
    assert "column 'group_ids' must be a sequence" in caplog.text
    assert "column 'prompts' must be a sequence" in caplog.text
    assert rec.record(rewards=[1.0, 2.0], responses=["a", "b"]) == [0, 1]
    rec.close()
    strict = Recorder("strict", data_dir=tmp_path, strict=True)
    with pytest.raises(ValueError, match="rewards"):
        strict.record(rewards=["x"])
    strict.close()


def test_bad_configuration_names_the_setting(tmp_path):
    with pytest.raises(ValueError, match="max_rows"):
        Recorder("cfg", data_dir=tmp_path, max_rows=0)
    with pytest.raises(ValueError, match="per_step"):
        SamplingConfig(per_step=-1)
    with pytest.raises(ValueError, match="redact"):
        Recorder("cfg", data_dir=tmp_path, redact="not callable")  # type: ignore[arg-type]


def test_a_component_with_no_finite_value_warns_nothing() -> None:
    """A reward component that is NaN for a whole batch (a grader that failed on every sample)
    printed numpy's "Mean of empty slice" RuntimeWarning into the trainer's output; the
    disagreement of the others is what it was."""
    import warnings

    from rlpulse.rollouts.sampler import _disagreement

    good = np.array([1.0, np.nan, 3.0, 2.0])
    other = np.array([0.5, 0.2, np.inf, 0.1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _disagreement([good, np.full(4, np.nan), other])
    assert np.allclose(got, [2.59755782, 0.0, 0.0, 0.98058068])
