"""Framework key maps: the keys trainers log, mapped onto catalog metrics.

One declarative table per framework (:data:`MAPS`), each made of sources (the file in the
framework's repository where the keys were checked). A source has exact keys and patterns; a
pattern is a template such as ``rewards/{component}/mean`` whose placeholders become label values:

* ``{label}`` one path segment, captured as ``label``; ``{label+}`` one or more segments;
* ``{*}`` one segment, not captured; ``{#}`` digits, not captured.

A key mapped to ``None`` is known and deliberately left to ``rl_unmapped_metric`` (no catalog
metric fits); it also stops the search, so a later framework's pattern cannot claim it.

:func:`resolve` looks a key up in this order, first hit wins:

1. with ``framework=``, that framework's map, then the whole search below;
2. exact keys of every framework in :data:`FRAMEWORKS` order, then their patterns;
3. the same with a wrapper prefix removed: ``train/`` (HF/OpenRLHF W&B and TensorBoard
   callbacks) gives the inner key's target; ``eval/`` and ``eval_`` (HF evaluation) turn a
   reward, success or episode-return target into ``rl_eval_score{split="eval"}`` and leave any
   other evaluation key unmapped, so evaluation values never overwrite training series.

:data:`FRAMEWORKS` puts the LLM trainers first: with ``framework=None`` a bare ``kl`` is TRL's and
OpenRLHF's KL to the reference policy, not OpenAI baselines' update KL.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from rlpulse import catalog, safeyaml

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Target:
    """Where one logged key goes: a catalog metric, its label values, a value multiplier and
    an offset added after it (an episode index counted from 0 is one short of the count)."""

    metric: str
    labels: Labels = ()
    scale: float = 1.0
    offset: float = 0.0


def _t(metric_name: str, scale: float = 1.0, /, **labels: str) -> Target:
    """A target on a catalog metric, fixed labels kept in the catalog's order."""
    metric = catalog.get(metric_name)
    unknown = set(labels) - set(metric.labels)
    if unknown:
        raise ValueError(f"{metric_name} has no label(s) {sorted(unknown)}")
    return Target(metric.name, tuple((k, labels[k]) for k in metric.labels if k in labels), scale)


_PLACEHOLDER = re.compile(r"\{(\*|#|[a-z_]+\+?)\}")


def _compile(template: str) -> re.Pattern[str]:
    parts, pos = [], 0
    for m in _PLACEHOLDER.finditer(template):
        parts.append(re.escape(template[pos : m.start()]))
        token = m.group(1)
        if token == "*":
            parts.append(r"[^/]+")
        elif token == "#":
            parts.append(r"\d+")
        elif token.endswith("+"):
            parts.append(f"(?P<{token[:-1]}>.+)")
        else:
            parts.append(f"(?P<{token}>[^/]+)")
        pos = m.end()
    parts.append(re.escape(template[pos:]))
    return re.compile("".join(parts))


@dataclass(frozen=True)
class _Pattern:
    template: str
    target: Target | None
    regex: re.Pattern[str] = field(init=False)
    order: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        regex = _compile(self.template)
        object.__setattr__(self, "regex", regex)
        if self.target is None:
            object.__setattr__(self, "order", ())
            return
        labels = catalog.get(self.target.metric).labels
        given = set(regex.groupindex) | {k for k, _ in self.target.labels}
        if given != set(labels):
            raise ValueError(f"{self.template!r}: labels {sorted(given)} != {labels}")
        object.__setattr__(self, "order", labels)

    def match(self, key: str) -> tuple[bool, Target | None]:
        m = self.regex.fullmatch(key)
        if m is None:
            return False, None
        if self.target is None:
            return True, None
        values = {**dict(self.target.labels), **m.groupdict()}
        labels = tuple((k, values[k]) for k in self.order)
        return True, dataclasses.replace(self.target, labels=labels)


@dataclass(frozen=True)
class Source:
    """Keys checked in one file of a framework's repository (``where``: "owner/repo: path")."""

    where: str
    exact: Mapping[str, Target | None] = field(default_factory=dict)
    patterns: Mapping[str, Target | None] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class KeyMap:
    """One framework's table: exact keys and patterns, gathered from its sources."""

    framework: str
    sources: tuple[Source, ...]
    exact: dict[str, Target | None] = field(init=False)
    patterns: tuple[_Pattern, ...] = field(init=False)

    def __post_init__(self) -> None:
        exact: dict[str, Target | None] = {}
        for source in self.sources:
            stray = set(source.notes) - set(source.exact) - set(source.patterns)
            if stray:
                raise ValueError(f"{self.framework}: notes for unknown keys {sorted(stray)}")
            for key, target in source.exact.items():
                if key in exact and exact[key] != target:
                    raise ValueError(f"{self.framework}: {key!r} mapped twice")
                if target is not None:
                    _check_labels(key, target)
                exact[key] = target
        object.__setattr__(self, "exact", exact)
        pats = tuple(_Pattern(t, tg) for s in self.sources for t, tg in s.patterns.items())
        object.__setattr__(self, "patterns", pats)


def _check_labels(key: str, target: Target) -> None:
    expected = catalog.get(target.metric).labels
    if tuple(k for k, _ in target.labels) != expected:
        raise ValueError(f"{key!r}: {target.metric} needs labels {expected}")


