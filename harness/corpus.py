"""The real-log corpus (``../shared/corpus/real-logs``) as the tests see it: where it is, the
marker that skips a test when it is absent (a clone of the repository alone must pass), and
what each file holds as its README states it."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "real-logs"
needs_corpus = pytest.mark.skipif(
    not CORPUS.is_dir(), reason=f"the real-log corpus is absent ({CORPUS})"
)


class Expected(NamedTuple):
    """A corpus file's format, records, first and last step (None: not pinned), segments."""

    format: str
    records: int
    first: int
    last: int | None
    segments: int = 1


_TINKER = "tinker-cookbook/thinking-machines-lab__tinker-cookbook__tinker_cookbook__recipes__cog_rl"
_JOANVELJA = "tinker-cookbook/joanvelja__tinker-cookbook__reports__data__"
_DS_CHAT = (
    "deepspeed-chat/microsoft__DeepSpeedExamples__applications__DeepSpeed-Chat__training__"
    "step3_rlhf_finetuning__training_log_output__actor_opt-1.3b_critic_opt-350m_globalBatchSize64"
    ".log"
)
_RLLIB = "rllib/ray-project__rl-experiments__atari-"

FILES: dict[str, Expected] = {
    "trl/IMJONEZZ__UnslothGRPO__outputs_checkpoint-250_trainer_state.json": Expected(
        "trl", 250, 1, 250
    ),
    "trl/abdo-ashraf__Gemma-3-RL-Finetuning__outputs_checkpoint-250_trainer_state.json": Expected(
        "trl", 25, 10, 250
    ),
    "trl/samyakshrestha__grpo-verified-reasoner__outputs_checkpoint-1134_trainer_state.json": (
        Expected("trl", 226, 5, 1130)
    ),
    "trl/Rusheel86__Chaos-Economy__training_logs.json": Expected("trl", 50, 5, 250),
    "verl/volcengine__verl__examples_ppo_trainer_verl_getting_started.ipynb.outputs.log": Expected(
        "verl-log", 61, 0, 60
    ),
    "other/arvindcr4__tinker-rl-lab__experiments_results_arithmetic_metrics.jsonl": Expected(
        "jsonl", 100, 0, 99
    ),
    "sb3/DLR-RM__rl-trained-agents__ppo_LunarLander-v2_1_0.monitor.csv": Expected(
        "sb3-csv", 162, 77, None
    ),
    "other/morikatron__GAIL_PPO__sample_result_ppo_progress.csv": Expected("sb3-csv", 100, 0, 99),
    # ---- second batch ----
    "tinker-cookbook/astOwOlfo__tinker-cookbook-reward-hacking__big-run-reward-hacking-by-epoch"
    ".txt": Expected("env-digest", 120, 0, 1472, segments=5),
    f"{_TINKER}__results__experiment_1__training_metrics.jsonl": Expected("jsonl", 30, 0, 29),
    f"{_TINKER}__results__experiment_6__training_metrics.jsonl": Expected("jsonl", 80, 0, 79),
    f"{_TINKER}__results__experiment_7__training_metrics.jsonl": Expected("jsonl", 120, 0, 119),
    f"{_JOANVELJA}gptoss-20b-v2-metrics.jsonl": Expected("jsonl", 48, 0, 47),
    f"{_JOANVELJA}gptoss-20b-v3b-metrics.jsonl": Expected("jsonl", 82, 0, 74),
    f"{_JOANVELJA}qwen3-30b-instruct-v3b-metrics.jsonl": Expected("jsonl", 56, 0, 50),
    f"{_JOANVELJA}qwen3-30b-think-v3b-metrics.jsonl": Expected("jsonl", 25, 0, 22),
    _DS_CHAT: Expected("deepspeed-chat", 477, 0, 476),
    "dopamine/google__dopamine__baselines__atari__data__seaquest.json": Expected(
        "dopamine", 5970, 0, 198, segments=30
    ),
    f"{_RLLIB}apex__apex-results__APEX_BeamRiderNoFrameskip-v4_1_env=BeamRiderNoFrameskip-v4_"
    "2018-09-29_02-01-28uVT3Mg__result.json": Expected("rllib-json", 262, 1, 262),
    f"{_RLLIB}impala__results__IMPALA_BreakoutNoFrameskip-v4_0_env=BreakoutNoFrameskip-v4_"
    "2018-08-20_22-26-08DAqy01__progress.csv": Expected("rllib-csv", 266, 1, 266),
    "sb3/SpencerCPurdy__Deep_Reinforcement_Learning_Market_Maker_with_Order_Book_Dynamics__"
    "training_metrics.json": Expected("sb3-eval-json", 60, 25_000, 1_500_000),
}


def corpus_file(prefix: str) -> Path:
    """The one corpus file whose relative path starts with ``prefix``."""
    (name,) = (n for n in FILES if n.startswith(prefix))
    return CORPUS / name
