"""The RL training dashboard: one run, what its alerts test, and the plots that explain them.

It opens on one run (the Run variable is single-valued). The row "What the alerts test" plots
each step signal an alert thresholds, with the alert's levels from the same Config the rules use
drawn as dashed lines, so a page leads to the curve that caused it. The other rows follow the
catalog's layers: reward, policy (entropy and divergence), optimisation, task (responses;
classic-RL runs have a dashboard of their own) and system (throughput, phases as shares of wall
time, liveness). RL scalars are averaged across ranks per run (trainers usually log them on
rank 0 only, so that is one series). What every rank exports (its step, liveness, counters,
histograms) is read from the per-run recording rules of rlpulse.stack.rules, so the panels stay
fast at 1,024 ranks.
"""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import stat, timeseries
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

from rlpulse.detect import dynamics
from rlpulse.stack import panels as t
from rlpulse.stack import rules
from rlpulse.stack.alerts import STEP_ALERTS
from rlpulse.stack.alerts.liveness import ENDED_FIRING
from rlpulse.stack.alerts.rl import ENTROPY_COLLAPSE
from rlpulse.stack.alerts.step import StepAlert
from rlpulse.stack.config import Config
from rlpulse.stack.dashboards import steps
from rlpulse.stack.dashboards.common import (
    CHOSEN_RUN,
    NATS,
    SCIENTIFIC,
    SIGNAL_UNITS,
    TOKENS,
    Recorded,
    Row,
    Selector,
    Target,
    alert_levels,
    assemble,
    firing_alerts,
    graph,
    label_variable,
    log_scale,
    new_dashboard,
    newest_run_variable,
    phase_wall_share,
    right_axis,
    rollout_links,
    rollouts_variable,
    single_stat,
    stacked,
    step_range_variables,
    symlog_scale,
    threshold_lines,
    thresholds,
    unit_of,
    zero_line,
    zero_when_absent,
)
from rlpulse.stack.metrics import (
    COMPLETION_TOKENS,
    ENV_STEPS,
    EPISODES,
    LAST_LOG,
    PROMPT_TOKENS,
    SAMPLES,
    STEP,
    TRAIN_STEPS,
)

SEL = Selector(("job", "run_id", "rank"))
REC = Recorded(("job", "run_id"))
LAST_LOG_NEWEST = rules.aggregate_name("run", LAST_LOG, "max")
LAST_LOG_OLDEST = rules.aggregate_name("run", LAST_LOG, "min")
RUN = "{{run_id}}"
PER_SECOND = "suffix:/s"


def avg_run(name: str, by: str = "", /, **matchers: str) -> str:
    """The run's value of a catalog gauge, averaged over ranks (and split by label ``by``)."""
    labels = ", ".join(["run_id", by] if by else ["run_id"])
    return f"avg by ({labels}) ({SEL(name, **matchers)})"


def per_run(label: str, name: str, by: str = "", /, **matchers: str) -> Target:
    """A line per run of ``avg_run``, its legend ``label · <run>``."""
    return Target(avg_run(name, by, **matchers), f"{label} · {RUN}")


# ---- run status ------------------------------------------------------------------------------


def current_step() -> stat.Panel:
    return single_stat(
        "Step",
        unit_of("rl_step"),
        "The trainer's global step, per run.",
        [Target(f"max by (run_id) ({REC(rules.aggregate_name('run', STEP, 'max'))})", RUN)],
    )


def train_steps_rate() -> stat.Panel:
    return single_stat(
        "Steps / s now",
        PER_SECOND,
        "Rate of optimizer steps; 0 while the process is up means training stalled.",
        [Target(f"max by (run_id) ({REC(rules.rate_name(TRAIN_STEPS))})", RUN)],
    )


def since_last_log_expr() -> str:
    """Seconds from the run's last log to now, or to its end once it said it ended."""
    last = f"max by (run_id) (last_over_time({REC(LAST_LOG_NEWEST)}[$__range]))"
    ended = (
        f"max by (run_id) (last_over_time({SEL('rl_run_finished_timestamp_seconds')}[$__range]))"
    )
    return f"(({ended} - {last}) >= 0) or (time() - {last})"


