"""A GRPO-style trainer for the toy task, in numpy.

Each step: sample ``group_size`` responses for each of ``prompts_per_step`` prompts (rollout),
grade them (reward), score them under the frozen reference (ref), normalise rewards within each
group into advantages, and take ``ppo_epochs x minibatches`` Adam steps on the clipped surrogate
with a k3 KL penalty and an entropy bonus (update); every ``eval_every`` steps sample the
held-out prompts and grade them strictly (eval). ``step()`` returns the step's statistics; it
knows nothing about exporting them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlpulse.demo.collective import CollectiveAborted, PeerGroup
from rlpulse.demo.policy import DTYPE, Adam, Generation
from rlpulse.demo.pretrain import pretrain
from rlpulse.demo.rollouts import StepRollouts
from rlpulse.demo.task import COMPONENTS, CORRECT, RewardSpec, grade, reward_components
from rlpulse.demo.task import sample_prompts as draw_prompts

PhaseHook = Callable[[str], AbstractContextManager[Any]]


@dataclass(frozen=True)
class TrainConfig:
    """Hyperparameters of a demo run (the scenarios override a few)."""

    prompts_per_step: int = 16
    group_size: int = 8
    max_len: int = 64
    lr: float = 0.003
    beta: float = 0.2  # KL penalty weight
    entropy_coef: float = 0.12
    clip_eps: float = 0.2
    ppo_epochs: int = 2
    minibatches: int = 2
    max_grad_norm: float | None = 1.0
    reward: RewardSpec = field(default_factory=RewardSpec)
    eval_every: int = 10
    eval_prompts: int = 64
    eval_samples: int = 2
    sft_steps: int = 150
    sft_lr: float = 0.05
    sft_noise: float = 0.3  # chance that a demonstration digit is wrong
    hang_at_step: int | None = None  # the simulated collective deadlocks from this step on

    def hyperparameters(self) -> dict[str, float]:
        """The numeric settings, flat, as a trainer would report them."""
        out: dict[str, float] = {}
        for k, v in self.__dict__.items():
            if isinstance(v, RewardSpec):
                out.update({f"reward.{rk}": float(rv) for rk, rv in v.__dict__.items()})
            elif isinstance(v, int | float):
                out[k] = float(v)
        return out


@dataclass
class StepStats:
    """What one training step produced."""

    step: int
    metrics: dict[str, float]  # the trainer's log dict, TRL GRPOTrainer key names
    rollouts: StepRollouts
    phases: dict[str, float]  # seconds per phase
    train_score: float  # training grader's correctness rate on this step's rollouts
    eval_score: float | None  # strict grader on the held-out prompts, on eval steps


def group_advantages(rewards: np.ndarray, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(advantages, per-group std): rewards minus their group mean, over the group std."""
    g = rewards.reshape(-1, group_size)
    std = g.std(axis=1, ddof=1) if group_size > 1 else np.zeros(len(g))
    adv = (g - g.mean(axis=1, keepdims=True)) / (std[:, None] + 1e-4)
    return adv.ravel(), std


