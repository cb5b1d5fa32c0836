"""Framework key maps against the keys the real-log corpus actually contains, plus the rules."""

from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path

import pytest

from harness.corpus import CORPUS, FILES, needs_corpus
from rlpulse import catalog, keys
from rlpulse.keys import Target
from rlpulse.offline.logs import read_log
from rlpulse.runtime.exporter import Exporter
from rlpulse.stack import config
from rlpulse.stack.docs import keysdoc
from tests.conftest import scrape, value

ROOT = Path(__file__).resolve().parents[2]
Expect = tuple[str, dict[str, str], float] | None  # (metric, labels, scale); None = unmapped


def t(metric: str, scale: float = 1.0, /, **labels: str) -> Expect:
    return (metric, labels, scale)


def as_expect(target: Target | None) -> Expect:
    return None if target is None else (target.metric, dict(target.labels), target.scale)


# ---- minimal corpus parsers (deliberately independent of rlpulse.offline.logs) ---
def trl_keys(path: Path) -> set[str]:
    rows = json.loads(path.read_text())["log_history"]
    return {k for row in rows for k in row}


VERL_LINE = re.compile(r"step:(\d+) - (.*)$")


def verl_keys(path: Path) -> set[str]:
    found: set[str] = set()
    for line in path.read_text().splitlines():
        m = VERL_LINE.search(line)
        if m:
            found |= {part.split(":", 1)[0] for part in m.group(2).split(" - ")}
    return found


def jsonl_keys(path: Path) -> set[str]:
    return {k for line in path.read_text().splitlines() if line.strip() for k in json.loads(line)}


def csv_keys(path: Path) -> set[str]:
    lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]
    return set(next(csv.reader(lines)))


# ---- what each corpus key must map to ---------------------------------------------------------
TRL_GRPO: dict[str, Expect] = {
    "reward": t("rl_reward_mean"),
    "reward_std": t("rl_reward_std"),
    "kl": t("rl_kl_reference"),
    "loss": t("rl_loss"),
    "grad_norm": t("rl_grad_norm", network="policy"),
    "learning_rate": t("rl_learning_rate", network="policy"),
    "step": t("rl_step"),
    "epoch": None,
    "completion_length": t("rl_response_length_mean_tokens"),
    "completions/mean_length": t("rl_response_length_mean_tokens"),
    "completions/max_length": t("rl_response_length_max_tokens"),
    "completions/min_length": t("rl_response_length_min_tokens"),
    "completions/clipped_ratio": t("rl_truncation_ratio"),
    "completions/mean_terminated_length": None,
    "completions/max_terminated_length": None,
    "completions/min_terminated_length": None,
    "frac_reward_zero_std": t("rl_zero_std_groups_ratio"),
    "clip_ratio/region_mean": t("rl_clip_fraction_ratio", bound="any"),
    "clip_ratio/low_mean": t("rl_clip_fraction_ratio", bound="low"),
    "clip_ratio/high_mean": t("rl_clip_fraction_ratio", bound="high"),
    "clip_ratio/low_min": None,
    "clip_ratio/high_max": None,
    "num_tokens": None,
}


def trl_expect(key: str) -> Expect:
    """Static keys from TRL_GRPO; rewards/<f>, rewards/<f>/mean|std become reward components."""
    parts = key.split("/")
    if parts[0] == "rewards" and len(parts) == 2:
        return t("rl_reward_component_mean", component=parts[1])
    if parts[0] == "rewards" and len(parts) == 3:
        stat = {"mean": "rl_reward_component_mean", "std": "rl_reward_component_std"}[parts[2]]
        return t(stat, component=parts[1])
    return TRL_GRPO[key]


