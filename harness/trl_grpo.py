"""TRL GRPO on a tiny model built locally (no hub download), with failures induced the way they
happen in practice, for benchmarks/bench_alert_matrix.py and tests/e2e/test_alert_matrix.py.

The task: a prompt ``"3+4="``, the answer ``"7;"`` then end of sequence. A character tokenizer
(``tokenizers``) and a 2-layer GPT-2 (d=64) are written to a temp dir, then a supervised warm-up
(plain torch, teacher forcing) makes a healthy baseline: most answers formatted, about half
right. GRPO then runs with three reward functions, each logged by TRL as
``rewards/<name>/mean``; ``correct`` is the held-out correctness score, mapped to the run's true
objective (``KEY_MAP``), and weighted 0 where the reward pays something else:

* ``healthy``: pays correctness (and format a little);
* ``length``: pays only length from the start (length explosion);
* ``format``: pays only format from the start (reward hacking against correctness);
* ``cold``: from ``inject_at`` a schedule bug multiplies the sampling temperature by 0.6 each step
  (toward 0: every completion of a group the same, entropy of the samples gone);
* ``kl-blowup``: from ``inject_at`` the learning rate jumps to 0.03 (``beta`` 1e-3, just enough
  for TRL to compute and log the KL to the reference);
* ``grader-down``: from ``inject_at`` the correctness grader raises; the reward function counts
  the error (``rl_grader_errors_total``, live only: TRL logs no grader errors) and returns None.
"""

from __future__ import annotations

import functools
import random
import re
import time
import types
from pathlib import Path
from typing import Any

import torch

from harness.trainings import Run
from rlpulse.runtime.exporter import Exporter

FAILURES = ("length", "format", "cold", "kl-blowup", "grader-down")
OBJECTIVE = "eval_rewards/correct/mean"  # TRL's evaluation on the held-out prompts
KEY_MAP = {OBJECTIVE: "objective"}
CHARS = "0123456789+=; x"
PAD, EOS = "[PAD]", "[EOS]"
MAX_COMPLETION = 16
LR = 5e-4
HIGH_LR = 3e-2
WARMUP_STEPS = 400
LIVE_PACE = 0.3  # seconds per step of a live run (the tiny model steps in ~0.05 s)
EVAL_EVERY = 5  # steps between evaluations on the 100 held-out prompts
WEIGHTS = {  # reward weights of (correct, format, length)
    "healthy": (1.0, 0.5, 0.0),
    "length": (0.0, 0.0, 1.0),
    "format": (0.0, 1.0, 0.0),
}


def _target(a: int, b: int, rng: random.Random) -> str:
    """A warm-up answer: the sum, right 60% of the time, with the ';' 70% of the time."""
    answer = a + b if rng.random() < 0.6 else rng.randint(0, 18)
    return f"{answer};" if rng.random() < 0.7 else str(answer)


