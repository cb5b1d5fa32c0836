"""Step-indexed panels: each training-curve plot of the RL training dashboard against the
training step instead of wall time (Grafana trend panels, x = ``rl_step``).

The training dashboard shows them for its run, the comparison dashboard for the runs chosen
there, so runs overlay at the same step whenever they ran. Prometheus holds one sample per
scrape, so a line has one point per scrape at which the step had advanced: one per logged step
for a run that logs slower than it is scraped, the step reached at each scrape for a faster
one (the steps logged between two scrapes never reach Prometheus; ``rlpulse replay`` reads
every logged step from the run's log).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from grafana_foundation_sdk.builders import trend

from rlpulse.stack.dashboards.common import (
    NATS,
    SCIENTIFIC,
    SERIES_LABEL,
    TOKENS,
    Selector,
    by_step,
    log_scale,
    symlog_scale,
    unit_of,
)


@dataclass(frozen=True)
class Line:
    """One line per run of a by-step panel: ``agg by (run_id[, by])`` of catalog gauge
    ``metric``, named ``name`` (followed by the values of the ``by`` labels)."""

    name: str
    metric: str
    agg: str = "avg"
    by: tuple[str, ...] = ()
    matchers: dict[str, str] = field(default_factory=dict)

    def expr(self, sel: Selector) -> str:
        """The line's PromQL, ``by (run_id, series)``."""
        labels = ", ".join(("run_id", *self.by))
        value = f"{self.agg} by ({labels}) ({sel(self.metric, **self.matchers)})"
        if not self.by:
            return f'label_replace({value}, "{SERIES_LABEL}", "{self.name}", "", "")'
        quoted = ", ".join(f'"{label}"' for label in self.by)
        joined = f'label_join({value}, "{SERIES_LABEL}", " ", {quoted})'
        if not self.name:
            return joined
        named = f'"{SERIES_LABEL}", "{self.name} $1", "{SERIES_LABEL}", "(.*)"'
        return f"label_replace({joined}, {named})"


@dataclass(frozen=True)
class StepPlot:
    """A by-step twin of a training-dashboard plot: its lines on one axis."""

    title: str
    unit: str
    description: str
    lines: Sequence[Line]
    scale: Callable[[trend.Panel], trend.Panel] | None = None


def _log(panel: trend.Panel) -> trend.Panel:
    return log_scale(panel)


def _symlog(threshold: float) -> Callable[[trend.Panel], trend.Panel]:
    return lambda panel: symlog_scale(panel, threshold)