VERL_PPO: dict[str, Expect] = {
    "critic/score/mean": t("rl_reward_mean"),
    "critic/score/max": t("rl_reward_max"),
    "critic/score/min": t("rl_reward_min"),
    "critic/rewards/mean": None,
    "critic/rewards/max": None,
    "critic/rewards/min": None,
    "critic/advantages/mean": t("rl_advantage_mean"),
    "critic/advantages/max": t("rl_advantage_max"),
    "critic/advantages/min": t("rl_advantage_min"),
    "critic/returns/mean": t("rl_return_mean"),
    "critic/returns/max": None,
    "critic/returns/min": None,
    "critic/values/mean": t("rl_value_mean"),
    "critic/values/max": None,
    "critic/values/min": None,
    "critic/kl": t("rl_kl_reference"),
    "critic/kl_coeff": t("rl_kl_coefficient"),
    "critic/vf_loss": t("rl_value_loss"),
    "critic/vf_clipfrac": t("rl_value_clip_fraction_ratio"),
    "critic/vpred_mean": None,
    "critic/grad_norm": t("rl_grad_norm", network="critic"),
    "critic/lr": t("rl_learning_rate", network="critic"),
    "actor/entropy_loss": t("rl_entropy"),
    "actor/pg_loss": t("rl_policy_loss"),
    "actor/pg_clipfrac": t("rl_clip_fraction_ratio", bound="any"),
    "actor/ppo_kl": t("rl_approx_kl"),
    "actor/grad_norm": t("rl_grad_norm", network="policy"),
    "actor/lr": t("rl_learning_rate", network="policy"),
    "response_length/mean": t("rl_response_length_mean_tokens"),
    "response_length/max": t("rl_response_length_max_tokens"),
    "response_length/min": t("rl_response_length_min_tokens"),
    "prompt_length/mean": None,
    "prompt_length/max": None,
    "prompt_length/min": None,
    "val/test_score/openai/gsm8k": t("rl_eval_score", benchmark="openai/gsm8k", split="eval"),
    **{
        f"timing/{p}": t("rl_phase_last_duration_seconds", phase=p)
        for p in ("gen", "ref", "values", "adv", "update_critic", "update_actor", "testing")
    },
    **{
        f"timing_per_token/{p}": None
        for p in ("gen", "ref", "values", "adv", "update_critic", "update_actor")
    },
}

TINKER: dict[str, Expect] = {
    "step": t("rl_step"),
    "progress/batch": t("rl_step"),
    "progress/done_frac": None,
    "optim/lr": t("rl_learning_rate", network="policy"),
    "optim/entropy": t("rl_entropy"),
    "optim/kl_sample_train_v1": t("rl_rollout_kl", estimator="k1"),
    "optim/kl_sample_train_v2": t("rl_rollout_kl", estimator="k2"),
    "env/all/reward/total": t("rl_reward_mean"),
    "env/all/correct": t("rl_success_ratio"),
    "env/all/format": t("rl_format_compliance_ratio"),
    "env/all/ac_tokens_per_turn": t("rl_response_length_mean_tokens"),
    "env/all/ob_tokens_per_turn": None,
    "env/all/turns_per_episode": None,
    "env/all/total_episodes": None,
    "env/all/total_turns": None,
    "env/all/total_ac_tokens": None,
    "env/all/total_ob_tokens": None,
    "env/all/by_group/frac_all_good": t("rl_group_outcome_ratio", outcome="all_good"),
    "env/all/by_group/frac_all_bad": t("rl_group_outcome_ratio", outcome="all_bad"),
    "env/all/by_group/frac_mixed": t("rl_group_outcome_ratio", outcome="mixed"),
    **{
        f"time/{p}": t("rl_phase_last_duration_seconds", phase=p)
        for p in (
            "run_evals",
            "assemble_training_data",
            "train",
            "compute_kl_sample_train",
            "save_checkpoint",
            "total",
        )
    },
}

BASELINES_GAIL: dict[str, Expect] = {
    "mean 100 episode reward": t("rl_episode_return"),
    "max 100 episode reward": None,
    "min 100 episode reward": None,
    "num episodes": t("rl_episodes_total"),
    "loss": t("rl_loss"),
    "policy loss": t("rl_policy_loss"),
    "value loss": t("rl_value_loss"),
    "entropy loss": t("rl_entropy"),
    "kl": t("rl_approx_kl"),
    "frac": t("rl_clip_fraction_ratio", bound="any"),
    # GAIL's discriminator: no catalog metric, and no table claims them
    "agent acc": None,
    "demo acc": None,
    "discriminator loss agent": None,
    "discriminator loss demo": None,
    "discriminator loss total": None,
    "reward signal mean": None,
}

TRL_FILES = sorted(p.name for p in (CORPUS / "trl").glob("*.json"))


@needs_corpus
def test_corpus_has_the_files_these_tests_cover() -> None:
    assert len(TRL_FILES) == 4
    assert len(list((CORPUS / "verl").iterdir())) == 1
    assert {p.name for p in (CORPUS / "other").iterdir()} >= {
        "arvindcr4__tinker-rl-lab__experiments_results_arithmetic_metrics.jsonl",
        "morikatron__GAIL_PPO__sample_result_ppo_progress.csv",
    }