# ---- targets used by several tables -------------------------------------------------------------
_REWARD, _REWARD_STD = _t("rl_reward_mean"), _t("rl_reward_std")
_REWARD_MIN, _REWARD_MAX = _t("rl_reward_min"), _t("rl_reward_max")
_COMPONENT, _COMPONENT_STD = _t("rl_reward_component_mean"), _t("rl_reward_component_std")
_KL_REF, _KL_COEF, _APPROX_KL = _t("rl_kl_reference"), _t("rl_kl_coefficient"), _t("rl_approx_kl")
_ENTROPY = _t("rl_entropy")
_CLIP, _CLIP_LOW = (
    _t("rl_clip_fraction_ratio", bound="any"),
    _t("rl_clip_fraction_ratio", bound="low"),
)
_CLIP_HIGH = _t("rl_clip_fraction_ratio", bound="high")
_VALUE_CLIP = _t("rl_value_clip_fraction_ratio")
_LOSS, _POLICY_LOSS, _VALUE_LOSS = _t("rl_loss"), _t("rl_policy_loss"), _t("rl_value_loss")
_EXPLAINED_VAR = _t("rl_explained_variance")
_GRAD_POLICY, _GRAD_CRITIC = (
    _t("rl_grad_norm", network="policy"),
    _t("rl_grad_norm", network="critic"),
)
_LR_POLICY = _t("rl_learning_rate", network="policy")
_LR_CRITIC = _t("rl_learning_rate", network="critic")
_ADV_MEAN, _RETURN, _VALUE = _t("rl_advantage_mean"), _t("rl_return_mean"), _t("rl_value_mean")
_LEN_MEAN = _t("rl_response_length_mean_tokens")
_LEN_MAX, _LEN_MIN = _t("rl_response_length_max_tokens"), _t("rl_response_length_min_tokens")
_TRUNCATION = _t("rl_truncation_ratio")
_STEP, _TRAIN_STEPS = _t("rl_step"), _t("rl_train_steps_total")
_ENV_STEPS, _EPISODES, _SAMPLES = (
    _t("rl_env_steps_total"),
    _t("rl_episodes_total"),
    _t("rl_samples_total"),
)
_EP_RETURN, _EP_LENGTH = _t("rl_episode_return"), _t("rl_episode_length_steps")
_SUCCESS = _t("rl_success_ratio")
_PHASE = _t("rl_phase_last_duration_seconds")
_FPS = _t("rl_throughput_per_second", unit="env_steps")
_EVAL = _t("rl_eval_score", split="eval")
_EVAL_RETURN = _t("rl_eval_score", benchmark="episode_return", split="eval")
_EVAL_SUCCESS = _t("rl_eval_score", benchmark="success", split="eval")
_IS_MEAN, _IS_MIN = _t("rl_importance_ratio_mean"), _t("rl_importance_ratio_min")
_IS_MAX = _t("rl_importance_ratio_max")
_FORMAT = _t("rl_format_compliance_ratio")
_EVAL_CORRECT = _t("rl_eval_score", benchmark="correct", split="eval")
_KL_PENALTY_COEF = _t("rl_kl_coefficient")


OBJECTIVE = "objective"


def objective(key: str) -> Target:
    """Where a key declared the run's true objective goes: ``rl_eval_score{benchmark=<key>,
    split="objective"}`` (a correctness or held-out score that reward hacking cannot raise)."""
    return _t("rl_eval_score", benchmark=key, split=OBJECTIVE)


def _hparam(name: str, scale: float = 1.0) -> Target:
    return _t("rl_hyperparameter", scale, name=name)


def _rollout_kl(estimator: str) -> Target:
    return _t("rl_rollout_kl", estimator=estimator)


def _outcome(outcome: str) -> Target:
    return _t("rl_group_outcome_ratio", outcome=outcome)


# ---- the tables ---------------------------------------------------------------------------------
TRL = KeyMap(
    "trl",
    (
        Source(
            "huggingface/trl: trl/trainer/grpo_trainer.py",
            exact={
                "reward": _REWARD,
                "reward_std": _REWARD_STD,
                "frac_reward_zero_std": _t("rl_zero_std_groups_ratio"),
                "kl": _KL_REF,
                "entropy": _ENTROPY,
                "completion_length": _LEN_MEAN,
                "completions/mean_length": _LEN_MEAN,
                "completions/max_length": _LEN_MAX,
                "completions/min_length": _LEN_MIN,
                "completions/clipped_ratio": _TRUNCATION,
                "completions/mean_terminated_length": None,
                "completions/max_terminated_length": None,
                "completions/min_terminated_length": None,
                "clip_ratio/region_mean": _CLIP,
                "clip_ratio/low_mean": _CLIP_LOW,
                "clip_ratio/high_mean": _CLIP_HIGH,
                "clip_ratio/low_min": None,
                "clip_ratio/high_max": None,
                "clip_ratio": _CLIP,
                "sampling/importance_sampling_ratio/mean": _IS_MEAN,
                "sampling/importance_sampling_ratio/min": _IS_MIN,
                "sampling/importance_sampling_ratio/max": _IS_MAX,
                "sampling/sampling_logp_difference/mean": _t("rl_logprob_mismatch"),
                "sampling/sampling_logp_difference/max": None,
                "num_tokens": None,
            },
            patterns={
                "rewards/{component}/mean": _COMPONENT,
                "rewards/{component}/std": _COMPONENT_STD,
                "rewards/{component}": _COMPONENT,
            },
            notes={
                "completion_length": "older TRL name of completions/mean_length",
                "rewards/{component}": "older TRL name of rewards/{component}/mean",
                "clip_ratio": "the Liger GRPO loss reports one clip ratio",
                "num_tokens": "prompt + completion tokens seen, no split catalog counter",
            },
        ),
        Source(
            "huggingface/transformers: src/transformers/trainer.py (Trainer.log, log_history)",
            exact={
                "loss": _LOSS,
                "grad_norm": _GRAD_POLICY,
                "learning_rate": _LR_POLICY,
                "step": _STEP,
                "epoch": None,
            },
        ),
        Source(
            "huggingface/trl: trl/trainer/ppo_trainer.py (PPOTrainer.train, current)",
            exact={
                "objective/kl": _KL_REF,
                "objective/scores": _REWARD,
                "objective/entropy": None,
                "objective/non_score_reward": None,
                "objective/rlhf_reward": None,
                "policy/approxkl_avg": _APPROX_KL,
                "policy/clipfrac_avg": _CLIP,
                "policy/entropy_avg": _ENTROPY,
                "loss/policy_avg": _POLICY_LOSS,
                "loss/value_avg": _VALUE_LOSS,
                "val/clipfrac_avg": _VALUE_CLIP,
                "val/ratio": None,
                "val/ratio_var": None,
                "val/num_eos_tokens": None,
                "lr": _LR_POLICY,
                "episode": _SAMPLES,
                "eps": _t("rl_throughput_per_second", unit="episodes"),
            },
            notes={
                "objective/entropy": "sum of -log p over the sequence, not a per-token entropy",
                "val/ratio": "new/old policy ratio of the update, not train/inference",
                "episode": "cumulative prompt-completion pairs",
            },
        ),
        Source(
            "huggingface/trl: trl/trainer/ppo_trainer.py (legacy record_step_stats)",
            exact={
                "env/reward_mean": _REWARD,
                "env/reward_std": _REWARD_STD,
                "ppo/mean_scores": _REWARD,
                "ppo/std_scores": _REWARD_STD,
                "objective/kl_coef": _KL_COEF,
                "ppo/mean_non_score_reward": None,
                "ppo/learning_rate": _LR_POLICY,
                "ppo/policy/entropy": _ENTROPY,
                "ppo/policy/clipfrac": _CLIP,
                "ppo/policy/approxkl": _APPROX_KL,
                "ppo/policy/policykl": None,
                "ppo/policy/advantages_mean": _ADV_MEAN,
                "ppo/returns/mean": _RETURN,
                "ppo/val/mean": _VALUE,
                "ppo/val/var_explained": _EXPLAINED_VAR,
                "ppo/val/clipfrac": _VALUE_CLIP,
                "ppo/loss/policy": _POLICY_LOSS,
                "ppo/loss/value": _VALUE_LOSS,
                "ppo/loss/total": _LOSS,
                "tokens/responses_len_mean": _LEN_MEAN,
            },
            notes={"ppo/policy/policykl": "k1 twin of ppo/policy/approxkl"},
        ),
    ),
)