REWARD_UNIT = unit_of("rl_reward_mean")
PLOTS: tuple[StepPlot, ...] = (
    StepPlot(
        "Reward by step",
        REWARD_UNIT,
        "Batch reward mean, min and max against the step.",
        [
            Line("mean", "rl_reward_mean"),
            Line("min", "rl_reward_min", "min"),
            Line("max", "rl_reward_max", "max"),
        ],
    ),
    StepPlot(
        "Reward components by step",
        unit_of("rl_reward_component_mean"),
        "Mean of each reward component against the step.",
        [Line("", "rl_reward_component_mean", by=("component",))],
    ),
    StepPlot(
        "Reward spread and zero-std groups by step",
        REWARD_UNIT,
        "Within-batch reward std and the share (0-1) of prompt groups whose rewards all agree, "
        "against the step (one axis).",
        [Line("reward std", "rl_reward_std"), Line("zero-std groups", "rl_zero_std_groups_ratio")],
    ),
    StepPlot(
        "Eval scores by step",
        unit_of("rl_eval_score"),
        "Benchmark scores per benchmark and split against the step: the same step of two runs "
        "compares their held-out scores.",
        [Line("", "rl_eval_score", by=("benchmark", "split"))],
    ),
    StepPlot(
        "Policy entropy by step",
        NATS,
        "Mean token entropy in nats against the step.",
        [Line("entropy", "rl_entropy")],
    ),
    StepPlot(
        "KL to reference by step",
        NATS,
        "KL of the policy to the reference in nats and the KL coefficient beta, against the step "
        "(symlog axis: KL spans decades, beta may be 0).",
        [Line("KL", "rl_kl_reference"), Line("beta", "rl_kl_coefficient")],
        _symlog(0.001),
    ),
    StepPlot(
        "Update-step KL and clip fractions by step",
        "none",
        "Approximate KL of each update (nats) and the clipped shares (0-1) against the step.",
        [
            Line("approx KL", "rl_approx_kl"),
            Line("clip", "rl_clip_fraction_ratio", by=("bound",)),
            Line("value clip", "rl_value_clip_fraction_ratio"),
        ],
    ),
    StepPlot(
        "Train / inference mismatch by step",
        "none",
        "Importance ratio (mean, min, max; ideal 1) and the mean absolute log-prob gap in nats, "
        "against the step.",
        [
            Line("ratio mean", "rl_importance_ratio_mean"),
            Line("ratio min", "rl_importance_ratio_min", "min"),
            Line("ratio max", "rl_importance_ratio_max", "max"),
            Line("log-prob gap", "rl_logprob_mismatch"),
        ],
    ),
    StepPlot(
        "Gradient norm by step",
        unit_of("rl_grad_norm"),
        "Gradient norm before clipping per network against the step (log axis).",
        [Line("", "rl_grad_norm", by=("network",))],
        _log,
    ),
    StepPlot(
        "Non-finite values by step",
        "short",
        "NaN or ±Inf values logged so far, per metric, against the step: the step they began.",
        [Line("", "rl_nonfinite_values_total", "sum", by=("metric",))],
    ),
    StepPlot(
        "Learning rate by step",
        SCIENTIFIC,
        "Learning rate per network against the step (schedule and warm-up).",
        [Line("", "rl_learning_rate", by=("network",))],
    ),
    StepPlot(
        "Policy and value losses by step",
        unit_of("rl_policy_loss"),
        "Total, policy-gradient and value loss against the step (symlog axis: their scales "
        "differ and losses change sign).",
        [
            Line("loss", "rl_loss"),
            Line("policy", "rl_policy_loss"),
            Line("value", "rl_value_loss"),
        ],
        _symlog(0.01),
    ),
    StepPlot(
        "Explained variance by step",
        unit_of("rl_explained_variance"),
        "How well the value function predicts returns (1 perfect, below 0 worse than the mean), "
        "against the step.",
        [Line("explained variance", "rl_explained_variance")],
    ),
    StepPlot(
        "Advantages by step",
        unit_of("rl_advantage_mean"),
        "Advantage mean, std, min and max per batch against the step.",
        [
            Line("mean", "rl_advantage_mean"),
            Line("std", "rl_advantage_std"),
            Line("min", "rl_advantage_min", "min"),
            Line("max", "rl_advantage_max", "max"),
        ],
    ),
    StepPlot(
        "Response length by step",
        TOKENS,
        "Batch mean and max response length against the step (the histogram quantiles are "
        "wall-clock windows; see the response length panel).",
        [
            Line("mean", "rl_response_length_mean_tokens"),
            Line("max", "rl_response_length_max_tokens", "max"),
        ],
    ),
    StepPlot(
        "Truncation, format compliance, success by step",
        unit_of("rl_truncation_ratio"),
        "Share of responses cut at the length limit, in the required format, and judged "
        "successful, against the step.",
        [
            Line("truncated", "rl_truncation_ratio"),
            Line("format ok", "rl_format_compliance_ratio"),
            Line("success", "rl_success_ratio"),
        ],
    ),
)


# classic-RL runs compared with each other (the comparison dashboard)
EPISODE_RETURN = StepPlot(
    "Episode return by step",
    unit_of("rl_episode_return"),
    "Mean undiscounted episode return against the step.",
    [Line("return", "rl_episode_return")],
)


def panels(sel: Selector, interval: str, plots: Sequence[StepPlot] = PLOTS) -> list[trend.Panel]:
    """The by-step ``plots`` for the runs ``sel`` selects, one point per ``interval`` at most
    (the scrape interval)."""
    out = []
    for plot in plots:
        panel = by_step(
            plot.title,
            plot.unit,
            plot.description,
            sel("rl_step"),
            [line.expr(sel) for line in plot.lines],
            interval=interval,
        )
        out.append(plot.scale(panel) if plot.scale else panel)
    return out