@needs_corpus
@pytest.mark.parametrize("name", TRL_FILES)
def test_trl_trainer_state_keys(name: str) -> None:
    found = trl_keys(CORPUS / "trl" / name)
    assert "reward" in found and any(k.startswith("rewards/") for k in found)
    for key in found:
        expected = trl_expect(key)
        assert as_expect(keys.resolve(key, "trl")) == expected, key
        assert as_expect(keys.resolve(key)) == expected, key  # the default order agrees
        # HF's W&B/TensorBoard callbacks log the same keys under train/
        assert as_expect(keys.resolve("train/" + key, "trl")) == expected, key


@needs_corpus
def test_trl_corpus_reward_components_keep_their_function_names() -> None:
    found = trl_keys(CORPUS / "trl" / "Rusheel86__Chaos-Economy__training_logs.json")
    components = {
        dict(target.labels)["component"]
        for k in found
        if (target := keys.resolve(k, "trl")) and target.metric == "rl_reward_component_mean"
    }
    assert components == {
        "diversity_reward_fn",
        "format_reward_fn",
        "news_alpha_reward_fn",
        "oversight_reward_fn",
        "pnl_reward_fn",
        "risk_reward_fn",
    }


def _resolves_as(
    found: set[str], table: dict[str, Expect], framework: str, default_agrees: bool = True
) -> None:
    """The keys a corpus file logs are ``table``'s, each resolving as the table says under
    ``framework`` and, where ``default_agrees``, with no framework named."""
    assert found == set(table), found ^ set(table)
    for key, expected in table.items():
        assert as_expect(keys.resolve(key, framework)) == expected, key
        if default_agrees:
            assert as_expect(keys.resolve(key)) == expected, key


@needs_corpus
def test_verl_console_keys() -> None:
    found = verl_keys(CORPUS / "verl" / next((CORPUS / "verl").iterdir()).name)
    _resolves_as(found, VERL_PPO, "verl")


@needs_corpus
def test_tinker_jsonl_keys() -> None:
    path = (
        CORPUS / "other" / "arvindcr4__tinker-rl-lab__experiments_results_arithmetic_metrics.jsonl"
    )
    _resolves_as(jsonl_keys(path), TINKER, "tinker")


@needs_corpus
def test_baselines_progress_csv_keys() -> None:
    found = csv_keys(CORPUS / "other" / "morikatron__GAIL_PPO__sample_result_ppo_progress.csv")
    _resolves_as(found, BASELINES_GAIL, "baselines", default_agrees=False)


@needs_corpus
def test_sb3_monitor_columns_are_episodes_not_log_keys() -> None:
    path = CORPUS / "sb3" / "DLR-RM__rl-trained-agents__ppo_LunarLander-v2_1_0.monitor.csv"
    assert csv_keys(path) == {"r", "l", "t"}
    for key in ("r", "l", "t"):
        assert keys.resolve(key, "sb3") is None