VERL = KeyMap(
    "verl",
    (
        Source(
            "volcengine/verl: verl/trainer/ppo/metric_utils.py",
            exact={
                "critic/score/mean": _REWARD,
                "critic/score/max": _REWARD_MAX,
                "critic/score/min": _REWARD_MIN,
                "critic/rewards/mean": None,
                "critic/rewards/max": None,
                "critic/rewards/min": None,
                "critic/advantages/mean": _ADV_MEAN,
                "critic/advantages/max": _t("rl_advantage_max"),
                "critic/advantages/min": _t("rl_advantage_min"),
                "critic/returns/mean": _RETURN,
                "critic/returns/max": None,
                "critic/returns/min": None,
                "critic/values/mean": _VALUE,
                "critic/values/max": None,
                "critic/values/min": None,
                "critic/vf_explained_var": _EXPLAINED_VAR,
                "response_length/mean": _LEN_MEAN,
                "response_length/max": _LEN_MAX,
                "response_length/min": _LEN_MIN,
                "response_length/clip_ratio": _TRUNCATION,
                "prompt_length/mean": None,
                "prompt_length/max": None,
                "prompt_length/min": None,
                "prompt_length/clip_ratio": None,
                "perf/throughput": _t("rl_throughput_per_second", unit="tokens_per_gpu"),
                "perf/time_per_step": _t("rl_phase_last_duration_seconds", phase="step"),
                "perf/total_num_tokens": None,
            },
            patterns={
                "timing_s/{phase}": _PHASE,
                "timing/{phase}": _PHASE,
                "timing_per_token_ms/{*}": None,
                "timing_per_token/{*}": None,
            },
            notes={
                "critic/rewards/mean": "score minus the in-reward KL penalty",
                "timing/{phase}": "older verl name of timing_s/{phase}",
            },
        ),
        Source(
            "volcengine/verl: verl/trainer/ppo/ray_trainer.py",
            exact={
                "training/global_step": _STEP,
                "training/epoch": None,
                "critic/kl": _KL_REF,
                "critic/kl_coeff": _KL_COEF,
                "actor/reward_kl_penalty": _KL_REF,
                "actor/reward_kl_penalty_coeff": _KL_COEF,
                "training/rollout_probs_diff_mean": _t("rl_logprob_mismatch"),
                "training/rollout_probs_diff_max": None,
                "training/rollout_probs_diff_std": None,
            },
            patterns={
                "val-core/{benchmark+}/{*}/mean@{#}": _EVAL,
                "val/test_score/{benchmark+}": _EVAL,
            },
            notes={
                "critic/kl": "older verl name of actor/reward_kl_penalty (KL in the reward)",
                "val-core/{benchmark+}/{*}/mean@{#}": "benchmark: data_source; {*}: acc or reward",
                "val/test_score/{benchmark+}": "older verl validation key",
            },
        ),
        Source(
            "volcengine/verl: verl/workers/actor/dp_actor.py, verl/trainer/ppo/core_algos.py",
            exact={
                "actor/entropy": _ENTROPY,
                "actor/entropy_loss": _ENTROPY,
                "actor/pg_loss": _POLICY_LOSS,
                "actor/pg_clipfrac": _CLIP,
                "actor/pg_clipfrac_lower": _t("rl_clip_fraction_ratio", bound="dual"),
                "actor/ppo_kl": _APPROX_KL,
                "actor/kl_loss": _KL_REF,
                "actor/kl_coef": _KL_COEF,
                "actor/grad_norm": _GRAD_POLICY,
            },
            notes={
                "actor/entropy_loss": "older verl name; the value is the entropy itself",
                "actor/pg_clipfrac_lower": "dual clip: advantage < 0 and ratio > clip_ratio_c",
            },
        ),
        Source(
            "volcengine/verl: verl/workers/critic/dp_critic.py, verl/workers/fsdp_workers.py",
            exact={
                "critic/vf_loss": _VALUE_LOSS,
                "critic/vf_clipfrac": _VALUE_CLIP,
                "critic/vpred_mean": None,
                "critic/grad_norm": _GRAD_CRITIC,
                "critic/lr": _LR_CRITIC,
                "actor/lr": _LR_POLICY,
            },
        ),
        Source(
            "volcengine/verl: verl/trainer/ppo/rollout_corr_helper.py",
            exact={
                "rollout_corr/rollout_is_mean": _IS_MEAN,
                "rollout_corr/rollout_is_min": _IS_MIN,
                "rollout_corr/rollout_is_max": _IS_MAX,
                "rollout_corr/kl": _rollout_kl("k1"),
                "rollout_corr/k3_kl": _rollout_kl("k3"),
            },
        ),
    ),
)

