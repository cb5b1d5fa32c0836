"""The RL training dashboard: the twelve plots that catch nearly every failing run.

Rows follow the catalog's layers: run status, reward, policy (entropy and divergence),
optimisation, task (responses and episodes) and system (throughput, phases, liveness). RL scalars
are averaged across ranks per run (trainers usually log them on rank 0 only, so that is one
series). What every rank exports (its step, liveness, counters, histograms) is read from the
per-run recording rules of rlpulse.stack.rules, so the panels stay fast at 1,024 ranks.
"""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import stat, timeseries
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

from rlpulse.stack import rules
from rlpulse.stack.grafana_common import (
    Query,
    Recorded,
    Row,
    Selector,
    alerts_annotation,
    assemble,
    datasource_variable,
    firing_alerts,
    graph,
    label_variable,
    log_scale,
    new_dashboard,
    right_axis,
    single_stat,
    stacked_percent,
    thresholds,
    unit_of,
    zero_line,
)

SEL = Selector(("job", "run_id", "rank"))
REC = Recorded(("job", "run_id"))
LAST_LOG_NEWEST = rules.aggregate_name("run", rules.LAST_LOG, "max")
LAST_LOG_OLDEST = rules.aggregate_name("run", rules.LAST_LOG, "min")
RUN = "{{run_id}}"
PER_SECOND = "suffix:/s"


def avg_run(name: str, by: str = "", **matchers: str) -> str:
    """The run's value of a catalog gauge, averaged over ranks (and split by label ``by``)."""
    labels = ", ".join(["run_id", by] if by else ["run_id"])
    return f"avg by ({labels}) ({SEL(name, **matchers)})"


# ---- run status ------------------------------------------------------------------------------


def current_step() -> stat.Panel:
    return single_stat(
        "Step",
        unit_of("rl_step"),
        "The trainer's global step, per run.",
        [Query(f"max by (run_id) ({REC(rules.aggregate_name('run', rules.STEP, 'max'))})", RUN)],
    )


def train_steps_rate() -> stat.Panel:
    return single_stat(
        "Optimizer steps / s",
        PER_SECOND,
        "Rate of optimizer steps; 0 while the process is up means training stalled.",
        [Query(f"max by (run_id) ({REC(rules.rate_name(rules.TRAIN_STEPS))})", RUN)],
    )


def since_last_log() -> stat.Panel:
    return single_stat(
        "Since last log",
        "s",
        "Seconds since the trainer last called log() on any rank: grows while a loop hangs.",
        [Query(f"time() - max by (run_id) ({REC(LAST_LOG_NEWEST)})", RUN)],
    ).thresholds(thresholds((None, "green"), (120.0, "orange"), (600.0, "red")))


def alerts_now() -> stat.Panel:
    return single_stat(
        "Firing alerts",
        "none",
        "Alerts firing now for the selected runs (also drawn as annotations on every graph).",
        [Query(f"count({firing_alerts(SEL)}) or vector(0)", "firing")],
    ).thresholds(thresholds((None, "green"), (1.0, "red")))


# ---- reward ----------------------------------------------------------------------------------


def reward_band() -> timeseries.Panel:
    """Mean reward inside its min/max band, eval score overlaid; one copy per selected run."""
    panel = graph(
        "Reward · $run_id",
        unit_of("rl_reward_mean"),
        "Batch reward mean inside the batch min/max band, with the held-out eval score on the "
        "right axis. Training reward rising while eval falls is the reward-hacking signature.",
        [
            Query(f"avg({SEL('rl_reward_mean')})", "mean"),
            Query(f"min({SEL('rl_reward_min')})", "min"),
            Query(f"max({SEL('rl_reward_max')})", "max"),
            Query(
                f"avg by (benchmark) ({SEL('rl_eval_score', split='eval')})", "eval {{benchmark}}"
            ),
        ],
    )
    band = [dm.DynamicConfigValue(id_val="custom.lineWidth", value=0)]
    return (
        right_axis(panel, 3, unit_of("rl_eval_score"))
        .fill_opacity(0)
        .repeat("run_id")
        .repeat_direction("h")
        .max_per_row(2)
        .override_by_name("min", band)
        .override_by_name(
            "max",
            [
                *band,
                dm.DynamicConfigValue(id_val="custom.fillBelowTo", value="min"),
                dm.DynamicConfigValue(id_val="custom.fillOpacity", value=20),
            ],
        )
    )