# ---- framework tables beyond the corpus ---------------------------------------------------------
@pytest.mark.parametrize(
    ("framework", "key", "expected"),
    [
        ("sb3", "rollout/ep_rew_mean", t("rl_episode_return")),
        ("sb3", "rollout/ep_len_mean", t("rl_episode_length_steps")),
        ("sb3", "rollout/success_rate", t("rl_success_ratio")),
        ("sb3", "train/value_loss", t("rl_value_loss")),
        ("sb3", "train/policy_gradient_loss", t("rl_policy_loss")),
        ("sb3", "train/approx_kl", t("rl_approx_kl")),
        ("sb3", "train/clip_fraction", t("rl_clip_fraction_ratio", bound="any")),
        ("sb3", "train/clip_range", t("rl_hyperparameter", name="clip_range")),
        ("sb3", "train/explained_variance", t("rl_explained_variance")),
        ("sb3", "train/n_updates", None),
        ("sb3", "time/fps", t("rl_throughput_per_second", unit="env_steps")),
        ("sb3", "time/total_timesteps", t("rl_env_steps_total")),
        ("sb3", "time/episodes", t("rl_episodes_total")),
        ("sb3", "time/time_elapsed", None),
        ("sb3", "eval/mean_reward", t("rl_eval_score", benchmark="episode_return", split="eval")),
        ("sb3", "eval/success_rate", t("rl_eval_score", benchmark="success", split="eval")),
        ("sb3", "rollout/exploration_rate", t("rl_hyperparameter", name="exploration_rate")),
        ("sb3", "train/critic_loss", t("rl_value_loss")),
        ("sb3", "train/ent_coef", t("rl_hyperparameter", name="ent_coef")),
        ("cleanrl", "charts/episodic_return", t("rl_episode_return")),
        ("cleanrl", "charts/SPS", t("rl_throughput_per_second", unit="env_steps")),
        ("cleanrl", "losses/entropy", t("rl_entropy")),
        ("cleanrl", "losses/old_approx_kl", None),
        ("cleanrl", "losses/approx_kl", t("rl_approx_kl")),
        ("cleanrl", "losses/clipfrac", t("rl_clip_fraction_ratio", bound="any")),
        ("cleanrl", "losses/td_loss", t("rl_value_loss")),
        ("openrlhf", "policy_loss", t("rl_policy_loss")),
        ("openrlhf", "critic_loss", t("rl_value_loss")),
        ("openrlhf", "return", t("rl_return_mean")),
        ("openrlhf", "actor_grad_norm", t("rl_grad_norm", network="policy")),
        ("openrlhf", "policy_kl", t("rl_approx_kl")),
        ("openrlhf", "logprobs_diff", t("rl_logprob_mismatch")),
        ("deepspeed-chat", "critic_loss", t("rl_value_loss")),
        (
            "dopamine",
            "Eval/AverageReturns",
            t("rl_eval_score", benchmark="episode_return", split="eval"),
        ),
        ("rllib", "env_runners/episode_return_mean", t("rl_episode_return")),
        ("rllib", "info/learner/default_policy/learner_stats/mean_q", t("rl_value_mean")),
        ("cleanrl", "charts/episodic_return", t("rl_episode_return")),
        ("openrlhf", "actor_lr", t("rl_learning_rate", network="policy")),
        ("openrlhf", "critic_lr", t("rl_learning_rate", network="critic")),
        ("openrlhf", "train/ppo_clip_ratio", t("rl_clip_fraction_ratio", bound="any")),
        (
            "openrlhf",
            "eval/eval_math500_pass1",
            t("rl_eval_score", benchmark="math500", split="eval"),
        ),
        ("openrlhf", "eval_math500_pass8", None),
        ("verl", "actor/entropy", t("rl_entropy")),
        ("verl", "actor/pg_clipfrac_lower", t("rl_clip_fraction_ratio", bound="dual")),
        ("verl", "actor/kl_loss", t("rl_kl_reference")),
        ("verl", "critic/vf_explained_var", t("rl_explained_variance")),
        ("verl", "response_length/clip_ratio", t("rl_truncation_ratio")),
        ("verl", "timing_s/gen", t("rl_phase_last_duration_seconds", phase="gen")),
        ("verl", "perf/throughput", t("rl_throughput_per_second", unit="tokens_per_gpu")),
        ("verl", "training/rollout_probs_diff_mean", t("rl_logprob_mismatch")),
        ("verl", "rollout_corr/k3_kl", t("rl_rollout_kl", estimator="k3")),
        (
            "verl",
            "val-core/openai/gsm8k/acc/mean@16",
            t("rl_eval_score", benchmark="openai/gsm8k", split="eval"),
        ),
        ("verl", "val-core/openai/gsm8k/acc/best@16/mean", None),
        ("trl", "entropy", t("rl_entropy")),
        ("trl", "sampling/importance_sampling_ratio/min", t("rl_importance_ratio_min")),
        ("trl", "sampling/sampling_logp_difference/mean", t("rl_logprob_mismatch")),
        ("trl", "policy/approxkl_avg", t("rl_approx_kl")),
        ("trl", "objective/scores", t("rl_reward_mean")),
        ("trl", "ppo/val/var_explained", t("rl_explained_variance")),
        (
            "baselines",
            "% time spent exploring",
            t("rl_hyperparameter", 0.01, name="exploration_rate"),
        ),
        ("baselines", "misc/total_timesteps", t("rl_env_steps_total")),
        ("baselines", "loss/policy_entropy", t("rl_entropy")),
        (
            "baselines",
            "eval_eprewmean",
            t("rl_eval_score", benchmark="episode_return", split="eval"),
        ),
    ],
)
def test_framework_keys(framework: str, key: str, expected: Expect) -> None:
    assert as_expect(keys.resolve(key, framework)) == expected