OPENRLHF = KeyMap(
    "openrlhf",
    (
        Source(
            "OpenRLHF/OpenRLHF: openrlhf/trainer/ray/ppo_actor.py",
            exact={
                "policy_loss": _POLICY_LOSS,
                "actor_lr": _LR_POLICY,
                "entropy_loss": _ENTROPY,
                "ppo_clip_ratio": _CLIP,
                "clip_ratio": _CLIP,
                "ppo_kl": _APPROX_KL,
                "ptx_loss": None,
                "vllm_kl": None,
                "actor_grad_norm": _GRAD_POLICY,
                "policy_kl": _APPROX_KL,
                "logprobs_diff": _t("rl_logprob_mismatch"),
            },
            notes={
                "entropy_loss": "the mean entropy itself (subtracted from the loss)",
                "policy_kl": "newer name of ppo_kl (old vs new policy)",
                "logprobs_diff": "rollout-engine vs trainer log-probs of the same tokens",
            },
        ),
        Source(
            "OpenRLHF/OpenRLHF: openrlhf/trainer/ppo_utils/experience_maker.py (Experience.info)",
            exact={
                "kl": _KL_REF,
                "reward": _REWARD,
                "return": _RETURN,
                "response_length": _LEN_MEAN,
                "total_length": None,
            },
            notes={"return": "sum of the KL-shaped token rewards of a sequence"},
        ),
        Source(
            "OpenRLHF/OpenRLHF: openrlhf/trainer/ray/ppo_critic.py",
            exact={
                "critic_loss": _VALUE_LOSS,
                "values": _VALUE,
                "critic_lr": _LR_CRITIC,
            },
        ),
        Source(
            "OpenRLHF/OpenRLHF: openrlhf/trainer/ppo_trainer.py (evaluate, save_logs)",
            exact={"global_step": _STEP},
            patterns={"eval_{benchmark+}_pass1": _EVAL, "eval_{*}_pass{#}": None},
            notes={"eval_{*}_pass{#}": "pass@k for k > 1 is a different statistic"},
        ),
    ),
)

SB3 = KeyMap(
    "sb3",
    (
        Source(
            "DLR-RM/stable-baselines3: stable_baselines3/common/on_policy_algorithm.py, "
            "off_policy_algorithm.py (_dump_logs)",
            exact={
                "rollout/ep_rew_mean": _EP_RETURN,
                "rollout/ep_len_mean": _EP_LENGTH,
                "rollout/success_rate": _SUCCESS,
                "time/fps": _FPS,
                "time/total_timesteps": _ENV_STEPS,
                "time/episodes": _EPISODES,
                "time/iterations": None,
                "time/time_elapsed": None,
            },
        ),
        Source(
            "DLR-RM/stable-baselines3: stable_baselines3/ppo/ppo.py, a2c/a2c.py, "
            "common/base_class.py",
            exact={
                "train/entropy_loss": _t("rl_entropy", -1.0),
                "train/policy_gradient_loss": _POLICY_LOSS,
                "train/policy_loss": _POLICY_LOSS,
                "train/value_loss": _VALUE_LOSS,
                "train/approx_kl": _APPROX_KL,
                "train/clip_fraction": _CLIP,
                "train/clip_range": _hparam("clip_range"),
                "train/clip_range_vf": _hparam("clip_range_vf"),
                "train/loss": _LOSS,
                "train/explained_variance": _EXPLAINED_VAR,
                "train/learning_rate": _LR_POLICY,
                "train/n_updates": None,
                "train/std": None,
            },
            notes={
                "train/entropy_loss": "SB3 logs minus the entropy",
                "train/n_updates": "the update counter: SB3's callback passes it as log()'s step, "
                "which drives rl_train_steps_total (a key feeding it too went backwards)",
                "train/loss": "PPO: total loss; DQN: the TD loss",
            },
        ),
        Source(
            "DLR-RM/stable-baselines3: stable_baselines3/dqn/dqn.py, sac/sac.py, td3/td3.py",
            exact={
                "rollout/exploration_rate": _hparam("exploration_rate"),
                "train/actor_loss": _POLICY_LOSS,
                "train/critic_loss": _VALUE_LOSS,
                "train/ent_coef": _hparam("ent_coef"),
                "train/ent_coef_loss": None,
            },
        ),
        Source(
            "DLR-RM/stable-baselines3: stable_baselines3/common/callbacks.py (EvalCallback)",
            exact={
                "eval/mean_reward": _EVAL_RETURN,
                "eval/success_rate": _EVAL_SUCCESS,
                "eval/mean_ep_length": None,
            },
        ),
    ),
)

