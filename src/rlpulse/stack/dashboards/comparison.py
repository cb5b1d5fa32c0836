"""The run-comparison dashboard: the key curves of several runs overlaid, with what each run was.

Each curve is one line per run (ranks folded), over wall time and, in the "By training step"
row, over the training step (so runs that did not run at the same time overlay); the tables show
``rl_run_info`` metadata (one row per run, whatever its nodes) and the ``rl_hyperparameter``
values side by side, so a difference in a curve can be traced to a setting.
"""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import table, timeseries
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from rlpulse import catalog
from rlpulse.stack import panels as t
from rlpulse.stack import rules
from rlpulse.stack.config import Config
from rlpulse.stack.dashboards import steps
from rlpulse.stack.dashboards.common import (
    NATS,
    Recorded,
    Row,
    Selector,
    Target,
    assemble,
    graph,
    grid,
    label_variable,
    log_scale,
    new_dashboard,
    unit_of,
)
from rlpulse.stack.metrics import SAMPLES

SEL = Selector(("job", "run_id"))
REC = Recorded(("job", "run_id"))
RUN = "{{run_id}}"


def curve(
    title: str, name: str, description: str, by: str = "", unit: str = "", **matchers: str
) -> timeseries.Panel:
    """One line per run (and per label ``by``) of catalog gauge ``name``, averaged over ranks,
    in ``unit`` (default: the catalog's)."""
    labels = ", ".join(["run_id", by] if by else ["run_id"])
    legend = RUN + (" · {{" + by + "}}" if by else "")
    expr = f"avg by ({labels}) ({SEL(name, **matchers)})"
    return graph(title, unit or unit_of(name), description, [Target(expr, legend)])


def reward() -> timeseries.Panel:
    return curve("Reward mean", "rl_reward_mean", "Mean batch reward per run.")


def eval_score() -> timeseries.Panel:
    return curve(
        "Eval score",
        "rl_eval_score",
        "Held-out benchmark score per run (eval split).",
        by="benchmark",
        split="eval",
    )


def entropy() -> timeseries.Panel:
    return curve("Policy entropy", "rl_entropy", "Mean token entropy per run, in nats.", unit=NATS)


def kl_reference() -> timeseries.Panel:
    return log_scale(
        curve(
            "KL to reference",
            "rl_kl_reference",
            "KL of the policy to its reference, in nats (log axis: one run's blow-up does not "
            "flatten the others).",
            unit=NATS,
        )
    )


def response_length() -> timeseries.Panel:
    return curve(
        "Response length", "rl_response_length_mean_tokens", "Mean response length per run."
    )


def success() -> timeseries.Panel:
    return curve(
        "Success ratio", "rl_success_ratio", "Share of rollouts or episodes judged successful."
    )


def episode_return() -> timeseries.Panel:
    return curve(
        "Episode return (classic RL)", "rl_episode_return", "Mean undiscounted episode return."
    )


def grad_norm() -> timeseries.Panel:
    return log_scale(
        curve("Gradient norm (log)", "rl_grad_norm", "Gradient norm before clipping.", by="network")
    )


def throughput() -> timeseries.Panel:
    return graph(
        "Samples / s",
        "suffix:/s",
        "Rollouts (samples) generated per second per run.",
        [Target(f"sum by (run_id) ({REC(rules.rate_name(SAMPLES))})", RUN)],
    )


# rl_run_info labels that differ between the ranks or nodes of one run, left out of the table
PER_PROCESS_LABELS = ("host",)


def _organize(exclude: list[str], first: list[str]) -> dm.DataTransformerConfig:
    return dm.DataTransformerConfig(
        id_val="organize",
        options={
            "excludeByName": {name: True for name in exclude},
            "indexByName": {name: i for i, name in enumerate(first)},
        },
    )


def run_metadata() -> table.Panel:
    kept = [n for n in catalog.get("rl_run_info").labels if n not in PER_PROCESS_LABELS]
    labels = ", ".join(("run_id", *kept))
    return grid(
        "Runs",
        "none",
        "rl_run_info: model, framework, benchmark, grader and code version of each run seen in "
        "the time range, finished ones included, one row per run (the host of each rank is "
        "left out).",
        [
            Target(
                f"max by ({labels}) (last_over_time({SEL('rl_run_info')}[$__range]))",
                instant=True,
                format=PromQueryFormat.TABLE,
            )
        ],
        [_organize(["Time", "Value"], ["run_id"])],
    )


def hyperparameters() -> table.Panel:
    return grid(
        "Hyperparameters",
        "none",
        "rl_hyperparameter: one row per hyperparameter, one column per run seen in the time "
        "range (the last value each run exported); a row whose values differ is what the runs "
        "vary.",
        [
            Target(
                f"max by (run_id, name) (last_over_time({SEL('rl_hyperparameter')}[$__range]))",
                instant=True,
                format=PromQueryFormat.TABLE,
            )
        ],
        [
            dm.DataTransformerConfig(
                id_val="groupingToMatrix",
                options={"columnField": "run_id", "rowField": "name", "valueField": "Value"},
            )
        ],
        height=12,
    )


def build(uid: str, cfg: Config) -> dict[str, Any]:
    """The run-comparison dashboard as Grafana JSON."""
    dashboard = new_dashboard(
        uid,
        t.COMPARISON,
        "Key curves of several runs overlaid, with their metadata and hyperparameters.",
        ["rl", "comparison"],
        SEL,
        [label_variable("run_id", "Runs", "rl_run_info", Selector(("job",)))],
    )
    rows = [
        Row("Runs", [run_metadata(), hyperparameters()]),
        Row("Outcome", [reward(), eval_score(), success(), episode_return()]),
        Row("Policy", [entropy(), kl_reference(), response_length(), grad_norm()]),
        Row(
            "By training step",
            steps.panels(SEL, cfg.scrape.interval, (*steps.PLOTS, steps.EPISODE_RETURN)),
        ),
        Row("Speed", [throughput()]),
    ]
    return assemble(dashboard, rows)
