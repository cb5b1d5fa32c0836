"""A tiny autoregressive policy: a log-linear softmax over the toy vocabulary.

The logits of the next token are a sum of learned rows, one per active feature of the decoding
state: the previous token, the prompt digit aligned with the current answer position (or the
phase: before the answer / past its end / after it), the absolute position, and a bias. Small
enough for numpy, rich enough to learn the task, to be led astray by a bad reward, and to
diverge under a bad learning rate.

Log-probabilities are computed as ``log(softmax(z))``, as many hand-written trainers do: it is
exact at sane scales, and returns ``-inf`` (then NaN) once logits drift ~100 nats apart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from rlpulse.demo.task import CLOSE, EOS, MAX_DIGITS, OPEN, V

# Feature layout: [prev token | BOS] [source slot] [position] [bias]
N_PREV = V + 1
BOS = V
SRC_PRE, SRC_END, SRC_OVER, SRC_POST = 0, 11, 12, 13  # 1 + d for "aligned prompt digit d"
N_SRC = 14
PRE, ANSWER, POST = 0, 1, 2  # decoding phases
DTYPE = np.float32


def n_features(max_len: int) -> int:
    """Width of the one-hot feature vector for responses of up to ``max_len`` tokens."""
    return N_PREV + N_SRC + max_len + 1


class DecodeState:
    """Per-sample decoding state for a batch of prompts, advanced one token at a time."""

    def __init__(self, prompts: list[np.ndarray], max_len: int) -> None:
        n = len(prompts)
        self.max_len = max_len
        self.digits = np.zeros((n, MAX_DIGITS + 1), dtype=np.int64)
        self.lens = np.array([len(p) for p in prompts], dtype=np.int64)
        for i, p in enumerate(prompts):
            self.digits[i, : len(p)] = p
        self.prev = np.full(n, BOS, dtype=np.int64)
        self.phase = np.full(n, PRE, dtype=np.int64)
        self.j = np.zeros(n, dtype=np.int64)  # tokens emitted since "<a>"
        self.done = np.zeros(n, dtype=bool)
        self.rows = np.arange(n)

    def features(self, t: int) -> np.ndarray:
        """Active feature indices at position ``t``, shape (n, 4)."""
        aligned = 1 + self.digits[self.rows, np.minimum(self.j, MAX_DIGITS)]
        in_answer = np.where(
            self.j < self.lens, aligned, np.where(self.j == self.lens, SRC_END, SRC_OVER)
        )
        src = np.where(
            self.phase == PRE, SRC_PRE, np.where(self.phase == POST, SRC_POST, in_answer)
        )
        n = len(self.rows)
        return np.stack(
            [
                self.prev,
                N_PREV + src,
                np.full(n, N_PREV + N_SRC + t),
                np.full(n, N_PREV + N_SRC + self.max_len),
            ],
            axis=1,
        )

    def advance(self, tokens: np.ndarray) -> None:
        """Consume one token per sample (ignored for finished samples)."""
        live = ~self.done
        in_answer = live & (self.phase == ANSWER)
        self.j = np.where(in_answer, self.j + 1, self.j)
        self.phase = np.where(in_answer & (tokens == CLOSE), POST, self.phase)
        opened = live & (self.phase == PRE) & (tokens == OPEN)
        self.phase = np.where(opened, ANSWER, self.phase)
        self.prev = np.where(live, tokens, self.prev)
        self.done = self.done | (live & (tokens == EOS))


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax (max-subtracted)."""
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@dataclass
class Generation:
    """A batch of sampled responses, with everything the update needs."""

    tokens: np.ndarray  # (n, T) int, EOS-terminated rows padded with EOS
    mask: np.ndarray  # (n, T) bool, the generated tokens (EOS included)
    feats: np.ndarray  # (n, T, 4) active feature indices
    logp: np.ndarray  # (n, T) log-prob of each sampled token under the sampling policy
    entropy: np.ndarray  # (n, T) entropy of the sampling distribution at each position
    ended: np.ndarray  # (n,) bool, stopped with EOS before the length limit
    latency: np.ndarray  # (n,) seconds from the start of the batch to the sample's last token

    @property
    def lengths(self) -> np.ndarray:
        """Response lengths in tokens."""
        return self.mask.sum(axis=1)