CLEANRL = KeyMap(
    "cleanrl",
    (
        Source(
            "vwxyzjn/cleanrl: cleanrl/ppo.py (and ppo_* variants)",
            exact={
                "charts/episodic_return": _EP_RETURN,
                "charts/episodic_length": _EP_LENGTH,
                "charts/episode_reward": _EP_RETURN,
                "charts/learning_rate": _LR_POLICY,
                "charts/SPS": _FPS,
                "losses/value_loss": _VALUE_LOSS,
                "losses/policy_loss": _POLICY_LOSS,
                "losses/entropy": _ENTROPY,
                "losses/approx_kl": _APPROX_KL,
                "losses/old_approx_kl": None,
                "losses/clipfrac": _CLIP,
                "losses/explained_variance": _EXPLAINED_VAR,
            },
            notes={
                "charts/episode_reward": "early CleanRL name of charts/episodic_return",
                "losses/old_approx_kl": "k1 twin of losses/approx_kl",
            },
        ),
        Source(
            "vwxyzjn/cleanrl: cleanrl/dqn.py, sac_continuous_action.py, td3_continuous_action.py",
            exact={
                "charts/epsilon": _hparam("exploration_rate"),
                "losses/td_loss": _VALUE_LOSS,
                "losses/q_values": _VALUE,
                "losses/qf_loss": _VALUE_LOSS,
                "losses/qf1_loss": None,
                "losses/qf2_loss": None,
                "losses/qf1_values": _VALUE,
                "losses/qf2_values": None,
                "losses/actor_loss": _POLICY_LOSS,
                "losses/alpha": _hparam("ent_coef"),
                "losses/alpha_loss": None,
            },
        ),
    ),
)

TINKER = KeyMap(
    "tinker",
    (
        Source(
            "thinking-machines-lab/tinker-cookbook: tinker_cookbook/rl/metric_util.py",
            exact={
                "env/all/reward/total": _REWARD,
                "env/all/by_group/frac_all_good": _outcome("all_good"),
                "env/all/by_group/frac_all_bad": _outcome("all_bad"),
                "env/all/by_group/frac_mixed": _outcome("mixed"),
                "env/all/ac_tokens_per_turn": _LEN_MEAN,
                "env/all/ob_tokens_per_turn": None,
                "env/all/turns_per_episode": None,
                "env/all/total_episodes": None,
                "env/all/total_turns": None,
                "env/all/total_ac_tokens": None,
                "env/all/total_ob_tokens": None,
                "test/env/all/reward/total": _t("rl_eval_score", benchmark="all", split="eval"),
            },
            patterns={"test/{benchmark+}/env/all/reward/total": _EVAL},
            notes={
                "env/all/ac_tokens_per_turn": "per policy turn (= per response when single-turn)",
                "env/all/total_episodes": "per batch, not cumulative",
            },
        ),
        Source(
            "thinking-machines-lab/tinker-cookbook: tinker_cookbook/rl/problem_env.py",
            exact={
                "env/all/correct": _SUCCESS,
                "env/all/format": _FORMAT,
                "env/all/format_boxed": _FORMAT,
                "env/all/format_eos": _t("rl_completion_eos_ratio"),
                "test/env/all/correct": _EVAL_CORRECT,
            },
            patterns={"test/{*}/env/all/correct": _EVAL_CORRECT},
            notes={
                "env/all/format_boxed": "forks' name of env/all/format (answer in \\boxed{})",
                "env/all/format_eos": "share of responses that end in EOS: read as 1 - truncation",
                "test/{*}/env/all/correct": "an evaluator's held-out correctness",
            },
        ),
        Source(
            "thinking-machines-lab/tinker-cookbook: tinker_cookbook/rl/train.py (async, "
            "incorporate_kl_penalty), recipes/*/train.py (metrics.jsonl)",
            exact={
                "kl_policy_base": _KL_REF,
                "unclipped_grad_l2:mean": _GRAD_POLICY,
                "training_client/step": None,
                "sampling_client/step_max": None,
                "sampling_client/step_mean": None,
                "sampling_client/step_min": None,
                "reward/mean": _REWARD,
                "reward/pass@1": _SUCCESS,
                "data/num_datums": None,
                "data/num_rollouts": None,
            },
            notes={
                "kl_policy_base": "KL of the policy to the base model (the KL penalty's)",
                "unclipped_grad_l2:mean": "gradient L2 norm before clipping",
                "data/num_datums": "datums kept after constant-reward groups are dropped",
            },
        ),
        Source(
            "thinking-machines-lab/tinker-cookbook: tinker_cookbook/rl/train.py, rl/metrics.py, "
            "utils/misc_utils.py (timed)",
            exact={
                "step": _STEP,
                "progress/batch": _STEP,
                "progress/done_frac": None,
                "optim/lr": _LR_POLICY,
                "optim/entropy": _ENTROPY,
                "optim/kl_sample_train_v1": _rollout_kl("k1"),
                "optim/kl_sample_train_v2": _rollout_kl("k2"),
            },
            patterns={"time/{phase}": _PHASE},
        ),
    ),
)

