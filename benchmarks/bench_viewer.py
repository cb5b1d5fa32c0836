"""How fast the rollout viewer answers a page of 100 rollouts from a large store.

    python benchmarks/bench_viewer.py [--gib 1.0] [--dir DIR] [--repeat 7]

Builds (once; ``--dir`` keeps it for the next run) one run's store of about ``--gib`` GiB with the
store's own schema and row encoding: GRPO-style rows of ~4 KiB of prompt and response, 3 reward
components, 64 rollouts per step. Then asks a real ``rlpulse rollouts serve`` over HTTP for the
pages the links open, each with 100 rollouts, and prints the median wall time per page, its ratio
to the 200 ms budget, and the page's size. Timings are measurements, not assertions.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from rlpulse.rollouts.paths import run_file
from rlpulse.rollouts.server import serve
from rlpulse.rollouts.store import connect, encode, file_bytes

RUN = "bench-1gib"
BUDGET_S = 0.2
PER_STEP = 64
TEXT = 4096  # characters of prompt + response per row


def build(data_dir: Path, gib: float) -> Path:
    """The run's store, written directly (a bulk load, not the sampled recorder path)."""
    path = run_file(RUN, data_dir)
    if path.exists() and path.stat().st_size >= gib * 2**30:
        return path
    path.unlink(missing_ok=True)
    conn = connect(path, 30.0, 64 * 2**20)
    conn.execute("INSERT OR IGNORE INTO run VALUES ('run_id', ?), ('schema', '1')", (RUN,))
    rng = np.random.default_rng(0)
    filler = "".join(rng.choice(list("abcdefghij klmnop"), TEXT).tolist())
    seq, step = 0, 0
    while path.stat().st_size < gib * 2**30:
        rows = []
        for i in range(PER_STEP):
            correct, fmt = float(rng.integers(0, 2)), float(rng.random())
            row = {
                "rollout_id": f"s{step}-{i}",
                "step": step,
                "group_id": f"{step}-{i // 8}",
                "prompt": f"Question {step}/{i // 8}: " + filler[: TEXT // 4],
                "response": f"Answer {seq}: " + filler[TEXT // 4 + i % 50 :],
                "reward": correct + fmt,
                "components": {"correct": correct, "format": fmt, "length": -i / 640},
                "advantage": float(rng.normal()),
                "length": float(rng.integers(16, 1024)),
                "truncated": i == 63,
                "verdict": "correct" if correct else "wrong",
                "error": "grader timed out" if i == 62 else None,
                "kept_for": ("sample",),
            }
            rows.append(encode(row, 1, seq, 0))
            seq += 1
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO rollouts (session, seq, rollout_id, step, rank, group_id, prompt, "
            "response, reward, components, advantage, length, truncated, verdict, error, "
            "tool_calls, metadata, nonfinite, kept_for, recorded_at, nbytes) VALUES "
            f"({', '.join('?' * 21)})",
            rows,
        )
        conn.execute("COMMIT")
        step += 1
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def timed(url: str, repeat: int) -> tuple[float, int]:
    """Median seconds for a full answer to ``url``, and its size in bytes."""
    times, size = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as resp:
            size = len(resp.read())
        times.append(time.perf_counter() - t0)
    return statistics.median(times), size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--dir", type=Path, help="data directory to build (and keep) the store in")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    data_dir = args.dir or Path(tempfile.mkdtemp(prefix="rlpulse-bench-viewer-"))
    t0 = time.perf_counter()
    path = build(data_dir, args.gib)
    print(f"store: {file_bytes(path) / 2**30:.2f} GiB at {path} ({time.perf_counter() - t0:.0f} s)")
    srv = serve(data_dir)
    base = f"http://127.0.0.1:{srv.port}"
    mid = 1000
    span = f"step_min={mid}&step_max={mid + 199}"
    pages = {
        "run page, newest steps": f"/view?run={RUN}",
        "highest reward, whole run": f"/view?run={RUN}&order=best",
        "highest reward, 200 steps": f"/view?run={RUN}&order=best&{span}",
        "lowest reward, from a step": f"/view?run={RUN}&order=worst&step_min={mid}",
        "longest, whole run": f"/view?run={RUN}&order=longest",
        "failed grader calls": f"/view?run={RUN}&order=errors",
        "random (seeded), whole run": f"/view?run={RUN}&order=random&seed=3",
        "one group": f"/view?run={RUN}&group={mid}-2&step_min={mid}&step_max={mid}",
        "two steps side by side": f"/compare?run={RUN}&a={mid}&b={mid + 1}&limit=50",
        "text search, 200 steps": f"/view?run={RUN}&q=Answer%2070&{span}",
        "JSON API, highest reward": f"/rollouts?run={RUN}&order=best&limit=100",
    }
    try:
        print(f"{'page (100 rollouts)':<30} {'median':>9} {'/ 200 ms':>9} {'bytes':>10}")
        for name, path_q in pages.items():
            seconds, size = timed(base + path_q, args.repeat)
            print(f"{name:<30} {seconds * 1000:7.1f}ms {seconds / BUDGET_S:8.2f}x {size:>10}")
    finally:
        srv.close()


if __name__ == "__main__":
    main()
