"""Exporters inside Ray actors, found by Prometheus through file_sd (docs/integrations/ray.md).

    pip install rlpulse "ray>=2.40"
    python examples/ray_actors.py --targets prometheus/targets --workers 4 --steps 200

A toy RL job: ``--workers`` rollout-worker actors (ranks 1..N) and one learner actor (rank 0).
Every actor starts its own rlpulse ``Exporter`` on an ephemeral port (``--base-port`` for a fixed
range), bound to its Ray node's address, and writes ``<run_id>-<rank>.json`` into ``--targets``
(``rlpulse.runtime.targets.register``). A Prometheus with ``file_sd_configs: [{files:
[DIR/*.json]}]`` picks each actor up as it starts and drops it when it ends. The numbers are
synthetic (no model, no environment) but move like a GRPO run's: workers report rollout latency,
response length and rewards with ``observe_rollouts``; the learner logs loss, KL, entropy, grad
norm and learning rate with ``log()``.

Node-level readings (GPU via NVML, host CPU/memory) come from local rank 0 only; an actor's local
rank is the first free per-node slot, a lock on an (empty, left behind) file in the node's temp
directory held for the actor's life, so it is unique per node without asking the scheduler where
actors landed.

A worker that dies (``ray.kill``, a crash, a lost node) cannot remove its own file; the driver
notices when its next call fails and removes it (``rlpulse.runtime.targets.unregister``).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import ray

from rlpulse import Exporter
from rlpulse.runtime import targets


def node_address() -> str:
    """The address Ray knows this node by (what the other nodes and Prometheus reach)."""
    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node["NodeID"] == node_id:
            return str(node["NodeManagerAddress"])
    return str(ray.util.get_node_ip_address())


def node_slot(run_id: str, limit: int = 1024) -> tuple[int, IO[bytes]]:
    """The lowest per-node slot no live process of ``run_id`` holds, and its locked file (keep
    it open: the lock goes with the process, so a restarted actor takes the slot again)."""
    safe = targets.target_path("", run_id, 0).name.removesuffix("-0.json")
    for slot in range(limit):
        f = open(Path(tempfile.gettempdir()) / f"rlpulse-{safe}-slot{slot}.lock", "ab")  # noqa: SIM115
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            continue
        return slot, f
    raise RuntimeError(f"{limit} exporters of run {run_id} on this node")


class _Exported:
    """What both actor kinds share: an exporter serving on this node, announced to file_sd."""

    def __init__(self, targets_dir: str, run_id: str, rank: int, role: str, base_port: int) -> None:
        self.node = node_address()
        self.local_rank, self._slot = node_slot(run_id)
        # gpu/host default to local_rank == 0: node-level series once per node
        self.exp = Exporter(
            base_port,  # 0: ephemeral; else base_port + local_rank
            addr=self.node,
            run_id=run_id,
            rank=rank,
            local_rank=self.local_rank,
            node=self.node,
        ).start()
        self.reg = targets.register(targets_dir, self.exp, {"role": role}, host=self.node)
        self.role = role
        self.rng = np.random.default_rng(rank)

    def target(self) -> dict[str, Any]:
        """Where Prometheus finds this actor."""
        return {
            "rank": self.exp.rank,
            "role": self.role,
            "node": self.node,
            "local_rank": self.local_rank,
            "address": self.reg.address,
            "file": str(self.reg.path),
            "pid": os.getpid(),
        }

    def close(self) -> None:
        """Stop serving; the target file goes with it."""
        self.exp.close()
        self._slot.close()


class RolloutWorker(_Exported):
    """Generates a batch of (synthetic) rollouts per call."""

    def __init__(self, targets_dir: str, run_id: str, rank: int, base_port: int = 0) -> None:
        super().__init__(targets_dir, run_id, rank, "rollout", base_port)

    def rollout(self, step: int, batch: int, group_size: int) -> dict[str, float]:
        rng = self.rng
        tokens = np.clip(rng.normal(180 + step, 60, batch), 8, 1024).round()
        latency = tokens * 0.004 * rng.lognormal(0, 0.25, batch)  # ~4 ms a token, long tail
        correct = rng.random(batch) < min(0.2 + step / 400, 0.9)
        rewards = correct + rng.normal(0, 0.05, batch)
        with self.exp.phase("generate"):
            time.sleep(min(float(latency.max()) * 0.01, 0.05))  # a sliver of the real wait
        self.exp.observe_rollouts(
            latency_seconds=latency,
            response_tokens=tokens,
            prompt_tokens=np.full(batch, 96.0),
            rewards=rewards,
            success=correct,
            truncated=tokens >= 1024,
            group_size=group_size,
        )
        self.exp.log({}, step=step)  # every rank holds the step: liveness, step rate per rank
        return {"reward": float(rewards.mean())}


class Learner(_Exported):
    """Takes the workers' batches and (pretends to) update the policy."""

    def __init__(self, targets_dir: str, run_id: str, base_port: int = 0) -> None:
        super().__init__(targets_dir, run_id, 0, "learner", base_port)

    def update(self, step: int, batches: Sequence[dict[str, float]]) -> dict[str, float]:
        rng = self.rng
        with self.exp.phase("update"):
            time.sleep(0.01)
        metrics = {
            "loss": 0.7 * np.exp(-step / 150) + 0.05 * rng.random(),
            "kl": 0.002 * step * (1 + 0.1 * rng.standard_normal()),
            "entropy": 1.8 * np.exp(-step / 300) + 0.2,
            "grad_norm": float(rng.lognormal(-0.5, 0.3)),
            "learning_rate": 1e-6,
            "reward": float(np.mean([b["reward"] for b in batches])) if batches else 0.0,
        }
        self.exp.log(metrics, step=step)
        return {k: float(v) for k, v in metrics.items()}