BASELINES = KeyMap(
    "baselines",
    (
        Source(
            "openai/baselines: baselines/ppo2/ppo2.py (logger.logkv)",
            exact={
                "eprewmean": _EP_RETURN,
                "eplenmean": _EP_LENGTH,
                "fps": _FPS,
                "misc/total_timesteps": _ENV_STEPS,
                "total_timesteps": _ENV_STEPS,
                "misc/nupdates": _TRAIN_STEPS,
                "nupdates": _TRAIN_STEPS,
                "misc/explained_variance": _EXPLAINED_VAR,
                "explained_variance": _EXPLAINED_VAR,
                "misc/serial_timesteps": None,
                "serial_timesteps": None,
                "misc/time_elapsed": None,
                "time_elapsed": None,
                "loss/policy_loss": _POLICY_LOSS,
                "policy_loss": _POLICY_LOSS,
                "loss/value_loss": _VALUE_LOSS,
                "value_loss": _VALUE_LOSS,
                "loss/policy_entropy": _ENTROPY,
                "policy_entropy": _ENTROPY,
                "loss/approxkl": _APPROX_KL,
                "approxkl": _APPROX_KL,
                "loss/clipfrac": _CLIP,
                "clipfrac": _CLIP,
            },
        ),
        Source(
            "openai/baselines: baselines/deepq/deepq.py (logger.record_tabular)",
            exact={
                "steps": _ENV_STEPS,
                "episodes": _EPISODES,
                "mean 100 episode reward": _EP_RETURN,
                "% time spent exploring": _hparam("exploration_rate", 0.01),
            },
            notes={"% time spent exploring": "a percent"},
        ),
        Source(
            "morikatron/GAIL_PPO: algo/run.py, ppo.py (baselines logger)",
            exact={
                "loss": _LOSS,
                "policy loss": _POLICY_LOSS,
                "value loss": _VALUE_LOSS,
                "entropy loss": _ENTROPY,
                "kl": _APPROX_KL,
                "frac": _CLIP,
                "num episodes": _EPISODES,
                "max 100 episode reward": None,
                "min 100 episode reward": None,
            },
            notes={
                "entropy loss": "the mean entropy itself (subtracted from the loss)",
                "kl": "KL between the policy before and after the update",
            },
        ),
    ),
)


def _learner(stats: Mapping[str, Target | None]) -> dict[str, Target | None]:
    """RLlib learner stats under every layout its results have used."""
    layouts = (
        "info/learner/{stat}",  # 2018 (one policy)
        "info/learner/{{*}}/{stat}",  # per policy id
        "info/learner/{{*}}/learner_stats/{stat}",  # Ray 1.x-2.x
        "learners/{{*}}/{stat}",  # new API stack, per module id
    )
    return {layout.format(stat=stat): t for stat, t in stats.items() for layout in layouts}


RLLIB = KeyMap(
    "rllib",
    (
        Source(
            "ray-project/ray: rllib/evaluation/metrics.py (summarize_episodes), "
            "tune/result.py (result.json / progress.csv)",
            exact={
                "episode_reward_mean": _EP_RETURN,
                "episode_reward_min": None,
                "episode_reward_max": None,
                "episode_len_mean": _EP_LENGTH,
                "episodes_this_iter": None,
                "episodes_total": None,
                "episodes": None,
                "timesteps_total": _ENV_STEPS,
                "timesteps_this_iter": None,
                "timesteps_since_restore": None,
                "training_iteration": _STEP,
                "iterations_since_restore": None,
                "time_this_iter_s": _t("rl_phase_last_duration_seconds", phase="iteration"),
                "time_total_s": None,
                "time_since_restore": None,
                "sampler_results/episode_reward_mean": _EP_RETURN,
                "sampler_results/episode_len_mean": _EP_LENGTH,
                "env_runners/episode_return_mean": _EP_RETURN,
                "env_runners/episode_reward_mean": _EP_RETURN,
                "env_runners/episode_len_mean": _EP_LENGTH,
                "evaluation/episode_reward_mean": _EVAL_RETURN,
                "evaluation/env_runners/episode_return_mean": _EVAL_RETURN,
                "info/num_steps_trained": None,
                "info/num_steps_sampled": None,
                "info/sample_throughput": _FPS,
                "info/train_throughput": None,
                "info/num_weight_syncs": None,
                "info/num_target_updates": None,
                "info/max_exploration": None,
                "info/min_exploration": None,
            },
            patterns={"policy_reward_mean/{*}": None},
            notes={
                "episode_reward_mean": "NaN in an iteration where no episode finished: the log "
                "reader leaves it out (no value, not a NaN reward)",
                "episode_reward_min": "of the episodes in the metrics window",
                "episodes_total": "per iteration in 2018 results, cumulative later: no counter",
                "episodes": "2018 name of episodes_this_iter",
                "info/max_exploration": "Ape-X: the largest per-worker epsilon",
            },
        ),
        Source(
            "ray-project/ray: rllib/algorithms/ppo, impala, dqn (learner stats)",
            patterns=_learner(
                {
                    "entropy": _ENTROPY,
                    "policy_loss": _POLICY_LOSS,
                    "vf_loss": _VALUE_LOSS,
                    "total_loss": _LOSS,
                    "vf_explained_var": _EXPLAINED_VAR,
                    "grad_gnorm": _GRAD_POLICY,
                    "cur_lr": _LR_POLICY,
                    "kl": _APPROX_KL,
                    "cur_kl_coeff": _KL_PENALTY_COEF,
                    "entropy_coeff": _hparam("ent_coef"),
                    "mean_q": _VALUE,
                    "mean_td_error": None,
                    "var_gnorm": None,
                }
            ),
            notes={
                "info/learner/entropy": "2018 IMPALA: summed over the batch, not a mean",
                "info/learner/{*}/learner_stats/grad_gnorm": "after clipping (grad_clip)",
            },
        ),
    ),
)

