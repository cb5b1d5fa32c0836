"""The classic-RL dashboard: a Gymnasium, SB3 or CleanRL run (Q-learning, DQN, PPO, A2C …).

It opens on one run. The open rows hold what every classic algorithm fills, one panel per
concept whatever the algorithm calls it (exploration is epsilon for Q-learning and DQN, entropy
for policy gradients; the loss is the TD loss or the policy and value losses). Counts say what
they count (episodes, env steps; the logged step is what the trainer passes to ``log()``).
Policy-gradient details sit in a collapsed row. Phase shares are shares of wall time with the
untimed rest shown. The LLM training dashboard links here and back (the rlpulse tag).
"""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import stat, timeseries

from rlpulse.stack import panels as t
from rlpulse.stack import rules
from rlpulse.stack.dashboards.common import (
    NATS,
    Row,
    Selector,
    Target,
    assemble,
    graph,
    label_variable,
    new_dashboard,
    newest_run_variable,
    phase_wall_share,
    right_axis,
    single_stat,
    stacked,
    unit_of,
)
from rlpulse.stack.dashboards.training import (
    LAST_LOG_NEWEST,
    REC,
    RUN,
    SEL,
    alerts_now,
    drift,
    learning_rate,
    liveness,
    outcome,
    per_run,
    reference_band,
    since_last_log,
    with_reference_band,
)
from rlpulse.stack.metrics import ENV_STEPS, EPISODES, STEP

EPISODES_PER_SECOND = "suffix: episodes/s"
ENV_STEPS_PER_SECOND = "suffix: env steps/s"


# ---- run status ------------------------------------------------------------------------------


def logged_step() -> stat.Panel:
    step = f"max by (run_id) ({REC(rules.aggregate_name('run', STEP, 'max'))})"
    framework = (  # a run that names no framework logs through rlpulse.log()
        f"label_replace(max by (run_id, framework) ({SEL('rl_run_info')}), "
        '"framework", "logged", "framework", "")'
    )
    return single_stat(
        t.LOGGED_STEP,
        unit_of("rl_step"),
        "The step the trainer passes to log(), named by its framework: an episode in a classic "
        "loop (rlpulse.log(…, step=episode)), an update for SB3 (n_updates), an env step for "
        "CleanRL (global_step).",
        [Target(f"{step} * on(run_id) group_left(framework) {framework}", "{{framework}} step")],
    )


def episodes_finished() -> stat.Panel:
    return single_stat(
        t.EPISODES,
        "none",
        "Episodes finished so far (rl_episodes_total, summed over ranks and envs).",
        [Target(f"sum by (run_id) ({SEL('rl_episodes_total')})", "episodes")],
    )


# ---- episodes --------------------------------------------------------------------------------


def episode_return() -> timeseries.Panel:
    panel = graph(
        t.EPISODE_RETURN,
        unit_of("rl_episode_return"),
        "Mean undiscounted return of recent episodes, and the evaluation return where an "
        "evaluation callback logs one (SB3 EvalCallback, RLlib evaluation). Dashed: the band "
        "earlier healthy runs spanned at the same step (a run started with a reference band, "
        "rlpulse band build).",
        [
            per_run("return", "rl_episode_return"),
            per_run("eval return", "rl_eval_score", benchmark="episode_return", split="eval"),
            *reference_band("episode_return"),
        ],
        span=8,
    )
    return with_reference_band(panel)


def episode_length() -> timeseries.Panel:
    return graph(
        t.EPISODE_LENGTH,
        "suffix: env steps",
        "Mean length of recent episodes, in env steps: a pole balanced longer, a maze solved "
        "faster, or an agent that learned to end episodes early.",
        [per_run("length", "rl_episode_length_steps")],
        span=8,
    )


def success_rate() -> timeseries.Panel:
    return (
        graph(
            t.SUCCESS_RATE,
            unit_of("rl_success_ratio"),
            "Share of recent episodes that reached the goal: logged (success_rate, SB3's "
            "rollout/success_rate, Gymnasium's info['is_success']) or derived from a binary "
            "episode reward (1 = goal, as in FrozenLake); the evaluation success where logged.",
            [
                per_run("success", "rl_success_ratio"),
                per_run("eval success", "rl_eval_score", benchmark="success", split="eval"),
            ],
            span=8,
        )
        .min(0)
        .max(1)
    )


