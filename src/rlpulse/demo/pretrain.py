"""Supervised warm start: the "SFT model" that RL starts from and is anchored to (the reference).

It is trained briefly on demonstrations, so it knows the format well and the digit rule only
partly: RL has something to improve, and a reference that is sharp where the format is fixed.
"""

from __future__ import annotations

import numpy as np

from rlpulse.demo.policy import Adam, DecodeState, Policy, softmax
from rlpulse.demo.task import CLOSE, EOS, FILLER, OPEN, sample_prompts, target

FILLER_COUNTS = (0, 1, 2)
FILLER_PROBS = (0.6, 0.25, 0.15)


def demonstration(prompt: np.ndarray, rng: np.random.Generator, noise: float) -> np.ndarray:
    """A well-formed response from a sloppy teacher: each answer digit is a random digit with
    probability ``noise``; sometimes a little reasoning filler comes first."""
    k = int(rng.choice(FILLER_COUNTS, p=FILLER_PROBS))
    digits = target(prompt)
    sloppy = rng.random(len(digits)) < noise
    digits = np.where(sloppy, rng.integers(0, 10, len(digits)), digits)
    return np.array([FILLER] * k + [OPEN, *digits.tolist(), CLOSE, EOS])


def teacher_forced(
    prompts: list[np.ndarray], responses: list[np.ndarray], max_len: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features (n, T, 4), tokens (n, T), mask (n, T)) for given responses."""
    n = len(prompts)
    tokens = np.full((n, max_len), EOS, dtype=np.int64)
    mask = np.zeros((n, max_len), dtype=bool)
    for i, r in enumerate(responses):
        tokens[i, : len(r)] = r[:max_len]
        mask[i, : len(r)] = True
    state = DecodeState(prompts, max_len)
    feats = np.zeros((n, max_len, 4), dtype=np.int64)
    for t in range(max_len):
        feats[:, t] = state.features(t)
        state.advance(tokens[:, t])
    return feats, tokens, mask


def pretrain(
    max_len: int,
    steps: int,
    lr: float,
    noise: float,
    rng: np.random.Generator,
    exclude: frozenset[bytes],
    batch: int = 64,
) -> Policy:
    """A policy trained with cross-entropy on ``steps`` batches of demonstrations."""
    policy = Policy(max_len)
    opt = Adam(policy.W.shape, lr)
    for _ in range(steps):
        prompts = sample_prompts(rng, batch, exclude)
        feats, tokens, mask = teacher_forced(
            prompts, [demonstration(p, rng, noise) for p in prompts], max_len
        )
        f, t = feats[mask], tokens[mask]
        dz = softmax(policy.logits(f))  # cross-entropy gradient: p - onehot(target)
        dz[np.arange(len(t)), t] -= 1.0
        opt.step(policy.W, policy.grad_from_logits(f, dz / len(t)))
    return policy