def since_last_log() -> stat.Panel:
    return single_stat(
        "Since last log",
        "s",
        "Seconds since the trainer last called log() on any rank, from the last log time seen "
        "in the time range: grows while a loop hangs and keeps growing after the process died "
        "(its series are gone, their last value is not). A run that said it ended (finished, "
        "stopped, crashed) stops the clock at its end: the gap between its last log and its end.",
        [Target(since_last_log_expr(), RUN)],
    ).thresholds(thresholds((None, "green"), (120.0, "orange"), (600.0, "red")))


def alerts_now() -> stat.Panel:
    return single_stat(
        "Firing alerts",
        "none",
        "Alerts firing now for the selected runs (also drawn as annotations on every graph).",
        [Target(f"count({firing_alerts(SEL)}) or vector(0)", "firing")],
    ).thresholds(thresholds((None, "green"), (1.0, "red")))


RUNNING = "running"
DIED = "died (no end recorded)"


def outcome_expr() -> str:
    """The run's state at the end of the time range, as an ``outcome`` label: the outcome it
    exported (``rl_run_outcome``, while its final scrape is fresh), ``running`` while it is
    scraped without one (a run resumed after an earlier end), else the last outcome in the
    time range, else ``died (no end recorded)`` (seen in the range, gone without an outcome:
    a kill, an OOM, a lost node)."""
    ended = f"max by (outcome, reason) ({SEL('rl_run_outcome')})"
    up = f'label_replace(max({SEL("rl_run_info")}), "outcome", "{RUNNING}", "", "")'
    last = f"max by (outcome, reason) (last_over_time({SEL('rl_run_outcome')}[$__range]))"
    seen = f"max(last_over_time({SEL('rl_run_info')}[$__range]))"
    died = f'label_replace({seen}, "outcome", "{DIED}", "", "")'
    return " or on() ".join((ended, up, last, died))


def outcome() -> stat.Panel:
    return (
        single_stat(
            "Outcome",
            "none",
            "How the run ended (rl_run_outcome, the last one in the time range): finished, "
            "crashed (pages RLRunCrashed), interrupted, or stopped by one of its own alerts "
            "(rlpulse.start(on_alert=...); reason names the alert, no page); running while it "
            f"is scraped without one; '{DIED}' when it went away without one (a kill: "
            "RLTargetDown pages). Below it, the alerts that were firing when the run ended "
            "(kept after they resolve: an ended run does not cure its failure).",
            [
                Target(outcome_expr(), "{{outcome}} {{reason}}", instant=True),
                Target(
                    f"max by (alertname, severity) ({REC(ENDED_FIRING)})",
                    "{{alertname}} ({{severity}}) firing at the end",
                    instant=True,
                ),
            ],
            span=4,
        )
        .text_mode(cm.BigValueTextMode.NAME)
        .graph_mode(cm.BigValueGraphMode.NONE)
    )


# ---- what the alerts test --------------------------------------------------------------------


# signal units whose values span decades (z-scores, multiples of a baseline): symlog axes
SPANNING_UNITS = ("sigma", "multiple")


def alert_signal(alert: StepAlert, cfg: Config) -> timeseries.Panel:
    """The step signal ``alert`` thresholds, against its warning and critical levels."""
    sig = alert.sig
    knobs = getattr(cfg.alerts, alert.key)
    levels = alert.tiers(knobs)
    worst = "max" if alert.above else "min"
    watched = sig.metric.removeprefix("rl_")  # names the line of a signal without sub-series
    expr = (
        f"label_replace({worst} by (run_id, series) ({SEL('rl_step_signal', signal=sig.name)}), "
        f'"series", "{watched}", "series", "")'
    )
    described = ", ".join(f"{sev} {level:g}" for sev, level in levels)
    panel = graph(
        t.alert_signal(alert.name, sig.name),
        SIGNAL_UNITS[sig.unit],
        f"What {alert.name} tests: {sig.doc} It fires "
        f"{'above' if alert.above else 'below'} the dashed lines ({described}; "
        f"alerts.{alert.key} of the rlpulse config), per logged step of {sig.metric}.",
        [Target(expr, RUN + " · {{series}}")],
        span=8,
        height=6,
    )
    if sig.unit in SPANNING_UNITS:  # a z-score of 3,600 next to a level of 8
        panel = symlog_scale(panel)
    return rollout_links(threshold_lines(panel, alert_levels(levels)))