def reward_components() -> timeseries.Panel:
    return graph(
        "Reward components",
        unit_of("rl_reward_component_mean"),
        "Mean of each reward component: shows which term drives (or games) the total.",
        [Query(avg_run("rl_reward_component_mean", "component"), "{{component}} · " + RUN)],
    )


def reward_spread() -> timeseries.Panel:
    panel = graph(
        "Reward spread and zero-std groups",
        unit_of("rl_reward_std"),
        "Within-batch reward std (left) and the share of prompt groups whose rewards all agree "
        "(right): such groups give group-relative methods no learning signal.",
        [
            Query(avg_run("rl_reward_std"), "reward std · " + RUN),
            Query(avg_run("rl_zero_std_groups_ratio"), "zero-std groups · " + RUN),
        ],
    )
    return right_axis(panel, 1, unit_of("rl_zero_std_groups_ratio"))


def eval_scores() -> timeseries.Panel:
    return graph(
        "Eval scores by split",
        unit_of("rl_eval_score"),
        "Benchmark scores per split (train, eval, adversarial): a gap opening between train and "
        "eval is overfitting or reward hacking.",
        [Query(avg_run("rl_eval_score", "benchmark, split"), "{{benchmark}} {{split}} · " + RUN)],
    )


# ---- policy: entropy and divergence ----------------------------------------------------------


def entropy(baseline_window: str) -> timeseries.Panel:
    baseline = f"avg by (run_id) (max_over_time({SEL('rl_entropy')}[{baseline_window}]))"
    panel = graph(
        "Policy entropy",
        unit_of("rl_entropy"),
        f"Mean token entropy in nats (left) and as a share of the run's peak over the last "
        f"{baseline_window} (right). A fast fall towards 0 is entropy collapse.",
        [
            Query(avg_run("rl_entropy"), "entropy · " + RUN),
            Query(f"{avg_run('rl_entropy')} / {baseline}", "% of baseline · " + RUN),
        ],
    )
    return right_axis(panel, 1, "percentunit")


def kl_reference() -> timeseries.Panel:
    panel = graph(
        "KL to reference",
        unit_of("rl_kl_reference"),
        "KL of the policy to the frozen reference (left) and the KL coefficient beta (right). "
        "KL climbing fast while beta is 0 or tiny is a drifting policy.",
        [
            Query(avg_run("rl_kl_reference"), "KL · " + RUN),
            Query(avg_run("rl_kl_coefficient"), "beta · " + RUN),
        ],
    )
    return right_axis(panel, 1, unit_of("rl_kl_coefficient"))


def update_kl_and_clipping() -> timeseries.Panel:
    panel = graph(
        "Update-step KL and clip fractions",
        unit_of("rl_approx_kl"),
        "Approximate KL between policy before and after each update (left) and the share of "
        "clipped ratios and value predictions (right): both high means steps are too large.",
        [
            Query(avg_run("rl_approx_kl"), "approx KL · " + RUN),
            Query(avg_run("rl_clip_fraction_ratio", "bound"), "clip {{bound}} · " + RUN),
            Query(avg_run("rl_value_clip_fraction_ratio"), "value clip · " + RUN),
        ],
    )
    for index in (1, 2):
        panel = right_axis(panel, index, unit_of("rl_clip_fraction_ratio"))
    return panel


def train_inference_mismatch() -> timeseries.Panel:
    panel = graph(
        "Train / inference mismatch",
        unit_of("rl_importance_ratio_mean"),
        "Importance ratio between trainer and rollout-engine probabilities (mean, min, max; "
        "ideal 1) and their mean absolute log-prob gap (right).",
        [
            Query(avg_run("rl_importance_ratio_mean"), "ratio mean · " + RUN),
            Query(f"min by (run_id) ({SEL('rl_importance_ratio_min')})", "ratio min · " + RUN),
            Query(f"max by (run_id) ({SEL('rl_importance_ratio_max')})", "ratio max · " + RUN),
            Query(avg_run("rl_logprob_mismatch"), "log-prob gap · " + RUN),
        ],
    )
    return right_axis(panel, 3, unit_of("rl_logprob_mismatch"))