def test_every_target_names_a_catalog_metric_with_exactly_its_labels() -> None:
    for m in keys.MAPS:
        for key, target in m.exact.items():
            if target is not None:
                metric = catalog.get(target.metric)
                assert tuple(k for k, _ in target.labels) == metric.labels, (m.framework, key)
                assert metric.type in ("gauge", "counter"), (m.framework, key)
        for pattern in m.patterns:
            sample = sample_key(pattern.template)
            target = keys.resolve(sample, m.framework)
            if pattern.target is None:
                assert target is None, sample
                continue
            assert target is not None, sample
            metric = catalog.get(target.metric)
            assert tuple(k for k, _ in target.labels) == metric.labels, (m.framework, sample)
            assert metric.type in ("gauge", "counter"), (m.framework, sample)


def sample_key(template: str) -> str:
    """A concrete key a template matches: labels → x, multi-segment → a/b, {*} → y, {#} → 8."""
    key = re.sub(r"\{[a-z_]+\+\}", "a/b", template)
    key = re.sub(r"\{[a-z_]+\}", "x", key)
    return key.replace("{*}", "y").replace("{#}", "8")


def test_each_table_resolves_its_own_keys() -> None:
    for m in keys.MAPS:
        for key, target in m.exact.items():
            assert keys.resolve(key, m.framework) == target, (m.framework, key)


# ---- transforms, priority, prefixes, unknown keys -----------------------------------------------
def test_sb3_entropy_loss_is_minus_the_entropy() -> None:
    target = keys.resolve("train/entropy_loss", "sb3")
    assert target == Target("rl_entropy", (), -1.0)
    assert keys.resolve("train/entropy_loss") == target  # SB3's exact key wins by default


def test_sb3_entropy_sign_reaches_the_scrape() -> None:
    exp = Exporter(port=0, run_id="sb3", gpu=False, host=False, metadata={"framework": "sb3"})
    exp.start()
    try:
        exp.log({"train/entropy_loss": -0.693, "rollout/ep_rew_mean": 120.5}, step=2048)
        text = scrape(exp.url)
        assert value(text, "rl_entropy") == pytest.approx(0.693)
        assert value(text, "rl_episode_return") == 120.5
    finally:
        exp.close()


def test_framework_picks_its_own_meaning_first() -> None:
    assert keys.resolve("kl") == Target("rl_kl_reference")  # LLM trainers first
    assert keys.resolve("kl", "trl") == Target("rl_kl_reference")
    assert keys.resolve("kl", "openrlhf") == Target("rl_kl_reference")
    assert keys.resolve("kl", "baselines") == Target("rl_approx_kl")  # update KL in baselines
    assert keys.resolve("train/entropy_loss", "openrlhf") == Target("rl_entropy")  # +entropy
    assert keys.resolve("train/entropy_loss", "sb3") == Target("rl_entropy", (), -1.0)
    # exact keys beat every pattern: SB3's time/fps is not a tinker phase called "fps"
    assert keys.resolve("time/fps") == Target("rl_throughput_per_second", (("unit", "env_steps"),))
    assert keys.resolve("time/train") == Target(
        "rl_phase_last_duration_seconds", (("phase", "train"),)
    )
    assert keys.resolve("time/time_elapsed") is None  # known, unmapped, not a phase
    # a framework's own table is searched first, then every other table
    assert keys.resolve("eval/mean_reward", "trl") == keys.resolve("eval/mean_reward", "sb3")


def test_framework_names_and_synonyms() -> None:
    assert keys.FRAMEWORKS[:5] == ("trl", "verl", "openrlhf", "sb3", "cleanrl")
    assert keys.framework_name("Stable-Baselines3") == "sb3"
    assert keys.framework_name(" TRL ") == "trl"
    assert keys.framework_name(None) is None and keys.framework_name("") is None
    with pytest.raises(ValueError, match=r"unknown framework 'acme'.*trl, verl"):
        keys.framework_name("acme")
    assert keys.framework_name("Ray") == "rllib" and keys.framework_name("wandb") == "classic"
    # resolve() never raises on a bad name: it falls back to the default order
    assert keys.resolve("kl", "acme") == keys.resolve("kl")
    assert keys.resolve("train/entropy_loss", "stable_baselines3").scale == -1.0