def episode_rates() -> timeseries.Panel:
    panel = graph(
        t.EPISODE_RATES,
        EPISODES_PER_SECOND,
        "Episodes finished per second (left) and env steps per second (right): counted by "
        "rlpulse (the Gymnasium wrapper, the SB3 callback, logged counters) and as the "
        "framework reports them (SB3 time/fps, CleanRL charts/SPS).",
        [
            Target(REC(rules.rate_name(EPISODES)), "episodes · " + RUN),
            Target(REC(rules.rate_name(ENV_STEPS)), "env steps · " + RUN),
            per_run("env steps (reported)", "rl_throughput_per_second", unit="env_steps"),
        ],
        span=12,
    )
    return right_axis(right_axis(panel, 1, ENV_STEPS_PER_SECOND), 2, ENV_STEPS_PER_SECOND)


# ---- learning --------------------------------------------------------------------------------


def losses() -> timeseries.Panel:
    panel = graph(
        t.CLASSIC_LOSSES,
        unit_of("rl_policy_loss"),
        "Policy (actor) loss and total loss (left), and the value or TD loss (right, its scale "
        "differs): Q-learning and DQN log only the TD loss, PPO and A2C all three.",
        [
            per_run("policy", "rl_policy_loss"),
            per_run("total", "rl_loss"),
            per_run("value / TD", "rl_value_loss"),
        ],
        span=8,
    )
    return right_axis(panel, 2, unit_of("rl_value_loss"))


def exploration() -> timeseries.Panel:
    panel = graph(
        t.EXPLORATION,
        "percentunit",
        "Epsilon of epsilon-greedy exploration (left; Q-learning, DQN) and the policy entropy "
        "in nats (right; PPO, A2C, SAC): both should fall as the agent commits, neither to 0 "
        "too early.",
        [
            per_run("epsilon", "rl_hyperparameter", name="exploration_rate"),
            per_run("entropy", "rl_entropy"),
        ],
        span=8,
    )
    return right_axis(panel, 1, NATS)


def values() -> timeseries.Panel:
    panel = graph(
        t.VALUES,
        unit_of("rl_value_mean"),
        "Mean predicted Q-value or state value (left; DQN q_values, SAC qf values) and the "
        "critic's explained variance (right; 1 is perfect, below 0 worse than the mean). "
        "Q-values climbing without the return is overestimation.",
        [
            per_run("Q / value", "rl_value_mean"),
            per_run("explained variance", "rl_explained_variance"),
        ],
        span=8,
    )
    return right_axis(panel, 1, unit_of("rl_explained_variance"))


def update_size() -> timeseries.Panel:
    panel = graph(
        t.UPDATE_SIZE,
        NATS,
        "Approximate KL between the policy before and after each update in nats (left) and "
        "the share of clipped ratios (right): both high means the steps are too large.",
        [
            per_run("approx KL", "rl_approx_kl"),
            per_run("clip {{bound}}", "rl_clip_fraction_ratio", "bound"),
        ],
        span=12,
    )
    return right_axis(panel, 1, unit_of("rl_clip_fraction_ratio"))


# ---- time ------------------------------------------------------------------------------------


def phase_times() -> timeseries.Panel:
    return stacked(
        graph(
            t.PHASE_SHARE,
            "percentunit",
            "Share of wall time in each timed phase (SB3's rollout and update, the Gymnasium "
            "wrapper's env_step), averaged over ranks, and the untimed rest (your own loop, "
            "sleeps, I/O).",
            phase_wall_share(SEL, REC(LAST_LOG_NEWEST)),
        )
    ).max(1)


def build(uid: str) -> dict[str, Any]:
    """The classic-RL dashboard as Grafana JSON."""
    dashboard = new_dashboard(
        uid,
        t.CLASSIC,
        "One classic-RL run (Gymnasium, SB3, CleanRL, a tabular loop): episodes, "
        "exploration, losses and where the time goes; firing alerts as annotations.",
        ["rl", "classic"],
        SEL,
        [
            newest_run_variable(Selector(("job",))),
            label_variable("rank", "Rank", "rl_run_info", Selector(("job", "run_id"))),
        ],
    )
    rows = [
        Row(
            "Run status",
            [
                *(
                    p.span(5)
                    for p in (logged_step(), episodes_finished(), since_last_log(), alerts_now())
                ),
                outcome(),
            ],
        ),
        Row("Episodes", [episode_return(), episode_length(), success_rate(), episode_rates()]),
        Row("Learning", [losses(), exploration(), values()]),
        Row("Time", [phase_times(), liveness()]),
        Row("Drift", [drift()]),
        Row("Policy-gradient updates", [update_size(), learning_rate()], collapsed=True),
    ]
    return assemble(dashboard, rows)