def alert_signals(cfg: Config) -> list[timeseries.Panel]:
    """One panel per step alert, RL dynamics first."""
    return [alert_signal(a, cfg) for area in ("rl", "task") for a in STEP_ALERTS[area]]


# ---- reward ----------------------------------------------------------------------------------

HEALTHY_LOW, HEALTHY_HIGH = "healthy runs (low)", "healthy runs (high)"


def reference_band(series: str) -> list[Target]:
    """The band of earlier healthy runs at the run's step (``rl_reference_band``; a run started
    with a reference band only), as two queries ``with_reference_band`` draws."""
    return [
        Target(f"min({SEL('rl_reference_band', series=series, bound='low')})", HEALTHY_LOW),
        Target(f"max({SEL('rl_reference_band', series=series, bound='high')})", HEALTHY_HIGH),
    ]


def with_reference_band(panel: timeseries.Panel) -> timeseries.Panel:
    """The reference band's bounds dashed, the band between them lightly filled."""
    dashed = [
        dm.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [6, 4]}),
        dm.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "green"}),
    ]
    return panel.override_by_name(HEALTHY_LOW, dashed).override_by_name(
        HEALTHY_HIGH,
        [
            *dashed,
            dm.DynamicConfigValue(id_val="custom.fillBelowTo", value=HEALTHY_LOW),
            dm.DynamicConfigValue(id_val="custom.fillOpacity", value=8),
        ],
    )