def test_prefixes_train_and_eval() -> None:
    assert keys.resolve("train/reward") == Target("rl_reward_mean")
    assert keys.resolve("train/global_step", "openrlhf") == Target("rl_step")
    evaluation = Target("rl_eval_score", (("benchmark", "reward"), ("split", "eval")))
    assert keys.resolve("eval_reward", "trl") == evaluation
    assert keys.resolve("eval/reward") == evaluation
    assert keys.resolve("eval_rewards/format_reward_func/mean") == Target(
        "rl_eval_score", (("benchmark", "format_reward_func"), ("split", "eval"))
    )
    # other evaluation keys stay unmapped instead of overwriting training series
    for key in ("eval_loss", "eval_kl", "eval_completions/mean_length", "eval_runtime"):
        assert keys.resolve(key, "trl") is None, key


@pytest.mark.parametrize(
    "key",
    [
        "",
        "foo",
        "rewards",
        "rewards//mean",
        "reward ",
        "Reward",
        "timing_s/agent_loop/tool_calls/mean",
        "val-core/gsm8k/acc/maj@4/mean",
        "env/math/reward/total",
        "train/",
        "eval_",
        "critic/score",
    ],
)
def test_unknown_keys_resolve_to_none(key: str) -> None:
    assert keys.resolve(key) is None
    for framework in keys.FRAMEWORKS:
        assert keys.resolve(key, framework) is None


def test_aliases_list_keys_and_pattern_templates() -> None:
    entropy = keys.aliases("rl_entropy")
    assert {"entropy", "actor/entropy", "actor/entropy_loss", "train/entropy_loss"} <= set(entropy)
    assert {"losses/entropy", "entropy_loss", "optim/entropy"} <= set(entropy)
    assert "rewards/{component}/mean" in keys.aliases("rl_reward_component_mean")
    assert "timing_s/{phase}" in keys.aliases("rl_phase_last_duration_seconds")
    assert "val-core/{benchmark+}/{*}/mean@{#}" in keys.aliases("rl_eval_score")
    assert keys.aliases("rlpulse_dropped_values_total") == ()
    assert len(entropy) == len(set(entropy))
    for metric in catalog.CATALOG:  # every alias resolves to its metric in some framework
        for alias in keys.aliases(metric.name):
            hits = {keys.resolve(sample_key(alias), f) for f in keys.FRAMEWORKS}
            assert metric.name in {h.metric for h in hits if h is not None}, alias


def test_docs_frameworks_md_is_fresh() -> None:
    doc = (ROOT / "docs" / "reference" / "frameworks.md").read_text()
    stale = "docs/reference/frameworks.md is stale: run `rlpulse generate`"
    assert doc == keysdoc.markdown(), stale
    for framework in keys.FRAMEWORKS:
        assert f"\n## {framework}\n" in doc


def test_first_sight_resolution_is_fast() -> None:
    unseen = [f"custom/metric_{i}/value" for i in range(5000)]
    mapped = [f"rewards/fn_{i}/mean" for i in range(5000)]
    start = time.perf_counter()
    for key in unseen + mapped:
        keys.resolve(key)
    per_key = (time.perf_counter() - start) / (len(unseen) + len(mapped))
    assert per_key < 200e-6, f"{per_key * 1e6:.1f} µs per key"