DEEPSPEED_CHAT = KeyMap(
    "deepspeed-chat",
    (
        Source(
            "microsoft/DeepSpeedExamples: applications/DeepSpeed-Chat/training/"
            "step3_rlhf_finetuning/main.py (console and TensorBoard)",
            exact={
                "act_loss": _POLICY_LOSS,
                "actor_loss": _POLICY_LOSS,
                "cri_loss": _VALUE_LOSS,
                "critic_loss": _VALUE_LOSS,
                "unsuper_loss": None,
                "unsupervised_loss": None,
                "average_reward_score": _REWARD,
                "reward": _REWARD,
                "ppo_ep": None,
                "ppo_epoch": None,
                "epoch": None,
                "overflow_skipped_steps": None,
            },
            notes={
                "average_reward_score": "console line 'average reward score: …' (reward model)",
                "reward": "the TensorBoard tag of the same value",
                "overflow_skipped_steps": "fp16 OVERFLOW lines (loss scaling), counted per step",
            },
        ),
        Source(
            "microsoft/DeepSpeedExamples: applications/DeepSpeed-Chat/dschat/utils/perf.py "
            "(print_throughput_step3)",
            exact={
                "e2e_latency": _t("rl_phase_last_duration_seconds", phase="step"),
                "generate_time": _t("rl_phase_last_duration_seconds", phase="generate"),
                "training_time": _t("rl_phase_last_duration_seconds", phase="update"),
                "gather_latency": None,
                "others": None,
                "cursamplespersec": _t("rl_throughput_per_second", unit="samples"),
                "avgsamplespersec": None,
            },
        ),
    ),
)

DOPAMINE = KeyMap(
    "dopamine",
    (
        Source(
            "google/dopamine: dopamine/discrete_domains/run_experiment.py (_save_tensorboard_"
            "summaries)",
            exact={
                "Train/AverageReturns": _EP_RETURN,
                "Train/NumEpisodes": None,
                "Train/AverageStepsPerSecond": _FPS,
                "Train/AverageNormalizedScore": None,
                "Eval/AverageReturns": _EVAL_RETURN,
                "Eval/NumEpisodes": None,
            },
            notes={"Train/AverageReturns": "baseline JSON's Value: mean training return"},
        ),
    ),
)

CLASSIC = KeyMap(
    "classic",
    (
        Source(
            "W&B-style classic-RL scripts: wandb.log({'episode_reward': …, 'episode': …}), "
            "CleanRL and SB3 keys without their section prefix",
            exact={
                "episode_reward": _EP_RETURN,
                "episodic_return": _EP_RETURN,
                "episode_return": _EP_RETURN,
                "episode_length": _EP_LENGTH,
                "episodic_length": _EP_LENGTH,
                "success_rate": _SUCCESS,
                "epsilon": _hparam("exploration_rate"),
                "td_loss": _VALUE_LOSS,
                "q_values": _VALUE,
                "q_value": _VALUE,
                "reward": _EP_RETURN,
                "episode": dataclasses.replace(_EPISODES, offset=1.0),
            },
            notes={
                "reward": "an episode's return; only with framework=classic (else TRL's batch)",
                "episode": "the episode's index from 0 (`for e in range(N)`): e + 1 episodes "
                "ran; only with framework=classic (TRL: samples)",
                "q_values": "mean predicted Q-value",
            },
        ),
    ),
)

GENERIC = KeyMap(
    "generic",
    (
        Source(
            "custom LLM-RL trainers' W&B keys (the reward-hacking runs of issue 13)",
            exact={
                "reward/std": _REWARD_STD,
                "reward/min": _REWARD_MIN,
                "reward/max": _REWARD_MAX,
                "policy/entropy": _ENTROPY,
            },
            patterns={"reward/{component}": _COMPONENT},
            notes={
                "reward/{component}": "reward/mean is the total (tinker); others are components",
            },
        ),
        Source(
            "astOwOlfo/tinker-cookbook-reward-hacking: big-run-reward-hacking-by-epoch.txt "
            "(an env digest; ratios derived by rlpulse.offline.logs.digest)",
            exact={
                "average_reward": _REWARD,
                "hacking_ratio": None,
                "honest_success_ratio": objective("honest_success_ratio"),
            },
            patterns={"n_{*}_successful": None, "n_{*}_unsuccessful": None},
            notes={
                "hacking_ratio": "share of the epoch's sampled rollouts labelled hacking",
                "honest_success_ratio": "successful and not hacking: the true objective",
            },
        ),
    ),
)

MAPS: tuple[KeyMap, ...] = (
    TRL,
    VERL,
    OPENRLHF,
    SB3,
    CLEANRL,
    TINKER,
    BASELINES,
    RLLIB,
    DEEPSPEED_CHAT,
    DOPAMINE,
    CLASSIC,
    GENERIC,
)
FRAMEWORKS: tuple[str, ...] = tuple(m.framework for m in MAPS)
_BY_NAME: dict[str, KeyMap] = {m.framework: m for m in MAPS}
_SYNONYMS = {
    "stable-baselines3": "sb3",
    "stable_baselines3": "sb3",
    "stablebaselines3": "sb3",
    "openai-baselines": "baselines",
    "openai_baselines": "baselines",
    "tinker-cookbook": "tinker",
    "tinker_cookbook": "tinker",
    "ray": "rllib",
    "deepspeed": "deepspeed-chat",
    "deepspeed_chat": "deepspeed-chat",
    "wandb": "classic",
}
_PREFIXES: tuple[tuple[str, bool], ...] = (("train/", False), ("eval/", True), ("eval_", True))
_EVAL_METRIC = _EVAL.metric
_EVAL_BENCHMARK = {
    _REWARD.metric: "reward",
    _SUCCESS.metric: "success",
    _EP_RETURN.metric: "episode_return",
}


def framework_name(name: str | None) -> str | None:
    """The canonical framework name (``"Stable-Baselines3"`` → ``"sb3"``); None for None/"".

    Raises ValueError naming the value and the known frameworks for anything else.
    """
    if not name:
        return None
    low = name.strip().lower()
    low = _SYNONYMS.get(low, low)
    if low not in _BY_NAME:
        raise ValueError(f"unknown framework {name!r}; expected one of {', '.join(FRAMEWORKS)}")
    return low


def _match(key: str, maps: tuple[KeyMap, ...]) -> tuple[bool, Target | None]:
    for m in maps:
        if key in m.exact:
            return True, m.exact[key]
    for m in maps:
        for pattern in m.patterns:
            hit, target = pattern.match(key)
            if hit:
                return True, target
    return False, None


