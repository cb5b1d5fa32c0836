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

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from rlpulse import catalog

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Target:
    """Where one logged key goes: a catalog metric, its label values and a value multiplier."""

    metric: str
    labels: Labels = ()
    scale: float = 1.0


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
        return True, Target(self.target.metric, labels, self.target.scale)


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
            },
            notes={"entropy_loss": "the mean entropy itself (subtracted from the loss)"},
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
                "train/n_updates": _TRAIN_STEPS,
                "train/std": None,
            },
            notes={
                "train/entropy_loss": "SB3 logs minus the entropy",
                "train/n_updates": "PPO counts epochs, DQN/SAC gradient steps",
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
            exact={"env/all/correct": _SUCCESS, "env/all/format": _t("rl_format_compliance_ratio")},
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

MAPS: tuple[KeyMap, ...] = (TRL, VERL, OPENRLHF, SB3, CLEANRL, TINKER, BASELINES)
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


# ---- the generated reference (docs/frameworks.md) ----------------------------------------------
_DOC_INTRO = """\
# Framework key maps

Generated from `exporter/rlpulse/keys.py` by `rlpulse generate`;
`tests/test_keys.py` fails when this file is stale. `rlpulse.log(metrics)` maps every key of the
trainer's own dict through these tables; a key no table knows is kept as
`rl_unmapped_metric{{key="..."}}` (bounded). Each key was checked in the file named in *Verified in*
(the framework's repository and path), not taken from memory.

**Lookup order** (first hit wins): with `framework=` (from `metadata["framework"]`) that
framework's table first; then the exact keys of every table in the order
`{order}`, then their patterns; then the same with a wrapper prefix removed:
`train/` (HF and OpenRLHF W&B / TensorBoard callbacks) maps like the inner key, `eval/` and `eval_`
(HF evaluation) turn a reward, reward-component, success or episode-return key into
`rl_eval_score{{split="eval"}}` and leave every other evaluation key unmapped, so evaluation values
never overwrite training series. The LLM trainers come first, so without `framework=` a bare `kl`
is the KL to the reference policy (TRL, OpenRLHF), not OpenAI baselines' update KL, and SB3's exact
`train/entropy_loss` (minus the entropy) wins over OpenRLHF's `train/` + `entropy_loss`.

**Patterns**: `{{label}}` is one path segment captured as that label, `{{label+}}` one or more
segments (verl data sources such as `openai/gsm8k`), `{{*}}` one segment and `{{#}}` digits, not
captured. Captured values come from user data; the exporter bounds them.

**Unmapped on purpose** (*Metric* is —): a known key with no fitting catalog metric; it also stops
the search, so another table's pattern cannot claim it (SB3 `time/time_elapsed` is not a tinker
phase). Counters (`*_total`) are set from the trainer's cumulative values. SB3 Monitor CSV rows
(`r`, `l`, `t`) are episodes, not log keys: replay them through `observe_episodes`.

Extra tables: `tinker` (Thinking Machines' tinker-cookbook JSONL metrics) and `baselines` (OpenAI
baselines `progress.csv` keys, including GAIL_PPO's), both present in the replay corpus.
"""


def _target_text(target: Target | None, template: str) -> tuple[str, str]:
    if target is None:
        return "—", ""
    values = {k: f"<{k}>" for k in _compile(template).groupindex}
    values.update((k, f'"{v}"') for k, v in target.labels)
    labels = [f"{k}={values[k]}" for k in catalog.get(target.metric).labels]
    text = f"`{target.metric}" + ("{" + ", ".join(labels) + "}" if labels else "") + "`"
    transform = "" if target.scale == 1.0 else f"x {target.scale:g}"
    return text, transform


def markdown() -> str:
    """docs/frameworks.md: one table per framework, key → metric, transform, source, note."""
    lines = [_DOC_INTRO.format(order=" → ".join(FRAMEWORKS))]
    for m in MAPS:
        lines += ["", f"## {m.framework}", ""]
        lines += ["| Key | Metric | Transform | Verified in | Note |", "|---|---|---|---|---|"]
        for source in m.sources:
            for table in (source.exact, source.patterns):
                for key, target in table.items():
                    metric, transform = _target_text(
                        target, key if table is source.patterns else ""
                    )
                    note = source.notes.get(key, "")
                    cell = key.replace("|", "\\|")
                    lines.append(f"| `{cell}` | {metric} | {transform} | {source.where} | {note} |")
    return "\n".join(lines) + "\n"