class Trainer:
    """The GRPO loop. ``phase`` wraps each phase (pass ``rlpulse.phase`` to export timings)."""

    def __init__(self, config: TrainConfig, seed: int = 0, phase: PhaseHook | None = None):
        self.config = config
        self.rng = np.random.default_rng(seed)
        self._phase_hook = phase
        self.eval_prompts = draw_prompts(
            np.random.default_rng(10_000 + seed), config.eval_prompts, frozenset()
        )
        self.held_out = frozenset(p.tobytes() for p in self.eval_prompts)
        self.policy = pretrain(
            config.max_len,
            config.sft_steps,
            config.sft_lr,
            config.sft_noise,
            self.rng,
            self.held_out,
        )
        self.reference = self.policy.copy()
        self.opt = Adam(self.policy.W.shape, config.lr)
        self.peers = PeerGroup(config.hang_at_step)
        self.step_count = 0
        self.num_tokens = 0
        self.last_eval: float | None = None

    # ---- loop ---------------------------------------------------------------------------------
    def run(self, steps: int) -> Iterator[StepStats]:
        """Train for ``steps`` steps (stops early if ``stop()`` unblocks a hung collective)."""
        for _ in range(steps):
            try:
                yield self.step()
            except CollectiveAborted:
                return

    def reconfigure(self, config: TrainConfig) -> None:
        """Continue training under new settings (as a run resumed with a changed config)."""
        if (config.max_len, config.eval_prompts) != (self.config.max_len, self.config.eval_prompts):
            raise ValueError("reconfigure cannot change max_len or eval_prompts")
        self.config = config
        self.opt.lr = config.lr
        self.peers.hang_at_step = config.hang_at_step

    def stop(self) -> None:
        """Abort a hung (or the next) collective so ``run`` ends."""
        self.peers.abort()

    def step(self) -> StepStats:
        """One GRPO step."""
        cfg = self.config
        self.step_count += 1
        step = self.step_count
        phases: dict[str, float] = {}
        with self._phase("rollout", phases):
            prompts = draw_prompts(self.rng, cfg.prompts_per_step, self.held_out)
            batch_prompts = [p for p in prompts for _ in range(cfg.group_size)]
            gen = self.policy.generate(batch_prompts, self.rng)
        with self._phase("reward", phases):
            grades, comps, grader_s = self._grade(batch_prompts, gen, cfg.reward)
            rewards = np.sum(list(comps.values()), axis=0)
            advantages, group_std = group_advantages(rewards, cfg.group_size)
        with self._phase("ref", phases):
            ref_logp = self.reference.token_log_probs(gen.feats, gen.tokens, gen.mask)
        with self._phase("update", phases):
            update = self._update(gen, ref_logp, advantages, step)
        eval_score = None
        if step == 1 or step % cfg.eval_every == 0:
            with self._phase("eval", phases):
                eval_score = self.last_eval = self.evaluate()
        batch = StepRollouts(
            step, batch_prompts, gen, grades, comps, rewards, advantages, grader_s, cfg.group_size
        )
        self.num_tokens += int(batch.prompt_tokens.sum() + gen.lengths.sum())
        metrics = self._metrics(batch, group_std, update)
        train_score = float(batch.success.mean())
        return StepStats(step, metrics, batch, phases, train_score, eval_score)

    @contextmanager
    def _phase(self, name: str, into: dict[str, float]) -> Iterator[None]:
        hook = self._phase_hook(name) if self._phase_hook is not None else nullcontext()
        t0 = time.perf_counter()
        with hook:
            yield
        into[name] = time.perf_counter() - t0

    # ---- phases -------------------------------------------------------------------------------
    def _grade(
        self, prompts: list[np.ndarray], gen: Generation, spec: RewardSpec
    ) -> tuple[list[Any], dict[str, np.ndarray], np.ndarray]:
        n = len(prompts)
        comps = np.zeros((len(COMPONENTS), n))
        seconds = np.zeros(n)
        grades = []
        lengths = gen.lengths
        for i, p in enumerate(prompts):
            t0 = time.perf_counter()
            response = gen.tokens[i, : lengths[i]]
            g = grade(p, response, bool(gen.ended[i]), spec.loophole)
            comps[:, i] = reward_components(spec, p, response, g)
            seconds[i] = time.perf_counter() - t0
            grades.append(g)
        return grades, dict(zip(COMPONENTS, comps, strict=True)), seconds

    def evaluate(self) -> float:
        """Strict-grader accuracy on the held-out prompts (sampled, ``eval_samples`` each)."""
        prompts = [p for p in self.eval_prompts for _ in range(self.config.eval_samples)]
        gen = self.policy.generate(prompts, self.rng)
        lengths = gen.lengths
        ok = [
            grade(p, gen.tokens[i, : lengths[i]], bool(gen.ended[i]), False).verdict == CORRECT
            for i, p in enumerate(prompts)
        ]
        return float(np.mean(ok))

    def _update(
        self, gen: Generation, ref_logp: np.ndarray, adv: np.ndarray, step: int
    ) -> dict[str, float]:
        cfg = self.config
        n = len(adv)
        sums: dict[str, float] = {}
        n_updates = 0
        with np.errstate(all="ignore"):  # a diverging run yields inf/NaN: that is the point
            for _ in range(cfg.ppo_epochs):
                order = self.rng.permutation(n)
                for idx in np.array_split(order, cfg.minibatches):
                    stats = self._minibatch(gen, ref_logp, adv, idx, step)
                    for k, v in stats.items():
                        sums[k] = sums.get(k, 0.0) + v
                    n_updates += 1
        return {k: v / n_updates for k, v in sums.items()}

    def _minibatch(
        self, gen: Generation, ref_logp: np.ndarray, adv: np.ndarray, idx: np.ndarray, step: int
    ) -> dict[str, float]:
        """One clipped-surrogate Adam step on the generated tokens of samples ``idx``."""
        cfg = self.config
        sel = gen.mask[idx]
        feats, tokens = gen.feats[idx][sel], gen.tokens[idx][sel]  # (k, 4), (k,)
        old_logp, ref = gen.logp[idx][sel], ref_logp[idx][sel]
        a = np.broadcast_to(adv[idx, None], sel.shape)[sel].astype(DTYPE)
        p, lp = self.policy.log_probs(feats)
        onehot = np.zeros_like(p)
        onehot[np.arange(len(tokens)), tokens] = 1.0
        logp = lp[np.arange(len(tokens)), tokens]
        ratio = np.exp(logp - old_logp)
        lo, hi = 1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps
        surrogate = np.minimum(ratio * a, np.clip(ratio, lo, hi) * a)
        clip_low = (a < 0) & (ratio < lo)
        clip_high = (a > 0) & (ratio > hi)
        d = ref - logp
        k3 = np.exp(d) - d - 1.0
        entropy = -(p * lp).sum(-1)
        n_tok = max(len(tokens), 1)
        policy_loss = -float(surrogate.mean())
        kl, ent = float(k3.mean()), float(entropy.mean())
        loss = policy_loss + cfg.beta * kl - cfg.entropy_coef * ent
        # d loss / d logits: each term's derivative w.r.t. log p(token), times (onehot - p)
        dlogp = -a * ratio * ~(clip_low | clip_high) + cfg.beta * (1.0 - np.exp(d))
        dz = dlogp[:, None] * (onehot - p) + cfg.entropy_coef * p * (lp + entropy[:, None])
        grad = self.policy.grad_from_logits(feats, dz / n_tok)
        grad_norm = float(np.sqrt((grad.astype(np.float64) ** 2).sum()))
        if cfg.max_grad_norm is not None and grad_norm > cfg.max_grad_norm:
            grad *= cfg.max_grad_norm / grad_norm
        grad = self.peers.all_reduce(grad, step)
        self.opt.step(self.policy.W, grad)
        return {
            "loss": loss,
            "policy_loss": policy_loss,
            "kl": kl,
            "entropy": ent,
            "clip_low": float(clip_low.mean()),
            "clip_high": float(clip_high.mean()),
            "grad_norm": grad_norm,
        }

    # ---- the log dict -------------------------------------------------------------------------
    def _metrics(
        self, batch: StepRollouts, group_std: np.ndarray, u: dict[str, float]
    ) -> dict[str, float]:
        cfg = self.config
        lengths = batch.response_tokens.astype(float)
        ended = batch.gen.ended
        term = lengths[ended] if ended.any() else np.zeros(1)
        m = {
            "loss": u["loss"],
            "grad_norm": u["grad_norm"],
            "learning_rate": cfg.lr,
            "num_tokens": float(self.num_tokens),
            "reward": float(batch.rewards.mean()),
            "reward_std": float(group_std.mean()),
            "frac_reward_zero_std": float((group_std < 1e-8).mean()),
            "kl": u["kl"],
            "entropy": u["entropy"],
            "clip_ratio/low_mean": u["clip_low"],
            "clip_ratio/high_mean": u["clip_high"],
            "clip_ratio/region_mean": u["clip_low"] + u["clip_high"],
            "completions/mean_length": float(lengths.mean()),
            "completions/min_length": float(lengths.min()),
            "completions/max_length": float(lengths.max()),
            "completions/clipped_ratio": float((~ended).mean()),
            "completions/mean_terminated_length": float(term.mean()),
            "completions/min_terminated_length": float(term.min()),
            "completions/max_terminated_length": float(term.max()),
        }
        for name, values in batch.components.items():
            m[f"rewards/{name}/mean"] = float(values.mean())
            m[f"rewards/{name}/std"] = float(values.std())
        return m