def _as_eval(target: Target | None) -> Target | None:
    if target is None or target.metric == _EVAL_METRIC:
        return target
    if target.metric == _COMPONENT.metric:
        benchmark = dict(target.labels)["component"]
    else:
        benchmark = _EVAL_BENCHMARK.get(target.metric, "")
    if not benchmark:
        return None
    return Target(_EVAL_METRIC, (("benchmark", benchmark), ("split", "eval")), target.scale)


def _search(key: str, maps: tuple[KeyMap, ...]) -> tuple[bool, Target | None]:
    hit, target = _match(key, maps)
    if hit:
        return hit, target
    for prefix, is_eval in _PREFIXES:
        if key.startswith(prefix):
            hit, target = _match(key[len(prefix) :], maps)
            if hit:
                return True, _as_eval(target) if is_eval else target
    return False, None


@lru_cache(maxsize=8192)
def _resolve(key: str, framework: str | None) -> Target | None:
    if framework is not None:
        hit, target = _search(key, (_BY_NAME[framework],))
        if hit:
            return target
    return _search(key, MAPS)[1]


def resolve(key: str, framework: str | None = None) -> Target | None:
    """The catalog target of a logged ``key``; None for a key no map knows.

    ``framework`` (a name in :data:`FRAMEWORKS` or a synonym) is searched first; an unknown
    name falls back to the default order (validate configuration with :func:`framework_name`).
    """
    try:
        name = framework_name(framework)
    except ValueError:
        name = None
    return _resolve(key, name)


def likely_framework(logged: Iterable[str]) -> str | None:
    """The framework whose table knows most of a log's keys (its first row, say); None when
    no table knows any or two tie. Lets a log with no format hint (a JSONL dump) be read with
    its own meanings first: ``reward`` and ``episode`` in a classic-RL W&B log."""
    known = list(logged)
    scores = {
        m.framework: sum(1 for k in known if _match(k, (m,))[0] or _match_prefixed(k, m))
        for m in MAPS
    }
    best = max(scores.values(), default=0)
    leaders = [f for f, n in scores.items() if n == best]
    if best >= 2 and CLASSIC.framework in leaders:
        # an LLM trainer logs many keys classic RL has no name for: a tie of two or more with the
        # classic table is a loop like the W&B tutorial's ({"episode": e, "reward": r})
        return CLASSIC.framework
    return leaders[0] if best and len(leaders) == 1 else None


def _match_prefixed(key: str, m: KeyMap) -> bool:
    return any(key.startswith(p) and _match(key[len(p) :], (m,))[0] for p, _ in _PREFIXES)


# ---- user key maps ------------------------------------------------------------------------------


def user_map(
    spec: Mapping[str, object] | str | os.PathLike[str] | None, where: str = "key_map"
) -> dict[str, Target | None]:
    """A user's key map, checked: logged key → ``"objective"``, a catalog metric name, ``None``
    (known, left unmapped), ``{metric: name, labels: {..}, scale: x}`` or a ``Target``. A path
    is a YAML or JSON file holding that mapping. Raises ValueError naming ``where`` (the file)
    and the offending key."""
    if spec is None:
        return {}
    if isinstance(spec, str | os.PathLike):
        return _load_map(Path(spec))
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where}: expected a mapping of logged keys, got {type(spec).__name__}")
    out: dict[str, Target | None] = {}
    for key, entry in spec.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where}: key {key!r} is not a non-empty string")
        try:
            out[key] = _user_target(key, entry)
        except KeyError as exc:
            raise ValueError(f"{where}.{key}: {exc.args[0]}") from None
        except ValueError as exc:
            raise ValueError(f"{where}.{key}: {exc}") from None
    return out


def _load_map(path: Path) -> dict[str, Target | None]:
    try:
        spec = safeyaml.load(path.read_text(encoding="utf-8"))  # JSON is YAML
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read a key map: {exc}") from None
    return user_map(spec if spec is not None else {}, str(path))


def _user_target(key: str, entry: object) -> Target | None:
    if entry is None or isinstance(entry, Target):
        return entry
    if entry == OBJECTIVE:
        return objective(key)
    if isinstance(entry, str):
        entry = {"metric": entry}
    if not isinstance(entry, Mapping):
        raise ValueError(f"expected {OBJECTIVE!r}, a metric name or {{metric, labels, scale}}")
    unknown = set(entry) - {"metric", "labels", "scale"}
    if unknown:
        raise ValueError(f"unknown field(s) {sorted(unknown)} (metric, labels, scale)")
    name, labels, scale = entry.get("metric"), entry.get("labels") or {}, entry.get("scale", 1.0)
    if not isinstance(name, str):
        raise ValueError(f"metric {name!r} is not a catalog metric name")
    metric = catalog.get(name)
    if metric.type not in ("gauge", "counter"):
        raise ValueError(f"{name} is a {metric.type}; a logged value can set a gauge or counter")
    if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
        raise ValueError(f"labels {labels!r} must map label names to strings")
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not math.isfinite(scale):
        raise ValueError(f"scale {scale!r} is not a finite number")
    target = _t(name, float(scale), **{str(k): v for k, v in labels.items()})
    if len(target.labels) != len(metric.labels):
        raise ValueError(f"{name} needs labels {', '.join(metric.labels)}")
    return target


def aliases(metric: str) -> tuple[str, ...]:
    """The framework keys (patterns as templates) that map onto ``metric``, in table order."""
    found: list[str] = []
    for m in MAPS:
        for source in m.sources:
            for table in (source.exact, source.patterns):
                for key, target in table.items():
                    if target is not None and target.metric == metric and key not in found:
                        found.append(key)
    return tuple(found)