# ---- second-batch corpus: every file's headline keys land on the catalog -----------------------
SECOND_BATCH: dict[str, dict[str, Expect]] = {
    "tinker-cookbook/joanvelja__tinker-cookbook__reports__data__gptoss-20b-v3b": {
        "env/all/reward/total": t("rl_reward_mean"),
        "env/all/correct": t("rl_success_ratio"),
        "env/all/format_boxed": t("rl_format_compliance_ratio"),
        "env/all/format_eos": t("rl_completion_eos_ratio"),
        "env/all/ac_tokens_per_turn": t("rl_response_length_mean_tokens"),
        "env/all/by_group/frac_all_good": t("rl_group_outcome_ratio", outcome="all_good"),
        "optim/entropy": t("rl_entropy"),
        "optim/kl_sample_train_v1": t("rl_rollout_kl", estimator="k1"),
        "unclipped_grad_l2:mean": t("rl_grad_norm", network="policy"),
        "test/test/env/all/correct": t("rl_eval_score", benchmark="correct", split="eval"),
        "test/test/env/all/reward/total": t("rl_eval_score", benchmark="test", split="eval"),
    },
    "tinker-cookbook/joanvelja__tinker-cookbook__reports__data__gptoss-20b-v2": {
        "kl_policy_base": t("rl_kl_reference"),
        "test/env/all/correct": t("rl_eval_score", benchmark="correct", split="eval"),
    },
    "tinker-cookbook/thinking-machines-lab": {
        "reward/mean": t("rl_reward_mean"),
        "reward/pass@1": t("rl_success_ratio"),
        "data/num_datums": None,
    },
    "tinker-cookbook/astOwOlfo": {
        "average_reward": t("rl_reward_mean"),
        "honest_success_ratio": t(
            "rl_eval_score", benchmark="honest_success_ratio", split="objective"
        ),
        "hacking_ratio": None,
        "n_hacking_successful": None,
    },
    "deepspeed-chat/": {
        "act_loss": t("rl_policy_loss"),
        "cri_loss": t("rl_value_loss"),
        "average_reward_score": t("rl_reward_mean"),
        "e2e_latency": t("rl_phase_last_duration_seconds", phase="step"),
    },
    "dopamine/": {"Train/AverageReturns": t("rl_episode_return")},
    "rllib/ray-project__rl-experiments__atari-apex": {
        "episode_reward_mean": t("rl_episode_return"),
        "episode_len_mean": t("rl_episode_length_steps"),
        "timesteps_total": t("rl_env_steps_total"),
    },
    "rllib/ray-project__rl-experiments__atari-impala": {
        "info/learner/grad_gnorm": t("rl_grad_norm", network="policy"),
        "info/learner/entropy": t("rl_entropy"),
        "info/learner/vf_loss": t("rl_value_loss"),
        "info/learner/policy_loss": t("rl_policy_loss"),
        "info/learner/vf_explained_var": t("rl_explained_variance"),
        "episodes_total": None,
    },
    "sb3/SpencerCPurdy": {
        "eval/mean_reward": t("rl_eval_score", benchmark="episode_return", split="eval"),
    },
}
HINTS = {
    "tinker-cookbook/joanvelja": "tinker",
    "tinker-cookbook/thinking-machines-lab": "tinker",
    "other/arvindcr4": "tinker",
}


@needs_corpus
@pytest.mark.parametrize("prefix", sorted(SECOND_BATCH))
def test_second_batch_keys(prefix: str) -> None:
    path = next(CORPUS / n for n in sorted(FILES) if n.startswith(prefix))
    logged = {k for rec in read_log(path) for k in rec.values}
    expected = SECOND_BATCH[prefix]
    assert set(expected) <= logged, set(expected) - logged
    for key, want in expected.items():
        assert as_expect(keys.resolve(key, keys.likely_framework(logged))) == want, key


@needs_corpus
@pytest.mark.parametrize("prefix", sorted(HINTS))
def test_a_jsonl_log_finds_its_own_table(prefix: str) -> None:
    path = next(CORPUS / n for n in sorted(FILES) if n.startswith(prefix))
    first = next(iter(read_log(path)))
    assert keys.likely_framework(first.values) == HINTS[prefix]


def test_classic_keys_stay_off_llm_batch_metrics() -> None:
    logged = ["episode_reward", "episode", "epsilon", "td_loss", "q_values", "reward"]
    framework = keys.likely_framework(logged)
    assert framework == "classic"
    assert as_expect(keys.resolve("reward", framework)) == t("rl_episode_return")
    assert as_expect(keys.resolve("episode", framework)) == t("rl_episodes_total")
    assert as_expect(keys.resolve("epsilon")) == t("rl_hyperparameter", name="exploration_rate")
    assert as_expect(keys.resolve("q_values")) == t("rl_value_mean")
    assert as_expect(keys.resolve("td_loss")) == t("rl_value_loss")
    assert as_expect(keys.resolve("reward")) == t("rl_reward_mean")  # TRL's, by default
    assert keys.likely_framework(["unknown"]) is None