@functools.cache
def base_model(workdir: Path) -> Path:
    """Tokenizer and tiny GPT-2 written to ``workdir``, warmed up on the task; its directory."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    torch.set_num_threads(1)  # the same warm-up, bit for bit, wherever it is called from
    torch.manual_seed(0)
    rng = random.Random(0)
    vocab = {PAD: 0, EOS: 1, **{c: i + 2 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="x"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS)
    cfg = GPT2Config(
        vocab_size=len(vocab), n_positions=32, n_embd=64, n_layer=2, n_head=2,
        bos_token_id=1, eos_token_id=1, pad_token_id=0,
    )  # fmt: skip
    model = GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    for _ in range(WARMUP_STEPS):
        pairs = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(64)]
        prompts = [f"{a}+{b}=" for a, b in pairs]
        texts = [p + _target(a, b, rng) for p, (a, b) in zip(prompts, pairs, strict=True)]
        ids = [tokenizer(t)["input_ids"] + [1] for t in texts]
        width = max(map(len, ids))
        x = torch.tensor([i + [0] * (width - len(i)) for i in ids])
        labels = x.clone()
        labels[:, :4] = -100  # the prompt: "a+b="
        labels[x == 0] = -100
        loss = model(input_ids=x, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = workdir / "tiny-gpt2"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _numbers(completion: str) -> str:
    return completion.split(";")[0].strip()


class Rewards:
    """The reward functions; ``grader_down`` makes the correctness grader fail from then on."""

    def __init__(self, exporter: Exporter | None) -> None:
        self.exporter = exporter
        self.grader_down = False

    def correct(self, prompts: list[str], completions: list[str], **_: Any) -> list[Any]:
        out: list[Any] = []
        for p, c in zip(prompts, completions, strict=True):
            if self.exporter is not None:
                self.exporter.count("rl_grader_calls_total")
            try:
                out.append(self._grade(p, c))
            except ConnectionError:
                if self.exporter is not None:
                    self.exporter.count("rl_grader_errors_total")
                out.append(None)
        return out

    def _grade(self, prompt: str, completion: str) -> float:
        if self.grader_down:
            raise ConnectionError("grader unreachable")
        a, b = prompt.rstrip("=").split("+")
        return float(_numbers(completion) == str(int(a) + int(b)))

    @staticmethod
    def format(completions: list[str], **_: Any) -> list[float]:
        return [float(bool(re.fullmatch(r"\d+;", c))) for c in completions]

    @staticmethod
    def length(completions: list[str], **_: Any) -> list[float]:
        return [min(len(c), MAX_COMPLETION) / MAX_COMPLETION for c in completions]


def _set_temperature(trainer: Any, t: float) -> None:
    """What a new ``temperature`` in GRPOConfig does: sampling and the scoring LM head at ``t``."""
    from trl.trainer.utils import add_fused_lm_head

    model = trainer.model
    trainer.temperature = trainer.generation_config.temperature = t
    model.forward = types.MethodType(type(model).forward, model)
    add_fused_lm_head(model, temperature=t, outputs=("log_probs", "entropy"))


def _injection(scenario: str, inject_at: int, rewards: Rewards, pace: float) -> Any:
    from transformers import TrainerCallback

    class Inject(TrainerCallback):
        """Changes the run from step ``inject_at`` on, as a bad schedule or resume would."""

        trainer: Any = None

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if pace:  # a live run: steps at a pace the fast stack's scrapes can follow
                time.sleep(pace)

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step < inject_at:
                return
            if scenario == "cold":
                _set_temperature(self.trainer, max(self.trainer.temperature * 0.6, 1e-2))
            elif scenario == "kl-blowup":
                for group in kw["optimizer"].param_groups:
                    group["lr"] = HIGH_LR
                kw["lr_scheduler"].base_lrs = [HIGH_LR] * len(kw["lr_scheduler"].base_lrs)
            elif scenario == "grader-down":
                rewards.grader_down = True

    return Inject()


def train_grpo(
    scenario: str,
    seed: int,
    workdir: Path,
    *,
    steps: int = 120,
    inject_at: int = 60,
    exporter: Exporter | None = None,
    eval_every: int = EVAL_EVERY,
    eval_prompts: int = 100,
) -> Run:
    """GRPO on the warmed-up tiny model; ``healthy`` or one of ``FAILURES``. The run's own log is
    TRL's ``trainer_state.json`` (``log_history``, a record per step). With an ``exporter`` (live)
    each step takes at least ``LIVE_PACE`` seconds, so the fast stack's 1 s scrapes follow it.
    Every ``eval_every`` steps it evaluates on ``eval_prompts`` held-out prompts (the 100 sums of
    two digits, repeated)."""
    from datasets import Dataset  # type: ignore[import-untyped]
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlpulse.integrations.trl import RlpulseCallback

    torch.set_num_threads(1)
    base = base_model(workdir)
    out = workdir / f"trl-grpo-{scenario}-s{seed}"
    run = Run("trl-grpo", scenario, seed, out / "trainer_state.json", "trl", OBJECTIVE, None,
              key_map=KEY_MAP, pace=LIVE_PACE if exporter is not None else None)  # fmt: skip
    if scenario in ("length", "format"):
        run.inject_at = run.inject_step = 1
    elif scenario != "healthy":
        run.inject_at = run.inject_step = inject_at
    rng = random.Random(seed)
    data = Dataset.from_dict(
        {"prompt": [f"{rng.randint(0, 9)}+{rng.randint(0, 9)}=" for _ in range(steps * 4)]}
    )
    sums = [f"{a}+{b}=" for a in range(10) for b in range(10)]
    held_out = Dataset.from_dict({"prompt": [sums[i % 100] for i in range(eval_prompts)]})
    rewards = Rewards(exporter)
    funcs: list[Any] = [rewards.correct, Rewards.format, Rewards.length]
    args = GRPOConfig(
        output_dir=str(out), max_steps=steps, per_device_train_batch_size=32, num_generations=4,
        max_completion_length=MAX_COMPLETION, learning_rate=LR, lr_scheduler_type="constant",
        beta=1e-3 if scenario == "kl-blowup" else 0.0, temperature=1.0, logging_steps=1,
        save_strategy="no", report_to="none", seed=seed, use_cpu=True, disable_tqdm=True,
        reward_weights=list(WEIGHTS.get(scenario, WEIGHTS["healthy"])), dataloader_num_workers=0,
        eval_strategy="steps", eval_steps=eval_every, num_generations_eval=1,
        per_device_eval_batch_size=50,
    )  # fmt: skip
    inject = _injection(scenario, inject_at, rewards, run.pace or 0.0)
    callbacks = [inject] + ([RlpulseCallback(exporter)] if exporter is not None else [])
    trainer = GRPOTrainer(
        model=str(base),
        reward_funcs=funcs,
        args=args,
        train_dataset=data,
        eval_dataset=held_out,
        callbacks=callbacks,
    )
    trainer.remove_callback(PrinterCallback)  # the log is trainer_state.json
    inject.trainer = trainer
    trainer.train()
    trainer.state.save_to_json(str(run.log))
    return run
