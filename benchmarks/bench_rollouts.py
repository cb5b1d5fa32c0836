"""Training-thread cost of ``record_rollouts`` with the default sampling, per rollout.

    python benchmarks/bench_rollouts.py [--batch N] [--batches N] [--repeat N]

Each batch is one training step of ``--batch`` rollouts with every column filled (ids, group
ids, prompt, response, three reward components, total, advantage, length, truncated, grader
verdict/error, tool calls, metadata). The baseline is the cheapest way to keep every rollout: one
``list.append`` of the rollout's fields per rollout. Prints the medians (ns per rollout) and the
ratio twice: *paced*, where the writer thread finishes between steps (as it does while a real
step computes), and *back-to-back*, where the writer competes for the GIL with the timed loop
(and, at ~1,000 steps/s, its bounded queue drops and counts what it cannot take).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

import numpy as np

from rlpulse.rollouts import Recorder, record_rollouts


def make_batch(n: int, rng: np.random.Generator) -> dict[str, Any]:
    """One step's columns, as a GRPO-style trainer has them."""
    parts = {"correct": rng.integers(0, 2, n).astype(float), "format": rng.random(n)}
    parts["length_penalty"] = -rng.random(n) / 10
    return {
        "rollout_ids": [f"r{i}" for i in range(n)],
        "group_ids": [f"g{i // 8}" for i in range(n)],
        "prompts": [f"Question {i}: what is {i} + {i}?" for i in range(n)],
        "responses": [f"<think>{'step ' * 50}</think> The answer is {2 * i}." for i in range(n)],
        "rewards": sum(parts.values()),
        "components": parts,
        "advantages": rng.normal(size=n),
        "lengths": rng.integers(16, 1024, n),
        "truncated": rng.random(n) < 0.02,
        "verdicts": ["correct" if c else "wrong" for c in parts["correct"]],
        "errors": [None] * n,
        "tool_calls": [[{"tool": "python", "ok": True}]] * n,
        "metadata": {"env": "gsm8k"},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    batch = make_batch(args.batch, np.random.default_rng(0))
    per_rollout = args.batch * args.batches
    fields = ("rollout_ids", "prompts", "responses", "rewards", "advantages", "lengths")

    def baseline() -> float:
        kept: list[tuple[Any, ...]] = []
        t0 = time.perf_counter()
        for _ in range(args.batches):
            for row in zip(*(batch[f] for f in fields), strict=True):
                kept.append(row)
        return (time.perf_counter() - t0) / per_rollout * 1e9

    with tempfile.TemporaryDirectory() as tmp:
        stats: dict[str, float] = {}
        step = 0

        def recorder(paced: bool) -> float:
            nonlocal stats, step
            rec = Recorder("bench", data_dir=tmp)
            elapsed = 0.0
            for _ in range(args.batches):
                t0 = time.perf_counter()
                record_rollouts(rec, step=step, **batch)
                elapsed += time.perf_counter() - t0
                step += 1
                if paced:
                    rec.flush()  # the writer works between steps, as during a real step
            rec.flush()
            stats = rec.stats()
            rec.close()
            return elapsed / per_rollout * 1e9

        base = statistics.median(baseline() for _ in range(args.repeat))
        results = {}
        for paced in (True, False):
            ns = statistics.median(recorder(paced) for _ in range(args.repeat))
            results[paced] = (ns, stats)
    print(f"batch {args.batch} rollouts x {args.batches} steps, median of {args.repeat} runs")
    print(f"  {'list.append per rollout':<54} {base:8.1f} ns/rollout")
    for paced, label in ((True, "paced (writer drains between steps)"), (False, "back-to-back")):
        ns, st = results[paced]
        dropped = sum(v for k, v in st.items() if k.startswith("dropped"))
        print(
            f"  record_rollouts, {label:<37} {ns:8.1f} ns/rollout "
            f"({ns * args.batch / 1e3:.0f} µs/step)  ratio {ns / base:5.2f}x  "
            f"(stored {st.get('recorded', 0) / args.batches:.1f}/step, dropped {dropped:.0f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
