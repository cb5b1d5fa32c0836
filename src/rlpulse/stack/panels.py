"""Dashboard and panel titles that runbooks and alerts point at, and the rollout API links of
panels and alerts, in one place.

The dashboard modules title their panels with these constants and the runbooks name them through
:func:`see`, so a runbook cannot send the on-call engineer to a panel that does not exist
(tests/stack/test_stack_dashboards.py checks every reference against the generated JSON).
"""

from __future__ import annotations

WORST_ROLLOUTS = 20  # how many rollouts a link asks the rollout API for
TRAINING = "rlpulse · RL training"
SYSTEM = "rlpulse · RL system"
CLASSIC_UID = "rlpulse-classic"  # the classic-RL dashboard (episodes, returns)
COMPARISON = "rlpulse · Run comparison"
CLASSIC = "rlpulse · Classic RL"
ARROW = " → "
SEPARATOR = "; "

# RL training
REWARD = "Reward"
REWARD_COMPONENTS = "Reward components"
REWARD_SPREAD = "Reward spread and zero-std groups"
EVAL_SCORES = "Eval scores by split"
ENTROPY = "Policy entropy"
KL_REFERENCE = "KL to reference"
UPDATE_KL = "Update-step KL and clip fractions"
MISMATCH = "Train / inference mismatch"
GRAD_NORM = "Gradient norm"
NONFINITE = "Non-finite values"
LEARNING_RATE = "Learning rate"
LOSSES = "Policy and value losses"
EXPLAINED_VARIANCE = "Explained variance"
ADVANTAGES = "Advantages"
DRIFT = "Drift: what moved from its reference"
RESPONSE_LENGTH = "Response length"
RESPONSE_QUALITY = "Truncation, format compliance, success"
SAMPLES_RATE = "Samples and episodes / s"
STEPS_RATE = "Optimizer steps / s"
PHASE_SHARE = "Phase time share"
LIVENESS = "Liveness: seconds since last log"

# Classic RL
LOGGED_STEP = "Logged step"
EPISODES = "Episodes finished"
EPISODE_RETURN = "Episode return"
EPISODE_LENGTH = "Episode length"
SUCCESS_RATE = "Success rate"
EPISODE_RATES = "Episodes / s and env steps / s"
CLASSIC_LOSSES = "Losses: policy, value / TD"
EXPLORATION = "Exploration: epsilon and entropy"
VALUES = "Q-values and explained variance"
UPDATE_SIZE = "Update size: approx KL and clip fraction"

# RL system
GPU_UTILIZATION = "GPU utilization"
GPU_MEMORY = "GPU memory used"
GPU_BOARDS = "GPU utilization per board"
GPU_MEMORY_BOARDS = "GPU memory per board"
GPU_POWER = "GPU power"
GPU_TEMPERATURE = "GPU temperature"
GPU_CLOCK = "GPU SM clock"
GPU_THROTTLING = "GPU throttling and ECC errors"
ROLLOUT_HEATMAP = "Rollout latency distribution"
ROLLOUT_QUANTILES = "Rollout latency quantiles"
PHASE_BREAKDOWN = "Phase-time breakdown"
PHASE_DURATIONS = "Mean phase duration"
GRADER_LATENCY = "Grader latency"
GRADER_CALLS = "Grader calls and errors"
COLLECTORS = "Collectors"
EXPORTER_ERRORS = "Exporter errors"


def alert_signal(alert: str, signal: str) -> str:
    """The title of the panel that plots what step alert ``alert`` tests."""
    return f"{alert} · {signal}"


def see(dashboard: str, *titles: str) -> str:
    """A runbook's "panel to open": ``Dashboard → Title; Dashboard → Title``."""
    return SEPARATOR.join(f"{dashboard}{ARROW}{title}" for title in titles)


def see_in(*groups: tuple[str, ...]) -> str:
    """Panels on several dashboards: each group a dashboard and its titles, as :func:`see`."""
    return SEPARATOR.join(see(*group) for group in groups)


def references(text: str) -> list[tuple[str, str]]:
    """``(dashboard, title)`` of every panel a :func:`see` text names."""
    return [
        (dashboard, title)
        for part in text.split(SEPARATOR)
        for dashboard, title in [part.split(ARROW, 1)]
    ]