class Job:
    """The driver: starts the actors, runs steps, and cleans up after workers that die."""

    def __init__(
        self,
        targets_dir: Path | str,
        run_id: str,
        workers: int,
        *,
        batch: int = 64,
        group_size: int = 8,
        base_port: int = 0,
        actor_options: dict[str, Any] | None = None,
    ) -> None:
        self.targets_dir, self.run_id = str(targets_dir), run_id
        self.batch, self.group_size = batch, group_size
        opts = {"num_cpus": 0.1, **(actor_options or {})}
        self.learner = (
            ray.remote(Learner).options(**opts).remote(self.targets_dir, run_id, base_port)
        )
        worker = ray.remote(RolloutWorker).options(**opts)
        self.workers = {
            rank: worker.remote(self.targets_dir, run_id, rank, base_port)
            for rank in range(1, workers + 1)
        }
        self.step = 0
        self.lost: list[int] = []

    def targets(self) -> list[dict[str, Any]]:
        """Every live actor's target, learner first."""
        actors = [self.learner, *self.workers.values()]
        out: list[dict[str, Any]] = ray.get([a.target.remote() for a in actors])
        return out

    def run(self, steps: int, pause: float = 0.0) -> dict[str, float]:
        """``steps`` synchronous steps (every worker's batch, then one update)."""
        metrics: dict[str, float] = {}
        for _ in range(steps):
            self.step += 1
            calls = {
                r: w.rollout.remote(self.step, self.batch, self.group_size)
                for r, w in self.workers.items()
            }
            batches = []
            for rank, call in calls.items():
                try:
                    batches.append(ray.get(call))
                except ray.exceptions.RayActorError:
                    self._lost(rank)
            metrics = ray.get(self.learner.update.remote(self.step, batches))
            time.sleep(pause)
        return metrics

    def _lost(self, rank: int) -> None:
        """A worker died without closing its exporter: take its target away ourselves."""
        del self.workers[rank]
        self.lost.append(rank)
        targets.unregister(self.targets_dir, self.run_id, rank)
        print(f"worker rank {rank} died; its target is removed", flush=True)

    def close(self) -> None:
        """Close every exporter (their target files go), then end the actors."""
        actors = [self.learner, *self.workers.values()]
        for actor, done in zip(actors, [a.close.remote() for a in actors], strict=True):
            with contextlib.suppress(ray.exceptions.RayActorError):  # died already
                ray.get(done)
            ray.kill(actor)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", required=True, help="file_sd directory Prometheus reads (*.json)")
    p.add_argument("--workers", type=int, default=4, help="rollout-worker actors")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--step-seconds", type=float, default=1.0, help="pause after each step")
    p.add_argument("--run-id", default=f"ray-{uuid.uuid4().hex[:6]}")
    p.add_argument("--base-port", type=int, default=0, help="0: ephemeral ports")
    p.add_argument("--address", default=None, help="a Ray cluster to join (default: start one)")
    args = p.parse_args(argv)
    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(include_dashboard=False)
    try:
        job = Job(args.targets, args.run_id, args.workers, base_port=args.base_port)
        for t in job.targets():
            print(
                f"{t['role']:>8} rank {t['rank']} on {t['node']} (local rank {t['local_rank']}): "
                f"http://{t['address']}/metrics  ->  {t['file']}",
                flush=True,
            )
        try:
            for _ in range(args.steps):
                m = job.run(1, args.step_seconds)
                if job.step % 10 == 0:
                    print(f"step {job.step}: loss {m['loss']:.3f} kl {m['kl']:.4f}", flush=True)
        finally:
            job.close()
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
