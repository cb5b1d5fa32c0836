"""TRL/transformers integration: a real ``Trainer`` loop and a real ``GRPOTrainer`` on a tiny GPT-2
built from a config with a character tokenizer made here (nothing downloaded), scraped over
HTTP and compared with what the trainer logged."""

from __future__ import annotations

import string
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
    Trainer,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

import rlpulse
from rlpulse import catalog, keys
from rlpulse.integrations.trl import RlpulseCallback
from rlpulse.rollouts.query import Filter, open_run, query
from rlpulse.rollouts.server import serve
from rlpulse.runtime.exporter import Exporter
from tests.conftest import promtool_check_metrics, samples, scrape, value

SPECIALS = ["[PAD]", "[UNK]", "[BOS]", "[EOS]"]
STEP = catalog.get("rl_step").name
PHASE = catalog.get("rl_phase_duration_seconds").name
# a few steps on the CPU: no reporters, checkpoints or progress bars
TINY_CPU_RUN: dict[str, Any] = {
    "learning_rate": 1e-3,
    "report_to": "none",
    "use_cpu": True,
    "save_strategy": "no",
    "disable_tqdm": True,
}


def char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(SPECIALS + list(string.ascii_lowercase + " "))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]",
        unk_token="[UNK]",
        bos_token="[BOS]",
        eos_token="[EOS]",
    )


def tiny_gpt2(tokenizer: PreTrainedTokenizerFast) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=64,
        n_embd=32,
        n_layer=1,
        n_head=2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return GPT2LMHeadModel(config)


def check_logged(text: str, logged: dict[str, Any], framework: str) -> int:
    """Every logged number is in its mapped series (or kept as rl_unmapped_metric)."""
    checked = 0
    for key, raw in logged.items():
        if key == "step" or not isinstance(raw, int | float) or isinstance(raw, bool):
            continue
        target = keys.resolve(key, framework)
        if target is None:
            assert value(text, catalog.get("rl_unmapped_metric").name, key=key) == raw, key
            continue
        got = value(text, catalog.get(target.metric).name, **dict(target.labels))
        assert got == pytest.approx(float(raw) * target.scale, rel=1e-6), key
        checked += 1
    return checked


def test_trainer_loop_exports_what_it_logs(tmp_path: Path, exporter: Exporter) -> None:
    tokenizer = char_tokenizer()
    texts = ["the cat sat on the mat", "a dog ran in the fog", "we go to the sea now"] * 8
    enc = [tokenizer(t, padding="max_length", max_length=24)["input_ids"] for t in texts]
    data = [{"input_ids": ids, "labels": ids} for ids in enc]
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=6,
        per_device_train_batch_size=4,
        logging_steps=2,
        **TINY_CPU_RUN,
    )
    callback = RlpulseCallback(exporter)
    trainer = Trainer(
        model=tiny_gpt2(tokenizer), args=args, train_dataset=data, callbacks=[callback]
    )
    trainer.train()
    text = scrape(exporter.url)
    assert promtool_check_metrics(text).returncode == 0
    history = [h for h in trainer.state.log_history if "loss" in h]
    assert [h["step"] for h in history] == [2, 4, 6]
    assert check_logged(text, history[-1], "trl") >= 3  # loss, grad_norm, learning_rate
    assert value(text, STEP) == trainer.state.global_step == 6
    assert value(text, PHASE + "_count", phase="step") == 6
    assert value(text, catalog.get("rl_hyperparameter").name, name="learning_rate") == 1e-3
    assert exporter.dropped == {}


def test_only_world_process_zero_reports_unless_all_ranks(exporter: Exporter) -> None:
    args = TrainingArguments(output_dir="unused", report_to="none", use_cpu=True)
    control = TrainerControl()
    worker = TrainerState(global_step=3, is_world_process_zero=False)
    quiet = RlpulseCallback(exporter)
    quiet.on_train_begin(args, worker, control)
    quiet.on_log(args, worker, control, logs={"loss": 5.0})
    assert quiet.exporter is None
    loud = RlpulseCallback(exporter, all_ranks=True)
    loud.on_train_begin(args, worker, control)
    loud.on_step_begin(args, worker, control)
    loud.on_step_end(args, worker, control)
    loud.on_log(args, worker, control, logs={"loss": 0.5, "note": "text", "none": None})
    text = scrape(exporter.url)
    assert value(text, STEP) == 3  # its own liveness and step time
    assert value(text, f"{PHASE}_count", phase="step") == 1
    loss = catalog.get(keys.resolve("loss", "trl").metric).name  # type: ignore[union-attr]
    hyper = catalog.get("rl_hyperparameter").name
    # the gathered statistics and the run's settings are process zero's: not duplicated here
    assert not {loss, hyper} & {name for name, _ in samples(text)}
    zero = TrainerState(global_step=3, is_world_process_zero=True)
    loud.on_train_begin(args, zero, control)
    # TRL logs a metric NaN all window long (a reward function returning None) as None
    loud.on_log(args, zero, control, logs={"loss": 0.5, "note": "text", "reward": None})
    text = scrape(exporter.url)
    assert value(text, loss) == 0.5
    nonfinite = catalog.get("rl_nonfinite_values_total").name
    assert value(text, nonfinite, metric=catalog.get("rl_reward_mean").name) == 1
    assert value(text, hyper, name="learning_rate") == args.learning_rate
    assert exporter.dropped == {}