# ---- optimisation ----------------------------------------------------------------------------


def grad_norm() -> timeseries.Panel:
    return log_scale(
        graph(
            "Gradient norm (log)",
            unit_of("rl_grad_norm"),
            "Gradient norm before clipping, per network, on a log axis: spikes precede divergence.",
            [Query(avg_run("rl_grad_norm", "network"), "{{network}} · " + RUN)],
            span=8,
        )
    )


def nonfinite_values() -> timeseries.Panel:
    expr = (
        f"sum by (run_id, metric) (increase({SEL('rl_nonfinite_values_total')}[$__rate_interval]))"
    )
    return graph(
        "Non-finite values",
        "short",
        "NaN or ±Inf values logged, per metric they were logged to. Anything above 0 is a bug "
        "or a diverged run.",
        [Query(expr, "{{metric}} · " + RUN)],
        span=8,
    ).draw_style(cm.GraphDrawStyle.BARS)


def learning_rate() -> timeseries.Panel:
    return graph(
        "Learning rate",
        unit_of("rl_learning_rate"),
        "Current learning rate per network (schedule and warm-up).",
        [Query(avg_run("rl_learning_rate", "network"), "{{network}} · " + RUN)],
        span=8,
    )


def losses() -> timeseries.Panel:
    panel = graph(
        "Policy and value losses",
        unit_of("rl_policy_loss"),
        "Total and policy-gradient loss (left) and the critic's value loss (right, its scale "
        "differs). A value loss that explodes drags the policy with it.",
        [
            Query(avg_run("rl_loss"), "loss · " + RUN),
            Query(avg_run("rl_policy_loss"), "policy · " + RUN),
            Query(avg_run("rl_value_loss"), "value · " + RUN),
        ],
        span=8,
    )
    return right_axis(panel, 2, unit_of("rl_value_loss"))


def explained_variance() -> timeseries.Panel:
    return zero_line(
        graph(
            "Explained variance",
            unit_of("rl_explained_variance"),
            "How well the value function predicts returns: 1 is perfect, below 0 (red line) is "
            "worse than predicting the mean.",
            [Query(avg_run("rl_explained_variance"), RUN)],
            span=8,
        )
    )


def advantages() -> timeseries.Panel:
    return graph(
        "Advantages",
        unit_of("rl_advantage_mean"),
        "Advantage mean, std, min and max per batch: a std near 0 means no learning signal, "
        "extreme min/max means outlier rollouts dominate the update.",
        [
            Query(avg_run("rl_advantage_mean"), "mean · " + RUN),
            Query(avg_run("rl_advantage_std"), "std · " + RUN),
            Query(f"min by (run_id) ({SEL('rl_advantage_min')})", "min · " + RUN),
            Query(f"max by (run_id) ({SEL('rl_advantage_max')})", "max · " + RUN),
        ],
        span=8,
    )


# ---- task: responses and episodes ------------------------------------------------------------


def response_length() -> timeseries.Panel:
    hist = "rl_response_length_tokens"
    return graph(
        "Response length",
        unit_of(hist),
        "Batch mean and max response length, with p50/p90 of every rank's responses from the "
        "histogram (recorded per run). Steady growth against the run's start is length "
        "explosion.",
        [
            Query(avg_run("rl_response_length_mean_tokens"), "mean · " + RUN),
            Query(f"max by (run_id) ({SEL('rl_response_length_max_tokens')})", "max · " + RUN),
            Query(REC(rules.LENGTH_QUANTILES["p50"]), "p50 · " + RUN),
            Query(REC(rules.LENGTH_QUANTILES["p90"]), "p90 · " + RUN),
        ],
        span=8,
    )