class Policy:
    """Weights ``W`` (features x vocab) of the log-linear policy."""

    def __init__(self, max_len: int, weights: np.ndarray | None = None) -> None:
        self.max_len = max_len
        shape = (n_features(max_len), V)
        self.W = np.zeros(shape, dtype=DTYPE) if weights is None else weights.astype(DTYPE)

    def copy(self) -> Policy:
        """An independent copy (e.g. the frozen reference)."""
        return Policy(self.max_len, self.W.copy())

    def logits(self, feats: np.ndarray) -> np.ndarray:
        """Logits for feature-index arrays of shape (..., 4)."""
        return self.W[feats].sum(axis=-2)

    def log_probs(self, feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(probabilities, log-probabilities) of every token, as ``log(softmax(z))``."""
        p = softmax(self.logits(feats))
        return p, np.log(p)

    def token_log_probs(
        self, feats: np.ndarray, tokens: np.ndarray, mask: np.ndarray
    ) -> np.ndarray:
        """Log-prob of each generated token (shape of ``tokens``; 0 where ``mask`` is False)."""
        out = np.zeros(tokens.shape, dtype=DTYPE)
        _, lp = self.log_probs(feats[mask])
        out[mask] = lp[np.arange(len(lp)), tokens[mask]]
        return out

    def generate(self, prompts: list[np.ndarray], rng: np.random.Generator) -> Generation:
        """Sample one response per prompt, all prompts decoded together."""
        t0 = time.perf_counter()
        n, T = len(prompts), self.max_len
        state = DecodeState(prompts, T)
        tokens = np.full((n, T), EOS, dtype=np.int64)
        mask = np.zeros((n, T), dtype=bool)
        feats = np.zeros((n, T, 4), dtype=np.int64)
        logp = np.zeros((n, T), dtype=DTYPE)
        entropy = np.zeros((n, T), dtype=DTYPE)
        latency = np.zeros(n)
        for t in range(T):
            live = ~state.done
            if not live.any():
                break
            f = state.features(t)
            p, lp = self.log_probs(f)
            u = rng.random((n, 1))
            tok = (u < np.cumsum(p, axis=1)).argmax(axis=1)  # NaN probabilities pick token 0
            tokens[live, t] = tok[live]
            mask[:, t] = live
            feats[:, t] = f
            logp[:, t] = lp[np.arange(n), tok]
            entropy[:, t] = -(p * lp).sum(axis=1)
            state.advance(tok)
            latency[live & state.done] = time.perf_counter() - t0
        latency[~state.done] = time.perf_counter() - t0
        return Generation(tokens, mask, feats, logp, entropy, state.done.copy(), latency)

    def grad_from_logits(self, feats: np.ndarray, dz: np.ndarray) -> np.ndarray:
        """Gradient on ``W`` from the loss gradient on each token's logits.

        ``feats`` is (k, 4), ``dz`` is (k, V): each row of ``W`` collects the ``dz`` of the
        tokens where its feature is active (segment sums; no BLAS, whose threads stall small
        products on a busy machine).
        """
        grad = np.zeros_like(self.W)
        dz = dz.astype(DTYPE, copy=False)
        for col in feats.T:
            order = np.argsort(col, kind="stable")
            rows, starts = np.unique(col[order], return_index=True)
            grad[rows] += np.add.reduceat(dz[order], starts, axis=0)
        return grad


class Adam:
    """Adam on one weight matrix."""

    def __init__(
        self, shape: tuple[int, ...], lr: float, b1: float = 0.9, b2: float = 0.999
    ) -> None:
        self.lr, self.b1, self.b2 = lr, b1, b2
        self.m: np.ndarray = np.zeros(shape, dtype=DTYPE)
        self.v: np.ndarray = np.zeros(shape, dtype=DTYPE)
        self.t = 0

    def step(self, w: np.ndarray, grad: np.ndarray) -> None:
        """Update ``w`` in place."""
        self.t += 1
        self.m = (self.b1 * self.m + (1 - self.b1) * grad).astype(DTYPE)
        self.v = (self.b2 * self.v + (1 - self.b2) * grad * grad).astype(DTYPE)
        m_hat = self.m / (1 - self.b1**self.t)
        v_hat = self.v / (1 - self.b2**self.t)
        w -= (self.lr * m_hat / (np.sqrt(v_hat) + 1e-8)).astype(w.dtype)