def test_reward_hacking_example_keys() -> None:
    assert as_expect(keys.resolve("reward/mean")) == t("rl_reward_mean")
    assert as_expect(keys.resolve("reward/g")) == t("rl_reward_component_mean", component="g")
    assert as_expect(keys.resolve("reward/f")) == t("rl_reward_component_mean", component="f")
    assert as_expect(keys.resolve("policy/entropy")) == t("rl_entropy")


def test_rllib_learner_stats_under_every_layout() -> None:
    for key in (
        "info/learner/entropy",
        "info/learner/default_policy/entropy",
        "info/learner/default_policy/learner_stats/entropy",
        "learners/default_policy/entropy",
    ):
        assert as_expect(keys.resolve(key, "rllib")) == t("rl_entropy"), key


# ---- user key maps -------------------------------------------------------------------------------
def test_user_key_map_forms() -> None:
    found = keys.user_map(
        {
            "correct_frac": "objective",
            "my/entropy": "rl_entropy",
            "noise": None,
            "score": {"metric": "rl_eval_score", "labels": {"benchmark": "x", "split": "eval"}},
            "neg_ent": {"metric": "rl_entropy", "scale": -1},
        }
    )
    assert as_expect(found["correct_frac"]) == t(
        "rl_eval_score", benchmark="correct_frac", split="objective"
    )
    assert as_expect(found["my/entropy"]) == t("rl_entropy")
    assert found["noise"] is None
    assert as_expect(found["score"]) == t("rl_eval_score", benchmark="x", split="eval")
    assert as_expect(found["neg_ent"]) == t("rl_entropy", -1.0)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"k": "rl_nope"}, "key_map.k: 'rl_nope' is not a metric"),
        ({"k": {"metric": "rl_eval_score"}}, "key_map.k: rl_eval_score needs labels benchmark"),
        ({"k": {"metric": "rl_entropy", "labels": {"x": "1"}}}, "key_map.k: rl_entropy has no"),
        ({"k": {"metric": "rl_entropy", "scale": "2"}}, "key_map.k: scale '2' is not a finite"),
        ({"k": {"metric": "rl_entropy", "sclae": 2}}, "key_map.k: unknown field"),
        ({"k": "rl_response_length_tokens"}, "key_map.k: rl_response_length_tokens is a histo"),
        ({"k": 3}, "key_map.k: expected 'objective'"),
        ([1, 2], "key_map: expected a mapping"),
    ],
)
def test_user_key_map_errors_name_the_key(spec: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        keys.user_map(spec)  # type: ignore[arg-type]


def test_user_key_map_files_and_rlpulse_yaml(tmp_path: Path) -> None:
    (tmp_path / "keys.yaml").write_text("correct: objective\nloss_pi: rl_policy_loss\n")
    (tmp_path / "keys.json").write_text('{"correct": "objective"}')
    (tmp_path / "bad.yaml").write_text("correct: rl_nope\n")
    assert set(keys.user_map(tmp_path / "keys.yaml")) == {"correct", "loss_pi"}
    assert set(keys.user_map(str(tmp_path / "keys.json"))) == {"correct"}
    with pytest.raises(ValueError, match=r"bad.yaml.correct: 'rl_nope'"):
        keys.user_map(tmp_path / "bad.yaml")
    yml = tmp_path / "rlpulse.yaml"
    yml.write_text("keys:\n  correct: objective\n  x: rl_nope\n")
    with pytest.raises(config.ConfigError, match=r"rlpulse.yaml: keys.x: 'rl_nope' is not a"):
        config.load(yml)
    yml.write_text("keys:\n  correct: objective\n")
    assert [k for k, _ in config.load(yml).keys] == ["correct"]


def test_exporter_key_map_comes_first() -> None:
    cfg = config.from_dict({"keys": {"correct": "objective", "kl": "rl_approx_kl"}})
    exp = Exporter(port=0, run_id="km", gpu=False, host=False, key_map=dict(cfg.keys)).start()
    try:
        exp.log({"correct": 0.25, "kl": 0.5, "reward": 0.75}, step=1)
        text = scrape(exp.url)
        assert value(text, "rl_eval_score", benchmark="correct", split="objective") == 0.25
        assert value(text, "rl_approx_kl") == 0.5
        assert "rl_kl_reference{" not in text
        assert value(text, "rl_reward_mean") == 0.75
    finally:
        exp.close()
    with pytest.raises(ValueError, match=r"key_map\.k: 'rl_nope'"):
        Exporter(port=0, gpu=False, host=False, key_map={"k": "rl_nope"})