def response_quality() -> timeseries.Panel:
    return (
        graph(
            "Truncation, format compliance, success",
            unit_of("rl_truncation_ratio"),
            "Share of responses cut at the length limit, in the required format, and judged "
            "successful. Rising truncation or falling compliance precede reward collapse.",
            [
                Query(avg_run("rl_truncation_ratio"), "truncated · " + RUN),
                Query(avg_run("rl_format_compliance_ratio"), "format ok · " + RUN),
                Query(avg_run("rl_success_ratio"), "success · " + RUN),
            ],
            span=8,
        )
        .min(0)
        .max(1)
    )


def episodes() -> timeseries.Panel:
    panel = graph(
        "Episodes (classic RL)",
        unit_of("rl_episode_return"),
        "Mean undiscounted episode return (left) and episode length in env steps (right).",
        [
            Query(avg_run("rl_episode_return"), "return · " + RUN),
            Query(avg_run("rl_episode_length_steps"), "length · " + RUN),
        ],
        span=8,
    )
    return right_axis(panel, 1, unit_of("rl_episode_length_steps"))


# ---- system: throughput, phases, liveness ----------------------------------------------------


def throughput() -> timeseries.Panel:
    panel = graph(
        "Throughput",
        PER_SECOND,
        "Samples, env steps and optimizer steps per second (left) and generated tokens per "
        "second (right). A drop against the run's own level is a slowdown.",
        [
            Query(REC(rules.rate_name(rules.SAMPLES)), "samples · " + RUN),
            Query(REC(rules.rate_name(rules.ENV_STEPS)), "env steps · " + RUN),
            Query(REC(rules.rate_name(rules.TRAIN_STEPS)), "train steps · " + RUN),
            Query(REC(rules.rate_name(rules.COMPLETION_TOKENS)), "tokens · " + RUN),
        ],
        span=8,
    )
    return right_axis(panel, 3, "suffix: tok/s")


def phase_times() -> timeseries.Panel:
    return stacked_percent(
        graph(
            "Phase time share",
            "percentunit",
            "Share of wall time in each phase (rollout, reward, update, sync, eval …): which "
            "phase a slowdown comes from.",
            [Query(f"avg by (phase) ({REC(rules.PHASE_SHARE)})", "{{phase}}")],
            span=8,
        )
    )


def liveness() -> timeseries.Panel:
    return graph(
        "Liveness: seconds since last log",
        "s",
        "Age of the last log() call of each run's most stalled rank and of its freshest one. A "
        "saw-tooth is healthy; a straight climb is a stalled loop (the process may still be up); "
        "only the oldest climbing is one hung rank.",
        [
            Query(f"time() - {REC(LAST_LOG_OLDEST)}", "oldest rank · " + RUN),
            Query(f"time() - {REC(LAST_LOG_NEWEST)}", "newest rank · " + RUN),
        ],
        span=8,
    )


def build(uid: str, baseline_window: str) -> dict[str, Any]:
    """The RL training dashboard as Grafana JSON; entropy baseline: peak over the window."""
    dashboard = (
        new_dashboard(
            uid,
            "rlpulse · RL training",
            "The twelve plots that catch nearly every failing RL run, with alerts as annotations.",
            ["rl", "training"],
        )
        .with_variable(datasource_variable())
        .with_variable(label_variable("job", "Job", "rl_run_info", Selector(())))
        .with_variable(label_variable("run_id", "Run", "rl_run_info", Selector(("job",))))
        .with_variable(label_variable("rank", "Rank", "rl_run_info", Selector(("job", "run_id"))))
        .annotation(alerts_annotation(SEL))
    )
    rows = [
        Row("Run status", [current_step(), train_steps_rate(), since_last_log(), alerts_now()]),
        Row("Reward", [reward_band(), reward_components(), reward_spread(), eval_scores()]),
        Row(
            "Policy: entropy and divergence",
            [entropy(baseline_window), kl_reference(), update_kl_and_clipping()]
            + [train_inference_mismatch()],
        ),
        Row(
            "Optimisation",
            [grad_norm(), nonfinite_values(), learning_rate(), losses()]
            + [explained_variance(), advantages()],
        ),
        Row("Task: responses and episodes", [response_length(), response_quality(), episodes()]),
        Row("System: throughput, phases, liveness", [throughput(), phase_times(), liveness()]),
    ]
    return assemble(dashboard, rows)
