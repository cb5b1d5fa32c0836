"""The metric catalog: the one place a metric is named.

Every other part of rlpulse (the exporter, the key maps, the generated docs, rules and dashboards)
refers to metrics through this table. Identity labels (``run_id``, ``rank``, ``local_rank``,
``node``) are added by the exporter to every series and are not listed per metric.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["counter", "gauge", "histogram", "info"]
Layer = Literal["system", "rl", "task", "meta", "self"]

IDENTITY_LABELS: tuple[str, ...] = ("run_id", "rank", "local_rank", "node")
GPU_LABELS: tuple[str, ...] = ("gpu", "uuid", "model")
OVERFLOW_VALUE = "__overflow__"
# base units a metric name ends in (DESIGN: base units in the name)
UNITS: tuple[str, ...] = ("seconds", "bytes", "ratio", "tokens", "watts", "celsius", "hertz")

LATENCY_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)
TOKEN_BUCKETS: tuple[float, ...] = tuple(float(2**i) for i in range(3, 16))  # 8 … 32768
PHASE_BUCKETS: tuple[float, ...] = (
    0.01,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    900.0,
    1800.0,
)


@dataclass(frozen=True)
class Metric:
    """One metric family as Prometheus exposes it.

    ``name`` is the sample name a PromQL query uses (counters end in ``_total``, the info
    series in ``_info``); ``labels`` are the metric's own labels beyond the identity labels.
    """

    name: str
    type: MetricType
    unit: str
    help: str
    layer: Layer
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()

    @property
    def family(self) -> str:
        """The family name in the exposition (the name without ``_total``/``_info``)."""
        for suffix in ("_total", "_info"):
            if self.type in ("counter", "info") and self.name.endswith(suffix):
                return self.name[: -len(suffix)]
        return self.name


def base_unit(name: str) -> str:
    """A metric's base unit: the last word of its name (before ``_total``) where it is one of
    ``UNITS``, else "" (a plain number)."""
    last = name.removesuffix("_total").rsplit("_", 1)[-1]
    return last if last in UNITS else ""


def _m(
    name: str,
    type_: MetricType,
    layer: Layer,
    help_: str,
    labels: tuple[str, ...] = (),
    buckets: tuple[float, ...] = (),
) -> Metric:
    return Metric(name, type_, base_unit(name), help_, layer, labels, buckets)


_GPU = GPU_LABELS

CATALOG: tuple[Metric, ...] = (
    # ---- system: GPUs (read from NVML at scrape time) -------------------------------------------
    _m(
        "rl_gpu_utilization_ratio",
        "gauge",
        "system",
        "GPU busy fraction (NVML utilization.gpu / 100).",
        _GPU,
    ),
    _m(
        "rl_gpu_memory_utilization_ratio",
        "gauge",
        "system",
        "GPU memory-controller busy fraction.",
        _GPU,
    ),
    _m("rl_gpu_memory_used_bytes", "gauge", "system", "GPU framebuffer memory in use.", _GPU),
    _m("rl_gpu_memory_total_bytes", "gauge", "system", "GPU framebuffer memory installed.", _GPU),
    _m("rl_gpu_power_watts", "gauge", "system", "GPU board power draw.", _GPU),
    _m("rl_gpu_power_limit_watts", "gauge", "system", "GPU enforced power limit.", _GPU),
    _m("rl_gpu_temperature_celsius", "gauge", "system", "GPU core temperature.", _GPU),
    _m("rl_gpu_sm_clock_hertz", "gauge", "system", "GPU streaming-multiprocessor clock.", _GPU),
    _m(
        "rl_gpu_throttled",
        "gauge",
        "system",
        "1 while the GPU clocks are held down by a thermal, power or hardware slowdown, else 0.",
        (*_GPU, "reason"),
    ),
    _m(
        "rl_gpu_ecc_errors_total",
        "counter",
        "system",
        "Volatile ECC memory errors since the driver loaded, by type (corrected|uncorrected).",
        (*_GPU, "error_type"),
    ),
    _m(
        "rl_gpu_process_memory_bytes",
        "gauge",
        "system",
        "GPU memory used by this trainer process.",
        _GPU,
    ),
    # ---- system: host and process ---------------------------------------------------------------
    _m("rl_host_cpu_utilization_ratio", "gauge", "system", "Host CPU busy fraction, all cores."),
    _m("rl_host_memory_used_bytes", "gauge", "system", "Host memory in use (total - available)."),
    _m("rl_host_memory_total_bytes", "gauge", "system", "Host memory installed."),
    _m(
        "rl_process_cpu_utilization_ratio",
        "gauge",
        "system",
        "Trainer process CPU use, in cores (1.0 = one core busy).",
    ),
    _m("rl_process_resident_memory_bytes", "gauge", "system", "Trainer process resident set size."),
    # ---- system: throughput and timing ----------------------------------------------------------
    _m("rl_env_steps_total", "counter", "system", "Environment steps taken (all envs)."),
    _m("rl_samples_total", "counter", "system", "Rollouts / samples generated."),
    _m("rl_prompt_tokens_total", "counter", "system", "Prompt tokens processed by rollouts."),
    _m(
        "rl_completion_tokens_total",
        "counter",
        "system",
        "Completion tokens generated by rollouts.",
    ),
    _m(
        "rl_train_steps_total",
        "counter",
        "system",
        "Optimizer steps taken (follows the trainer's global step).",
    ),
    _m("rl_episodes_total", "counter", "system", "Episodes finished."),
    _m(
        "rl_throughput_per_second",
        "gauge",
        "system",
        "Throughput as the trainer reports it (unit: env_steps|episodes|tokens_per_gpu).",
        ("unit",),
    ),
    _m(
        "rl_rollout_duration_seconds",
        "histogram",
        "system",
        "Latency of one rollout (one generation or one episode).",
        buckets=LATENCY_BUCKETS,
    ),
    _m(
        "rl_phase_duration_seconds",
        "histogram",
        "system",
        "Wall time of one training phase (rollout, reward, ref, update, sync, eval, checkpoint …).",
        ("phase",),
        PHASE_BUCKETS,
    ),
    _m(
        "rl_phase_last_duration_seconds",
        "gauge",
        "system",
        "Wall time of the last run of one training phase, as the trainer logged it.",
        ("phase",),
    ),
    _m(
        "rl_grader_duration_seconds",
        "histogram",
        "system",
        "Latency of one grader / reward-model call.",
        buckets=LATENCY_BUCKETS,
    ),
    _m("rl_grader_calls_total", "counter", "system", "Grader / reward-model calls."),
    _m("rl_grader_errors_total", "counter", "system", "Grader / reward-model calls that failed."),
    _m(
        "rl_tool_calls_total",
        "counter",
        "system",
        "Tool calls made by the policy (agentic RL).",
        ("tool",),
    ),
    _m("rl_tool_errors_total", "counter", "system", "Tool calls that failed.", ("tool",)),
    _m("rl_step", "gauge", "system", "The trainer's current global step."),
    _m(
        "rl_last_step_timestamp_seconds",
        "gauge",
        "system",
        "Unix time of the last log() call that carried metrics (liveness).",
    ),
    _m(
        "rl_last_progress_timestamp_seconds",
        "gauge",
        "system",
        "Unix time of the run's last progress of any kind: a logged step, or a heartbeat from a "
        "phase that logs no step (evaluation, checkpoint saving: Exporter.progress(), the "
        "integrations call it). RLTrainingStalled reads it.",
    ),
    _m(
        "rl_step_interval_seconds",
        "gauge",
        "system",
        "Median wall time between the run's last logged steps (its own cadence, for liveness).",
    ),
    _m(
        "rl_exporter_start_timestamp_seconds",
        "gauge",
        "system",
        "Unix time the exporter started (startup-hang detection before the first step).",
    ),
    _m(
        "rl_logged_steps_total",
        "counter",
        "system",
        "log() calls that carried metrics or a step (0 until the trainer's first step).",
    ),
    _m(
        "rl_step_signal",
        "gauge",
        "rl",
        "A step-indexed detection statistic (signal: see docs/reference/detection.md) of one "
        "watched "
        "series (series: its label values), worst of the last steps.",
        ("signal", "series"),
    ),
    _m(
        "rl_step_signal_baseline",
        "gauge",
        "rl",
        "What rl_step_signal compares with: the run's peak, floor, median or best so far.",
        ("signal", "series"),
    ),
    _m(
        "rl_reference_band",
        "gauge",
        "rl",
        "The band of earlier healthy runs (a reference band, rlpulse band build) at this run's "
        "latest logged step, per banded series (episode_return, reward_mean, kl_reference, "
        "entropy, eval_score{...}): its low and high bound, in the series' own unit. Only "
        "with a reference band.",
        ("series", "bound"),
    ),
    _m(
        "rl_drift_score",
        "gauge",
        "rl",
        "How far a feature's distribution moved from its reference (rlpulse.detect.drift): the "
        "population stability index of its latest 1,000 samples against the reference's deciles "
        "or categories, less its small-sample bias (0.1: a small shift, 0.25: a large one; 100: "
        "a feature that varied now reads one value, or a new environment or grader version). "
        "kind: input (what the run is fed: prompts, their source and difficulty, versions), "
        "observation (classic RL observations, which move as the policy learns) or behaviour "
        "(actions, response lengths, rewards); feature: obs[2], action, prompt_length, source, "
        "reward[correctness], version:grader ...",
        ("kind", "feature"),
    ),
    _m(
        "rl_drift_onset_step",
        "gauge",
        "rl",
        "The step since which a feature is drifted (an input's score at 0.25 or more, or any "
        "kind's dead channel or new version: a score of 100); absent while it is not.",
        ("kind", "feature"),
    ),
    _m(
        "rl_run_finished_timestamp_seconds",
        "gauge",
        "system",
        "Unix time the run ended in a way rlpulse saw (finish(), interpreter exit, an uncaught "
        "exception): the exporter then stops serving on purpose, so its target going away is "
        "not RLTargetDown; rl_run_outcome says how it ended.",
    ),
    _m(
        "rl_run_outcome",
        "gauge",
        "system",
        "1 once the run has ended: outcome finished (finish() or a normal exit), crashed "
        "(uncaught exception or non-zero sys.exit; reason names it, RLRunCrashed), interrupted "
        "(KeyboardInterrupt) or stopped (asked by an alert; reason names it, no page).",
        ("outcome", "reason"),
    ),
    # ---- RL: reward -----------------------------------------------------------------------------
    _m("rl_reward_mean", "gauge", "rl", "Mean total reward of the last batch."),
    _m("rl_reward_std", "gauge", "rl", "Standard deviation of the total reward in the last batch."),
    _m("rl_reward_min", "gauge", "rl", "Minimum total reward in the last batch."),
    _m("rl_reward_max", "gauge", "rl", "Maximum total reward in the last batch."),
    _m(
        "rl_reward_component_mean",
        "gauge",
        "rl",
        "Mean of one reward component in the last batch.",
        ("component",),
    ),
    _m(
        "rl_reward_component_std",
        "gauge",
        "rl",
        "Standard deviation of one reward component.",
        ("component",),
    ),
    _m(
        "rl_zero_std_groups_ratio",
        "gauge",
        "rl",
        "Fraction of prompt groups whose rewards all agree (no learning signal).",
    ),
    _m(
        "rl_group_outcome_ratio",
        "gauge",
        "rl",
        "Fraction of prompt groups whose rollouts all succeeded (outcome: all_good), all failed "
        "(all_bad) or were mixed; all_good + all_bad is the zero-std fraction.",
        ("outcome",),
    ),
    # ---- RL: divergence, entropy, advantages ----------------------------------------------------
    _m(
        "rl_kl_reference",
        "gauge",
        "rl",
        "KL divergence of the policy to the frozen reference policy.",
    ),
    _m("rl_kl_coefficient", "gauge", "rl", "Weight of the KL penalty (beta)."),
    _m(
        "rl_approx_kl",
        "gauge",
        "rl",
        "Approximate KL between the policy before and after the update step.",
    ),
    _m("rl_entropy", "gauge", "rl", "Mean policy (token) entropy, in nats."),
    _m("rl_advantage_mean", "gauge", "rl", "Mean advantage in the last batch."),
    _m("rl_advantage_std", "gauge", "rl", "Standard deviation of the advantages."),
    _m("rl_advantage_min", "gauge", "rl", "Minimum advantage."),
    _m("rl_advantage_max", "gauge", "rl", "Maximum advantage."),
    _m("rl_return_mean", "gauge", "rl", "Mean discounted return / value target."),
    _m("rl_value_mean", "gauge", "rl", "Mean value-function prediction."),
    _m(
        "rl_clip_fraction_ratio",
        "gauge",
        "rl",
        "Fraction of tokens/samples whose ratio was clipped (bound: any|low|high|dual).",
        ("bound",),
    ),
    _m("rl_value_clip_fraction_ratio", "gauge", "rl", "Fraction of value predictions clipped."),
    # ---- RL: losses and optimisation ------------------------------------------------------------
    _m("rl_loss", "gauge", "rl", "Total training loss."),
    _m("rl_policy_loss", "gauge", "rl", "Policy-gradient (actor) loss."),
    _m("rl_value_loss", "gauge", "rl", "Value-function (critic) loss."),
    _m(
        "rl_explained_variance",
        "gauge",
        "rl",
        "Explained variance of the value function (1 is perfect, < 0 is worse than a constant).",
    ),
    _m(
        "rl_grad_norm",
        "gauge",
        "rl",
        "Gradient norm before clipping (network: policy|critic).",
        ("network",),
    ),
    _m(
        "rl_learning_rate",
        "gauge",
        "rl",
        "Current learning rate (network: policy|critic).",
        ("network",),
    ),
    # ---- RL: train/inference mismatch -----------------------------------------------------------
    _m(
        "rl_importance_ratio_mean",
        "gauge",
        "rl",
        "Mean importance ratio between trainer and rollout-engine probabilities.",
    ),
    _m("rl_importance_ratio_min", "gauge", "rl", "Minimum importance ratio."),
    _m("rl_importance_ratio_max", "gauge", "rl", "Maximum importance ratio."),
    _m(
        "rl_logprob_mismatch",
        "gauge",
        "rl",
        "Mean absolute gap between trainer and rollout-engine token probabilities.",
    ),
    _m(
        "rl_rollout_kl",
        "gauge",
        "rl",
        "KL divergence between the rollout-engine (sampling) policy and the trainer policy on the "
        "same tokens (train/inference mismatch), by estimator (k1|k2|k3).",
        ("estimator",),
    ),
    _m(
        "rl_nonfinite_values_total",
        "counter",
        "rl",
        "NaN or ±Inf values received (for a histogram also values past ±1e300, which its sum "
        "cannot hold), by the catalog metric they were logged to.",
        ("metric",),
    ),
    # ---- task -----------------------------------------------------------------------------------
    _m(
        "rl_eval_score",
        "gauge",
        "task",
        "Score on a benchmark (split: train|eval|adversarial, kept apart).",
        ("benchmark", "split"),
    ),
    _m(
        "rl_response_length_tokens",
        "histogram",
        "task",
        "Length of one response (completion), in tokens.",
        buckets=TOKEN_BUCKETS,
    ),
    _m(
        "rl_response_length_mean_tokens", "gauge", "task", "Mean response length in the last batch."
    ),
    _m(
        "rl_response_length_max_tokens",
        "gauge",
        "task",
        "Maximum response length in the last batch.",
    ),
    _m(
        "rl_response_length_min_tokens",
        "gauge",
        "task",
        "Minimum response length in the last batch.",
    ),
    _m("rl_truncation_ratio", "gauge", "task", "Fraction of responses cut at the length limit."),
    _m(
        "rl_completion_eos_ratio",
        "gauge",
        "task",
        "Fraction of responses that ended with an end-of-sequence token, not at the length "
        "limit (1 - truncation, for trainers that log it this way round).",
    ),
    _m(
        "rl_format_compliance_ratio",
        "gauge",
        "task",
        "Fraction of responses in the required format.",
    ),
    _m("rl_success_ratio", "gauge", "task", "Fraction of rollouts/episodes judged successful."),
    _m(
        "rl_episode_return",
        "gauge",
        "task",
        "Mean undiscounted return of recent episodes (classic RL).",
    ),
    _m("rl_episode_length_steps", "gauge", "task", "Mean length of recent episodes, in env steps."),
    # ---- run metadata ---------------------------------------------------------------------------
    _m(
        "rl_run_info",
        "info",
        "meta",
        "Run metadata; the value is always 1. Free-form metadata keys (env, algo …; up to 16, "
        "label names only) are extra labels.",
        (
            "model",
            "framework",
            "framework_version",
            "benchmark",
            "grader_version",
            "git_sha",
            "rlpulse_version",
            "host",
        ),
    ),
    _m("rl_hyperparameter", "gauge", "meta", "A numeric hyperparameter of the run.", ("name",)),
    _m(
        "rl_unmapped_metric",
        "gauge",
        "meta",
        "A logged numeric key that no key map knows, kept under its original name (bounded).",
        ("key",),
    ),
    # ---- the exporter's own health --------------------------------------------------------------
    _m(
        "rlpulse_dropped_values_total",
        "counter",
        "self",
        "Values not recorded, by reason (non_numeric, none, bool, negative_increment …).",
        ("reason",),
    ),
    _m(
        "rlpulse_label_overflow_total",
        "counter",
        "self",
        "Values whose label hit the cardinality cap and were folded into __overflow__.",
        ("label",),
    ),
    _m(
        "rlpulse_collector_enabled",
        "gauge",
        "self",
        "1 if the collector runs here; 0 if disabled (e.g. no NVML or no GPU on this machine).",
        ("collector",),
    ),
    _m(
        "rlpulse_collector_up",
        "gauge",
        "self",
        "1 if the collector's last reading succeeded.",
        ("collector",),
    ),
    _m(
        "rlpulse_collector_duration_seconds",
        "gauge",
        "self",
        "Time the collector's last reading took.",
        ("collector",),
    ),
    _m(
        "rlpulse_collector_errors_total",
        "counter",
        "self",
        "Collector readings that failed or timed out.",
        ("collector",),
    ),
    # ---- the rollout store's own health (rlpulse.rollouts) --------------------------------------
    _m(
        "rlpulse_rollouts_offered_total",
        "counter",
        "self",
        "Rollouts passed to record_rollouts (before sampling).",
    ),
    _m(
        "rlpulse_rollouts_recorded_total",
        "counter",
        "self",
        "Sampled rollouts written to the run's rollout store.",
    ),
    _m(
        "rlpulse_rollouts_dropped_total",
        "counter",
        "self",
        "Sampled rollouts not stored, by reason (queue_full, disk_full, locked, store_error, "
        "invalid, redacted, redact_error).",
        ("reason",),
    ),
    _m(
        "rlpulse_rollouts_evicted_total",
        "counter",
        "self",
        "Stored rollouts removed, by reason (resampled, rows, bytes, disk_full).",
        ("reason",),
    ),
    _m(
        "rlpulse_rollout_store_bytes",
        "gauge",
        "self",
        "Size on disk of the run's rollout store (SQLite file and WAL).",
    ),
    _m("rlpulse_rollout_store_rows", "gauge", "self", "Rollouts held in the run's rollout store."),
    # ---- acting on alerts (rlpulse.control) -----------------------------------------------------
    _m(
        "rl_checkpoint_step",
        "gauge",
        "system",
        "Step of the latest checkpoint the trainer reported (rlpulse.checkpoint_saved).",
    ),
    _m(
        "rl_alert_action_timestamp_seconds",
        "gauge",
        "system",
        "Unix time an alert of this run asked the trainer to act (action save or stop, per "
        "rlpulse.start(on_alert=...)); a stopped run ends with rl_run_outcome{outcome=stopped}.",
        ("alertname", "action"),
    ),
    _m(
        "rl_failure_onset_step",
        "gauge",
        "rl",
        "Where the failure a step alert reports began: the first logged step of its step "
        "signal's latest excursion past the alert's first level (series: the signal's).",
        ("alertname", "series"),
    ),
    _m(
        "rl_last_good_step",
        "gauge",
        "rl",
        "The logged step before rl_failure_onset_step: the last step before the failure began.",
        ("alertname", "series"),
    ),
    _m(
        "rl_resume_checkpoint_step",
        "gauge",
        "rl",
        "Step of the newest checkpoint the trainer reported (rlpulse.checkpoint_saved, the "
        "TRL/SB3/verl integrations) at or before rl_last_good_step; checkpoint is its path.",
        ("alertname", "series", "checkpoint"),
    ),
    _m(
        "rlpulse_alertmanager_errors_total",
        "counter",
        "self",
        "Reads of Alertmanager's API that failed (unreachable, refused, http_<status>, "
        "bad_answer): the run cannot act on its alerts meanwhile.",
        ("reason",),
    ),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in CATALOG}


def get(name: str) -> Metric:
    """The catalog entry called ``name``; a clear error for an unknown name."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a metric in the rlpulse catalog") from None


def series_names(metric: Metric) -> tuple[str, ...]:
    """The sample names a metric exposes (histograms expose _bucket/_sum/_count)."""
    if metric.type == "histogram":
        return tuple(metric.name + s for s in ("_bucket", "_sum", "_count"))
    return (metric.name,)


def all_series_names() -> frozenset[str]:
    """Every sample name the exporter can emit: what a PromQL reference check compares against."""
    return frozenset(s for m in CATALOG for s in series_names(m))