def test_train_end_finishes_only_an_exporter_the_callback_started(exporter: Exporter) -> None:
    args = TrainingArguments(output_dir="unused", report_to="none", use_cpu=True)
    state, control = TrainerState(global_step=2, is_world_process_zero=True), TrainerControl()
    given = RlpulseCallback(exporter)
    given.on_train_begin(args, state, control)
    given.on_train_end(args, state, control)
    assert exporter.serving  # the user's exporter: theirs to end
    rlpulse.close()
    own = RlpulseCallback(port=0, addr="127.0.0.1", run_id="trl-own", gpu=False, host=False)
    own.on_train_begin(args, state, control)
    started = own.exporter
    assert started is not None and started is rlpulse.get_exporter()
    own.on_train_end(args, state, control)
    assert rlpulse.get_exporter() is None and not started.serving


def test_grpo_trainer_exports_rewards_kl_and_lengths(
    tmp_path: Path, exporter: Exporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("RLPULSE_DATA_DIR", str(tmp_path / "data"))  # the rollout stores

    tokenizer = char_tokenizer()

    def vowels(completions: list[str], **_: Any) -> list[float]:
        return [sum(c in "aeiou" for c in text) / max(len(text), 1) for text in completions]

    prompts = Dataset.from_dict({"prompt": ["the cat", "a dog", "we go", "to sea"] * 4})
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=3,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        beta=0.1,
        logging_steps=1,
        **TINY_CPU_RUN,
    )
    model_dir = tmp_path / "tiny-gpt2"  # a local path: GRPO builds its reference model from it
    tiny_gpt2(tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    trainer = GRPOTrainer(
        model=str(model_dir),
        reward_funcs=[vowels],
        args=args,
        train_dataset=prompts,
        processing_class=tokenizer,
        callbacks=[RlpulseCallback(exporter)],
    )
    trainer.train()
    text = scrape(exporter.url)
    assert promtool_check_metrics(text).returncode == 0
    last = [h for h in trainer.state.log_history if "reward" in h][-1]
    for key in ("reward", "reward_std", "kl", "completions/mean_length"):
        assert key in last and keys.resolve(key, "trl") is not None, key
    assert check_logged(text, last, "trl") >= 6
    assert value(text, STEP) == 3
    # each generation batch is drift samples: the prompts' lengths, the responses and rewards
    feats = exporter.drift.features
    assert feats[("input", "prompt_length")].samples == 3 * 4 // 4  # a prompt per group
    assert feats[("behaviour", "reward[vowels]")].samples == 3 * 4
    assert ("behaviour", "response_length") in feats
    reward = keys.resolve("reward", "trl")
    assert reward is not None
    assert value(text, catalog.get(reward.metric).name) == pytest.approx(last["reward"])
    # every step's generations were recorded, with the reward function as a component, and the
    # viewer shows them after the run ended, best first, one click from the Reward panel's link
    assert exporter._recorder.flush(30)
    stored = query(open_run("test-run", tmp_path / "data"), Filter(order="best", limit=1000))
    assert {r["step"] for r in stored} == {1, 2, 3}
    assert all(set(r["components"]) == {"vowels"} for r in stored)
    assert [r["reward"] for r in stored] == sorted((r["reward"] for r in stored), reverse=True)
    assert all(r["prompt"] in ("the cat", "a dog", "we go", "to sea") for r in stored)
    assert all(r["advantage"] is not None and r["group_id"] for r in stored)
    viewer = serve(tmp_path / "data")
    try:
        url = f"http://127.0.0.1:{viewer.port}/view?run=test-run&order=best&step_min=2"
        with urllib.request.urlopen(url, timeout=10) as resp:
            page = resp.read().decode()
        assert f'id="r-{stored[0]["rollout_id"]}"' in page or "vowels" in page
        assert "<th>vowels</th>" in page
    finally:
        viewer.close()