def reward_band() -> timeseries.Panel:
    """Mean reward inside its min/max band, eval score overlaid; links to the run's best and
    worst rollouts (a spike: what the highest rewards were paid for)."""
    panel = graph(
        t.REWARD,
        unit_of("rl_reward_mean"),
        "Batch reward mean inside the batch min/max band, with the held-out eval score on the "
        "right axis. Training reward rising while eval falls is the reward-hacking signature. "
        "Dashed: the band earlier healthy runs spanned at the same step (a run started with a "
        "reference band, rlpulse band build).",
        [
            Target(f"avg({SEL('rl_reward_mean')})", "mean"),
            Target(f"min({SEL('rl_reward_min')})", "min"),
            Target(f"max({SEL('rl_reward_max')})", "max"),
            Target(
                f"avg by (benchmark) ({SEL('rl_eval_score', split='eval')})", "eval {{benchmark}}"
            ),
            *reference_band("reward_mean"),
        ],
    )
    band = [dm.DynamicConfigValue(id_val="custom.lineWidth", value=0)]
    panel = with_reference_band(rollout_links(panel, ("best", "worst"), CHOSEN_RUN))
    return (
        right_axis(panel, 3, unit_of("rl_eval_score"))
        .fill_opacity(0)
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
    return rollout_links(
        graph(
            t.REWARD_COMPONENTS,
            unit_of("rl_reward_component_mean"),
            "Mean of each reward component: shows which term drives (or games) the total.",
            [per_run("{{component}}", "rl_reward_component_mean", "component")],
        ),
        ("best", "worst"),
    )


def reward_spread() -> timeseries.Panel:
    panel = graph(
        t.REWARD_SPREAD,
        unit_of("rl_reward_std"),
        "Within-batch reward std (left) and the share of prompt groups whose rewards all agree "
        "(right): such groups give group-relative methods no learning signal.",
        [
            per_run("reward std", "rl_reward_std"),
            per_run("zero-std groups", "rl_zero_std_groups_ratio"),
        ],
    )
    return right_axis(panel, 1, unit_of("rl_zero_std_groups_ratio"))


def eval_scores() -> timeseries.Panel:
    return graph(
        t.EVAL_SCORES,
        unit_of("rl_eval_score"),
        "Benchmark scores per split (train, eval, adversarial): a gap opening between train and "
        "eval is overfitting or reward hacking.",
        [per_run("{{benchmark}} {{split}}", "rl_eval_score", "benchmark, split")],
    )


def drift() -> timeseries.Panel:
    """The features furthest from their reference (``rl_drift_score``): which part moved."""
    return graph(
        t.DRIFT,
        "short",
        "The 8 features whose distribution moved most from its reference (rlpulse.detect."
        "drift: the run's first 1,000 samples of it, or a pinned reference), as a population "
        "stability index: 0.1 a small shift, 0.25 a large one (RLInputDrift warns above its "
        "level for inputs), 100 a feature that varied and now reads one value, a new "
        "environment or grader version, or new dynamics. kind: input (prompts, their source and "
        "difficulty, versions), observation (moves as the policy learns: context, warns only "
        "when dead; dynamics: the error ratio of a model of the env's step, 100 once it passed "
        f"{dynamics.LEVEL:g}), behaviour (actions, response lengths, rewards: context).",
        [
            Target(
                f"topk(8, max by (kind, feature) ({SEL('rl_drift_score')}))",
                "{{kind}} {{feature}}",
            )
        ],
    )


# ---- policy: entropy and divergence ----------------------------------------------------------


def entropy() -> timeseries.Panel:
    collapse = ENTROPY_COLLAPSE.sig
    panel = graph(
        t.ENTROPY,
        NATS,
        "Mean token entropy in nats (left) and, on the right, the smoothed entropy as a share "
        f"of its peak so far: the step signal {collapse.name} that RLEntropyCollapse tests. A "
        "fast fall towards 0 is entropy collapse.",
        [
            per_run("entropy", "rl_entropy"),
            Target(
                f"min by (run_id) ({SEL('rl_step_signal', signal=collapse.name)})",
                "% of peak · " + RUN,
            ),
        ],
    )
    return right_axis(panel, 1, SIGNAL_UNITS[collapse.unit])


def kl_reference() -> timeseries.Panel:
    panel = graph(
        t.KL_REFERENCE,
        NATS,
        "KL of the policy to the frozen reference in nats (left, log axis: one spike does not "
        "flatten the rest) and the KL coefficient beta (right, linear). KL climbing fast while "
        "beta is 0 "
        "or tiny is a drifting policy.",
        [
            per_run("KL", "rl_kl_reference"),
            per_run("beta", "rl_kl_coefficient"),
        ],
    )
    return log_scale(right_axis(panel, 1, SCIENTIFIC), 1)  # beta (often 0) stays linear


def update_kl_and_clipping() -> timeseries.Panel:
    panel = graph(
        t.UPDATE_KL,
        NATS,
        "Approximate KL between policy before and after each update in nats (left) and the "
        "share of clipped ratios and value predictions (right): both high means steps are too "
        "large.",
        [
            per_run("approx KL", "rl_approx_kl"),
            per_run("clip {{bound}}", "rl_clip_fraction_ratio", "bound"),
            per_run("value clip", "rl_value_clip_fraction_ratio"),
        ],
    )
    for index in (1, 2):
        panel = right_axis(panel, index, unit_of("rl_clip_fraction_ratio"))
    return panel


def train_inference_mismatch() -> timeseries.Panel:
    panel = graph(
        t.MISMATCH,
        "none",
        "Importance ratio between trainer and rollout-engine probabilities (mean, min, max; "
        "ideal 1) and their mean absolute log-prob gap in nats (right).",
        [
            per_run("ratio mean", "rl_importance_ratio_mean"),
            Target(f"min by (run_id) ({SEL('rl_importance_ratio_min')})", "ratio min · " + RUN),
            Target(f"max by (run_id) ({SEL('rl_importance_ratio_max')})", "ratio max · " + RUN),
            per_run("log-prob gap", "rl_logprob_mismatch"),
        ],
    )
    return right_axis(panel, 3, NATS)


# ---- optimisation ----------------------------------------------------------------------------


def grad_norm() -> timeseries.Panel:
    return rollout_links(
        log_scale(
            graph(
                t.GRAD_NORM,
                unit_of("rl_grad_norm"),
                "Gradient norm before clipping, per network, on a log axis: spikes precede "
                "divergence.",
                [per_run("{{network}}", "rl_grad_norm", "network")],
                span=8,
            )
        )
    )


def nonfinite_values() -> timeseries.Panel:
    increase = (
        f"sum by (run_id, metric) (increase({SEL('rl_nonfinite_values_total')}[$__rate_interval]))"
    )
    return graph(
        t.NONFINITE,
        "short",
        "NaN or ±Inf values logged, per metric they were logged to (0, as metric none, until "
        "the first one). "
        "Anything above 0 is a bug or a diverged run.",
        [
            Target(
                zero_when_absent(increase, ["run_id"], SEL("rl_run_info"), "metric"),
                "{{metric}} · " + RUN,
            )
        ],
        span=8,
    ).draw_style(cm.GraphDrawStyle.BARS)


def learning_rate() -> timeseries.Panel:
    return graph(
        t.LEARNING_RATE,
        SCIENTIFIC,
        "Current learning rate per network (schedule and warm-up).",
        [per_run("{{network}}", "rl_learning_rate", "network")],
        span=8,
    )


def losses() -> timeseries.Panel:
    panel = graph(
        t.LOSSES,
        unit_of("rl_policy_loss"),
        "Total and policy-gradient loss (left) and the critic's value loss (right, its scale "
        "differs). A value loss that explodes drags the policy with it.",
        [
            per_run("loss", "rl_loss"),
            per_run("policy", "rl_policy_loss"),
            per_run("value", "rl_value_loss"),
        ],
        span=8,
    )
    return right_axis(panel, 2, unit_of("rl_value_loss"))


def explained_variance() -> timeseries.Panel:
    return zero_line(
        graph(
            t.EXPLAINED_VARIANCE,
            unit_of("rl_explained_variance"),
            "How well the value function predicts returns: 1 is perfect, below 0 (red line) is "
            "worse than predicting the mean.",
            [Target(avg_run("rl_explained_variance"), RUN)],
            span=8,
        )
    )


def advantages() -> timeseries.Panel:
    return graph(
        t.ADVANTAGES,
        unit_of("rl_advantage_mean"),
        "Advantage mean, std, min and max per batch: a std near 0 means no learning signal, "
        "extreme min/max means outlier rollouts dominate the update.",
        [
            per_run("mean", "rl_advantage_mean"),
            per_run("std", "rl_advantage_std"),
            Target(f"min by (run_id) ({SEL('rl_advantage_min')})", "min · " + RUN),
            Target(f"max by (run_id) ({SEL('rl_advantage_max')})", "max · " + RUN),
        ],
        span=8,
    )


# ---- task: responses ------------------------------------------------------------


def response_length() -> timeseries.Panel:
    return rollout_links(
        graph(
            t.RESPONSE_LENGTH,
            TOKENS,
            "Batch mean and max response length, with p50/p90/p99 of every rank's responses "
            "from the histogram (recorded per run). Steady growth against the run's start is "
            "length explosion.",
            [
                per_run("mean", "rl_response_length_mean_tokens"),
                Target(f"max by (run_id) ({SEL('rl_response_length_max_tokens')})", "max · " + RUN),
                *(Target(REC(name), f"{q} · {RUN}") for q, name in rules.LENGTH_QUANTILES.items()),
            ],
            span=12,
        ),
        ("longest",),
    )


def response_quality() -> timeseries.Panel:
    return rollout_links(
        graph(
            t.RESPONSE_QUALITY,
            unit_of("rl_truncation_ratio"),
            "Share of responses cut at the length limit, in the required format, and judged "
            "successful. Rising truncation or falling compliance precede reward collapse.",
            [
                per_run("truncated", "rl_truncation_ratio"),
                per_run("format ok", "rl_format_compliance_ratio"),
                per_run("success", "rl_success_ratio"),
            ],
            span=12,
        )
        .min(0)
        .max(1)
    )


# ---- system: throughput, phases, liveness ----------------------------------------------------


def samples_rate() -> timeseries.Panel:
    return graph(
        t.SAMPLES_RATE,
        PER_SECOND,
        "Rollouts (samples), env steps and finished episodes per second. A drop against the "
        "run's own level is a slowdown.",
        [
            Target(REC(rules.rate_name(SAMPLES)), "samples · " + RUN),
            Target(REC(rules.rate_name(ENV_STEPS)), "env steps · " + RUN),
            Target(REC(rules.rate_name(EPISODES)), "episodes · " + RUN),
        ],
        span=8,
    )


def steps_rate() -> timeseries.Panel:
    return graph(
        t.STEPS_RATE,
        PER_SECOND,
        "Optimizer steps per second; 0 while the process is up means training stalled.",
        [Target(REC(rules.rate_name(TRAIN_STEPS)), "train steps · " + RUN)],
        span=8,
    )


def tokens_rate() -> timeseries.Panel:
    return graph(
        "Tokens / s",
        "suffix: tok/s",
        "Prompt tokens processed and completion tokens generated per second.",
        [
            Target(REC(rules.rate_name(PROMPT_TOKENS)), "prompt · " + RUN),
            Target(REC(rules.rate_name(COMPLETION_TOKENS)), "completion · " + RUN),
        ],
        span=8,
    )


def phase_times() -> timeseries.Panel:
    return stacked(
        graph(
            t.PHASE_SHARE,
            "percentunit",
            "Share of wall time in each phase (rollout, reward, update, sync, eval …), averaged "
            "over ranks, and the untimed rest: which phase a slowdown comes from.",
            phase_wall_share(SEL, REC(LAST_LOG_NEWEST)),
        )
    ).max(1)


def liveness() -> timeseries.Panel:
    return graph(
        t.LIVENESS,
        "s",
        "Age of the last log() call of each run's most stalled rank and of its freshest one. A "
        "saw-tooth is healthy; a straight climb is a stalled loop (the process may still be up); "
        "only the oldest climbing is one hung rank.",
        [
            Target(f"time() - {REC(LAST_LOG_OLDEST)}", "oldest rank · " + RUN),
            Target(f"time() - {REC(LAST_LOG_NEWEST)}", "newest rank · " + RUN),
        ],
    )


def build(uid: str, cfg: Config) -> dict[str, Any]:
    """The RL training dashboard as Grafana JSON; alert levels from ``cfg``."""
    dashboard = new_dashboard(
        uid,
        t.TRAINING,
        "One run's training curves and, first, the step signals its alerts test against "
        "their thresholds; firing alerts as annotations.",
        ["rl", "training"],
        SEL,
        [
            newest_run_variable(Selector(("job",))),
            label_variable("rank", "Rank", "rl_run_info", Selector(("job", "run_id"))),
            rollouts_variable(cfg.links.rollouts_url),
            *step_range_variables(REC(rules.aggregate_name("run", STEP, "max"))),
        ],
    )
    rows = [
        Row(
            "Run status",
            [
                *(
                    p.span(5)
                    for p in (current_step(), train_steps_rate(), since_last_log(), alerts_now())
                ),
                outcome(),
            ],
        ),
        Row("What the alerts test", alert_signals(cfg)),
        Row("Reward", [reward_band(), reward_components(), reward_spread(), eval_scores()]),
        Row("Drift", [drift()]),
        Row(
            "Policy: entropy and divergence",
            [entropy(), kl_reference(), update_kl_and_clipping(), train_inference_mismatch()],
        ),
        Row(
            "Optimisation",
            [grad_norm(), nonfinite_values(), learning_rate(), losses()]
            + [explained_variance(), advantages()],
        ),
        Row("Task: responses", [response_length(), response_quality()]),
        Row(
            "System: throughput, phases, liveness",
            [samples_rate(), steps_rate(), tokens_rate(), phase_times(), liveness()],
        ),
        Row(
            "By training step",
            steps.panels(SEL, cfg.scrape.interval),
            collapsed=True,
        ),
    ]
    return assemble(dashboard, rows)
