"""RL-dynamics alerts: step-indexed signals (policy entropy, KL, gradients, critic, reward) and
the levels of the update itself (update KL, clipping, NaN/Inf, the critic, train/inference
mismatch), with the healthy run no RL alert fires on."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from rlpulse import catalog
from rlpulse.detect import drift
from rlpulse.detect.signals import REWARDS
from rlpulse.stack import panels
from rlpulse.stack.alerts import kit, step
from rlpulse.stack.alerts.inputs import HEALTHY_SAMPLES, TARGET, const, noisy, ramp, series
from rlpulse.stack.alerts.kit import G3, HUMANIZE, ID, PERCENT, pct
from rlpulse.stack.alerts.step import StepAlert
from rlpulse.stack.metrics import (
    APPROX_KL,
    CLIP,
    DRIFT,
    DRIFT_ONSET,
    ENTROPY,
    EXPLAINED_VAR,
    GRAD_NORM,
    IMPORTANCE,
    KL_REF,
    LOSS,
    NONFINITE,
    REWARD,
    VALUE_LOSS_METRIC,
    ZERO_STD_RATIO,
)
from rlpulse.stack.panels import TRAINING, see
from rlpulse.stack.promql import regex_alternatives, sel, template_matchers, template_query
from rlpulse.stack.query import Query

ENTROPY_COLLAPSE = StepAlert(
    name="RLEntropyCollapse",
    signal="entropy_ratio_to_peak",
    summary="Policy entropy collapsed against the run's own peak.",
    subject="Policy entropy",
    relation="of its peak so far",
    healthy=0.8,
    warning=0.35,
    critical=0.2,
    runbook=kit.Runbook(
        "The policy's smoothed entropy fell far below its own peak: the policy is becoming "
        "near-deterministic, stops exploring, and groups stop disagreeing. It usually comes "
        "before reward stalls or collapses, so it is the earliest warning of a collapse.",
        panels.see(
            panels.TRAINING,
            panels.ENTROPY,
            panels.REWARD_SPREAD,
            panels.KL_REFERENCE,
        ),
        (
            "Lower the learning rate or the number of update epochs per batch.",
            "Add or raise an entropy bonus; raise the sampling temperature of rollouts.",
            "Tighten clipping (clip-higher keeps low-probability tokens alive); check that the "
            "KL penalty is on.",
            "Resume from the last checkpoint before the drop (the step in the description).",
        ),
    ),
)
ENTROPY_BLOWUP = StepAlert(
    name="RLEntropyBlowup",
    signal="entropy_ratio_to_start",
    summary="Policy entropy rose far above the run's own starting level.",
    subject="Policy entropy",
    relation="its level at the start",
    healthy=1.2,
    warning=2.0,
    critical=3.0,
    runbook=kit.Runbook(
        "The policy's smoothed entropy is several times its level at the start of the run: "
        "the policy is "
        "drifting toward uniform sampling (garbled text, random actions), usually after too "
        "large updates or a too-strong entropy bonus.",
        panels.see(
            panels.TRAINING,
            panels.ENTROPY,
            panels.GRAD_NORM,
            panels.KL_REFERENCE,
        ),
        (
            "Lower the learning rate or the entropy coefficient (a negative coefficient "
            "maximises entropy).",
            "Check the sampling temperature and the logits processing of the rollout engine.",
            "Read recent rollouts for garbled output; resume from the step before the rise.",
        ),
    ),
)
KL_HIGH = StepAlert(
    name="RLKLReferenceHigh",
    signal="kl_reference_level",
    summary="KL divergence to the reference policy is high.",
    subject="KL to the reference",
    relation="(half of the last 10 logged steps); recent median",
    healthy=0.05,
    warning=1.0,
    critical=3.0,
    runbook=kit.Runbook(
        "The policy's KL to the frozen reference stayed high over several logged steps (a "
        "step-smoothed median, so one spike does not fire it): the policy drifted far from the "
        "reference. Critical means a blow-up.",
        panels.see(
            panels.TRAINING,
            panels.KL_REFERENCE,
        ),
        (
            "Raise the KL coefficient (beta) or enable an adaptive KL controller.",
            "Lower the learning rate; check for reward hacking (RLRewardHacking).",
            "Check the reference model is the intended checkpoint and its log-probs are "
            "computed with the same tokenizer and template.",
        ),
    ),
)
KL_SPIKE = StepAlert(
    name="RLKLReferenceSpike",
    signal="kl_reference_zscore",
    summary="KL to the reference jumped far above its recent history.",
    subject="KL to the reference",
    relation="from its recent median",
    healthy=0.5,
    warning=8.0,
    runbook=kit.Runbook(
        "The latest KL to the reference is many robust standard deviations (median absolute "
        "deviations) above its recent history: a sudden jump, which often precedes a blow-up, "
        "or a single bad batch.",
        panels.see(
            panels.TRAINING,
            panels.KL_REFERENCE,
            panels.GRAD_NORM,
        ),
        (
            "Look at the steps around the jump: a bad batch, a learning-rate schedule jump, a "
            "resumed checkpoint.",
            "If it keeps rising, treat it like RLKLReferenceHigh.",
        ),
    ),
)
GRAD_SPIKE = StepAlert(
    name="RLGradNormSpike",
    signal="grad_norm_spike_ratio",
    summary="Gradient norm spiked against the run's own recent norms.",
    subject="Gradient norm",
    relation="its recent 90th percentile",
    healthy=1.1,
    warning=10.0,
    runbook=kit.Runbook(
        "The latest gradient norm is many times its recent 90th percentile (relative, so runs "
        "whose stable norm is 1e5 do not fire). Isolated spikes are common; repeated ones precede "
        "divergence.",
        panels.see(
            panels.TRAINING,
            panels.GRAD_NORM,
            panels.NONFINITE,
            panels.LEARNING_RATE,
        ),
        (
            "Check gradient clipping is active and its threshold sensible.",
            "Inspect the batch at that step (very long responses, extreme advantages).",
            "If spikes repeat, lower the learning rate or warm it up longer.",
        ),
    ),
)
VALUE_LOSS = StepAlert(
    name="RLValueLossExplosion",
    signal="value_loss_ratio",
    summary="Value loss exploded against its recent level.",
    subject="Value loss",
    relation="its recent median magnitude",
    healthy=1.0,
    warning=10.0,
    runbook=kit.Runbook(
        "The critic's smoothed value loss is many times its recent median magnitude: the value "
        "function is diverging, which corrupts advantages (GAE) and then the policy.",
        panels.see(
            panels.TRAINING,
            panels.LOSSES,
            panels.EXPLAINED_VARIANCE,
        ),
        (
            "Lower the critic learning rate; enable value clipping or value-loss scaling.",
            "Check reward scale changes (a new reward component, a grader change).",
        ),
    ),
)
REWARD_COLLAPSE = StepAlert(
    name="RLRewardCollapse",
    signal="reward_gain_lost_ratio",
    summary="The run lost most of the reward it had gained.",
    subject="Reward",
    relation="of its gain lost again (start to peak; a 0/1 reward: to its typical level); "
    "that level",
    healthy=0.05,
    warning=0.5,
    critical=0.75,
    runbook=kit.Runbook(
        "The smoothed training reward (or episode return) fell back from its peak and lost "
        "most of what the run had learned: the policy broke (divergence, collapse to a "
        "do-nothing policy, a bad checkpoint) or the grader changed. It keeps firing while "
        "the reward stays down. A discrete reward (a 0/1 episode success) is judged by the "
        "readings since it fell below its typical level (the mean of its last 200 readings, "
        "the baseline then) once they are far likelier a collapse than luck; series "
        "episodes is single episodes recorded with observe_episodes. A classic RL episode "
        "return warns as soon as it lost half its gain and pages once the fall held 40 logged "
        "readings without relearning (a healthy A2C or DQN policy can collapse and relearn "
        "within that); a 0/1 success pages once its drop lasted 200 readings.",
        panels.see(
            panels.TRAINING,
            panels.REWARD,
            panels.REWARD_COMPONENTS,
        ),
        (
            "Check the grader first (RLGraderErrors, a new grader_version in the run metadata).",
            "Check entropy, KL and grad norm at the same time for a training instability.",
            "Resume from the checkpoint at the reward peak and lower the learning rate.",
        ),
    ),
)
REWARD_LOST = StepAlert(
    name="RLRewardSignalLost",
    signal="reward_frozen_ratio",
    summary="The reward stopped moving below its peak: the reward signal is likely dead.",
    subject="The stretch of unchanged reward readings",
    relation="the longest stretch at one value in its last 500 readings",
    healthy=0.0,
    warning=2.0,
    critical=3.0,
    runbook=kit.Runbook(
        "The reward (episode return, or the logged reward mean) varied earlier in the run and "
        "now reads one value, below its peak, over many more readings in a row than any "
        "stretch of its last 500 readings, and far longer than that value's own frequency "
        "explains (a 0/1 reward that is mostly 0 is flat for long healthy stretches; the "
        "stretch counts once its chance is below 1e-6): a grader returning a constant, a "
        "reward wrapper zeroing it, a reward service answering a default, or a policy stuck "
        "on one failing action (a reset Q-table). The policy gets no learning signal and "
        "drifts. A reward pinned at its peak (a solved task, CartPole's 500) does not fire.",
        panels.see(
            panels.TRAINING,
            panels.REWARD,
            panels.REWARD_COMPONENTS,
        ),
        (
            "Read a few recent rollouts and their rewards: is the grader or reward function "
            "returning one value for every sample?",
            "Check the grader (RLGraderErrors, grader_version in the run metadata) and any "
            "reward wrapper or normalisation changed at the step the reward froze.",
            "Once fixed, resume from the checkpoint before the reward froze.",
        ),
    ),
)
ZERO_STD = StepAlert(
    name="RLZeroStdGroupsHigh",
    signal="zero_std_unsolved_ratio",
    summary="Most prompt groups carry no learning signal and the task is not solved.",
    subject="Zero-std prompt groups",
    relation="of the last 10 batches; reward peak",
    healthy=0.1,
    warning=0.8,
    runbook=kit.Runbook(
        "Most prompt groups have one reward for all samples (or the batch reward std is 0), "
        "so group-relative advantages are zero and there is no learning signal, while the "
        "reward is below its best (a run saturated at its best reward does not fire).",
        panels.see(
            panels.TRAINING,
            panels.REWARD_SPREAD,
        ),
        (
            "Filter or re-sample prompts that are always solved or always failed (dynamic "
            "sampling), adjust the curriculum.",
            "Raise sampling temperature or group size; check entropy for a collapse.",
        ),
    ),
)
ADVANTAGE_COLLAPSE = StepAlert(
    name="RLAdvantageStdCollapse",
    signal="advantage_std_ratio_to_peak",
    summary="Advantage spread collapsed against the run's own peak.",
    subject="Advantage std",
    relation="of its peak so far",
    healthy=0.8,
    warning=0.1,
    runbook=kit.Runbook(
        "The spread of the advantages fell to a small fraction of its peak: the policy "
        "gradient is near zero, learning has stopped (all samples alike, a saturated critic).",
        panels.see(
            panels.TRAINING,
            panels.ADVANTAGES,
        ),
        ("Check zero-std groups and entropy; check advantage normalisation and the critic.",),
    ),
)
REFERENCE_BAND = StepAlert(
    name="RLOutsideReferenceBand",
    signal="reference_band_gap",
    summary="The run left the band of earlier healthy runs at the same step.",
    subject="The run",
    relation="of the references' range outside their band at this step; band edge",
    healthy=0.0,
    warning=0.1,
    runbook=kit.Runbook(
        "Only for a run started with a reference band (reference_band= or "
        "RLPULSE_REFERENCE_BAND: earlier healthy runs of the same configuration, rlpulse band "
        "build). Its smoothed reward (or episode return, or held-out score) is below, its KL "
        "above, or its entropy outside the band those runs spanned at the same logged step "
        "(within a quarter of the steps either way, for seeds that learn faster or slower), "
        "by a tenth of their whole range or more: a run that learns slower than every healthy "
        "seed, never learns, or drifts from them, before it has any gain of its own to lose. "
        "The series label names which series left the band. A warning, not a page: a changed "
        "configuration, data or environment version also moves a run out of the band.",
        panels.see(
            panels.TRAINING,
            panels.REWARD,
        ),
        (
            "Compare the run's metadata (config, git sha, data, environment or grader "
            "version) with the reference runs' (rl_run_info): what changed?",
            "Check KL, entropy and grad norm for an instability; a reward behind the band with "
            "all of them normal is often a lower learning rate or a harder task mix.",
            "If the change is intended, build a new band from healthy runs of the new "
            "configuration (rlpulse band build).",
        ),
    ),
)

STEP_ALERTS: tuple[StepAlert, ...] = (
    ENTROPY_COLLAPSE,
    ENTROPY_BLOWUP,
    KL_HIGH,
    KL_SPIKE,
    GRAD_SPIKE,
    VALUE_LOSS,
    REWARD_COLLAPSE,
    REWARD_LOST,
    ZERO_STD,
    ADVANTAGE_COLLAPSE,
    REFERENCE_BAND,
)


# ---- update-step KL ----------------------------------------------------------------------------

UPDATE_KL = "RLUpdateKLHigh"


# ---- clip fraction -----------------------------------------------------------------------------

CLIP_HIGH = "RLClipFractionHigh"
_CLIP_ANY = {**TARGET, "bound": "any"}


# ---- NaN / Inf ---------------------------------------------------------------------------------

NONFINITE_LOSS = "RLNonFiniteLoss"
_POLICY = {**TARGET, "network": "policy"}
_LOSS = {**TARGET, "metric": "rl_loss"}
_REWARD = {**TARGET, "metric": "rl_reward_mean"}


def _nonfinite(q: Query, k: Any) -> str:
    # a mean return's gauge reads NaN until its first episode ends: a reward's count alone says
    # it broke (the exporter counts a return's NaN after its first finite value only)
    gauges = [
        f"label_replace({q.s(m)} != {q.s(m)} or {q.s(m)} == +Inf or {q.s(m)} == -Inf, "
        f'"metric", "{m.name}", "", "")'
        for m in (catalog.get(n) for n in k.metrics)
        if m.type == "gauge" and m.name not in REWARDS
    ]
    which = f'metric=~"{regex_alternatives(k.metrics)}"'
    return " or ".join([f"increase({q.s(NONFINITE, which)}[{q.w.recent}]) > 0", *gauges])


def _nonfinite_problems(k: Any) -> Iterator[str]:
    if k.enabled and not k.metrics:
        yield (
            "metrics: empty (the critical NaN/Inf alert could never fire; set enabled: false "
            "to turn it off)"
        )


# ---- explained variance ------------------------------------------------------------------------

EXPLAINED_VARIANCE = "RLExplainedVarianceNegative"


# ---- train/inference mismatch ------------------------------------------------------------------

IMPORTANCE_DRIFT = "RLImportanceRatioDrift"


# ---- input drift -------------------------------------------------------------------------------

INPUT_DRIFT = "RLInputDrift"
_DRIFTED = {**TARGET, "kind": "input", "feature": "source"}
_DEAD = {**TARGET, "kind": "observation", "feature": "obs[2]"}
_DRIFT_SINCE = (
    template_query(
        f"{DRIFT_ONSET.name}{{{template_matchers('job', 'instance', 'kind', 'feature')}}}",
        "$labels.job",
        "$labels.instance",
        "$labels.kind",
        "$labels.feature",
    )
    + ' since step {{ . | first | value | printf "%.0f" }}{{ end }}'
)


def _drift(q: Query, k: Any) -> str:
    inputs = sel(DRIFT, 'kind="input"', extra=q.cfg.selectors.metrics)
    observations = sel(DRIFT, 'kind="observation"', extra=q.cfg.selectors.metrics)
    return f"{inputs} > {k.threshold:g} or {observations} >= {drift.EVENT:g}"


def _drift_text(labels: dict[str, str], value: str) -> dict[str, str]:
    """The description of a drifted input of the scenario (shipped threshold)."""
    return {
        "description": f"{labels['kind'].title()} {labels['feature']} of run "
        f"{labels['run_id']} (rank {labels['rank']}) drifted from its reference: score "
        f"{value} (fires above {drift.SHIFT:g}; {drift.EVENT:g}: it varied and now reads "
        "one value, a new version, or new dynamics) since step 120."
    }


def healthy() -> kit.Scenario:
    """A healthy run no RL alert fires on."""
    n = HEALTHY_SAMPLES
    return kit.Scenario(
        "Healthy GRPO/PPO run, 8 hours: entropy decays 1.0 -> 0.55, KL grows 0 -> 0.3, reward "
        "rises 0.2 -> 0.8, value loss falls, explained variance rises; all with noise.",
        (
            (series(ENTROPY), noisy(1.0, 0.55, 0.02, n, 1)),
            (series(KL_REF), noisy(0.01, 0.3, 0.01, n, 2)),
            (series(APPROX_KL), noisy(0.01, 0.01, 0.003, n, 3)),
            (series(CLIP, _CLIP_ANY), noisy(0.1, 0.08, 0.02, n, 4)),
            (series(LOSS), noisy(0.5, 0.3, 0.1, n, 5)),
            (series(GRAD_NORM, _POLICY), noisy(1.0, 0.8, 0.3, n, 6)),
            (series(VALUE_LOSS_METRIC), noisy(2.0, 0.5, 0.1, n, 7)),
            (series(EXPLAINED_VAR), noisy(0.2, 0.9, 0.05, n, 8)),
            (series(REWARD), noisy(0.2, 0.8, 0.05, n, 9)),
            (series(ZERO_STD_RATIO), noisy(0.2, 0.2, 0.05, n, 10)),
            (series(IMPORTANCE), noisy(1.0, 1.0, 0.02, n, 11)),
            (series(NONFINITE, {**TARGET, "metric": "rl_loss"}), const(0, n)),
            (
                series(DRIFT, {**TARGET, "kind": "input", "feature": "prompt_length"}),
                noisy(0.02, 0.05, 0.02, n, 12),
            ),
            (series(DRIFT, _DEAD), noisy(0.5, 4.0, 1.0, n, 13)),
            *step.healthy_inputs(STEP_ALERTS, TARGET, n),
        ),
    )


DEFS: tuple[kit.AlertDef, ...] = (
    *STEP_ALERTS,
    kit.ThresholdAlert(
        name=INPUT_DRIFT,
        doc="What the run is fed moved from its reference.",
        settings={
            "threshold": kit.Knob(
                drift.SHIFT,
                "Warn above this drift score of an input (a population stability index: 0.1 is a "
                "small shift, 0.25 a large one).",
            )
        },
        severity="warning",
        expr=_drift,
        summary="What the run is fed moved away from its reference.",
        description=lambda q, k: (
            f"{{{{ $labels.kind | title }}}} {{{{ $labels.feature }}}} of {ID} drifted from its "
            f"reference: score {G3} (fires above {k.threshold:g}; {drift.EVENT:g}: it varied and "
            f"now reads one value, a new version, or new dynamics){_DRIFT_SINCE}."
        ),
        runbook=kit.Runbook(
            "A feature of what the run is fed (rlpulse.detect.drift: prompt lengths, their "
            "source or dataset tag, difficulty, an environment or grader version; for a "
            "classic RL run, an observation channel that varied and now reads one value, or "
            "the environment's step no longer following its model: feature dynamics) moved "
            "away from its reference, the run's first 1,000 samples of it or a pinned "
            "reference: its population stability index is past the level, or it is at 100 "
            "(a dead channel, a new version, new dynamics). The feature label says which. A "
            "warning, not a page: drift is context, and any paging cause of the same run "
            "holds it back; a later failure's page names the drift and its step.",
            panels.see(panels.TRAINING, panels.DRIFT),
            (
                "Compare the data loader, sampler weights or dataset version with the "
                "run's start: did the mix change (a new shard, a curriculum step)?",
                "A dead observation channel: check the sensor, the environment wrapper or "
                "the normalisation that feeds it (a zero variance, a NaN replaced by 0).",
                "New dynamics (feature dynamics): the same state and action now lead "
                "elsewhere; compare the simulator's parameters, the robot or the physics "
                "engine's version with the run's start.",
                "A new version on purpose: expect the reward and KL to move; pin a new "
                "reference (rlpulse.detect.drift.save) from a healthy run of it.",
            ),
        ),
        tests=(
            kit.Scenario(
                "An input's mix shifts (score 0.05 -> 0.6 from 10m, drifted since step 120): a "
                "warning after for; an observation's score of 3 (it moved as the policy learned) "
                "raises nothing, its dead channel (100) does.",
                (
                    (series(DRIFT, _DRIFTED), f"{const(0.05, 10)} {const(0.6, 30)}"),
                    (series(DRIFT_ONSET, _DRIFTED), f"_x10 {const(120, 30)}"),
                    (series(DRIFT, _DEAD), f"{const(3, 20)} {const(drift.EVENT, 20)}"),
                    (series(DRIFT_ONSET, _DEAD), f"_x20 {const(120, 20)}"),
                ),
                (
                    kit.Check(INPUT_DRIFT, "15m"),
                    kit.Check(
                        INPUT_DRIFT,
                        "25m",
                        (kit.Expect("warning", _DRIFTED, 0.6, _drift_text(_DRIFTED, "0.6")),),
                    ),
                    kit.Check(
                        INPUT_DRIFT,
                        "35m",
                        (
                            kit.Expect("warning", _DRIFTED, 0.6, _drift_text(_DRIFTED, "0.6")),
                            kit.Expect(
                                "warning",
                                _DEAD,
                                drift.EVENT,
                                _drift_text(_DEAD, f"{drift.EVENT:g}"),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    ),
    kit.recent_mean(
        name=UPDATE_KL,
        doc="Update-step (approximate) KL too high: updates move the policy too far.",
        metric=APPROX_KL,
        threshold=(0.05, "approximate KL"),
        summary="Update-step KL is too high: each update moves the policy too far.",
        description=lambda q, k: (
            f"Mean approximate KL per update of {ID} is {G3} nats (threshold {k.threshold:g})."
        ),
        runbook=kit.Runbook(
            "The approximate KL between the policy before and after each update is high: "
            "each optimisation step moves the policy too far (PPO's trust region is not "
            "respected).",
            see(TRAINING, panels.UPDATE_KL),
            (
                "Lower the learning rate or the number of PPO epochs / mini-batches per rollout.",
                "Use early stopping on a target KL per update.",
            ),
        ),
        shift=(
            "Update-step KL: 0.01, then 0.2 from 20m; above 0.05 from 22m, fires from 32m.",
            (0.01, 0.2),
        ),
    ),
    kit.recent_mean(
        name=CLIP_HIGH,
        doc="Too many ratios clipped.",
        metric=CLIP,
        threshold=(0.3, "clip fraction"),
        summary="A large fraction of probability ratios is clipped.",
        description=lambda q, k: (
            f"Clip fraction (bound {{{{ $labels.bound }}}}) of {ID} is {PERCENT} "
            f"(threshold {pct(k.threshold)})."
        ),
        runbook=kit.Runbook(
            "A large fraction of probability ratios hit the clip bound: most of the batch "
            "gives no gradient, a sign that updates are too large or the data is stale "
            "(off-policy).",
            see(TRAINING, panels.UPDATE_KL, panels.MISMATCH),
            (
                "Lower the learning rate or the update epochs; check rollout/trainer weight "
                "sync (stale rollouts raise the clip fraction).",
                "Compare with Train/inference mismatch: a precision or sampling mismatch "
                "also shows here.",
            ),
        ),
        shift=("Clip fraction: 0.1, then 0.5 from 20m; fires from about 32m.", (0.1, 0.5)),
        labels=_CLIP_ANY,
    ),
    kit.ThresholdAlert(
        name=NONFINITE_LOSS,
        key="nonfinite_loss",
        doc="NaN or Inf in a loss, gradient norm or reward.",
        settings={
            "for_": "0s",
            "metrics": kit.Knob(
                (
                    "rl_loss",
                    "rl_policy_loss",
                    "rl_value_loss",
                    "rl_grad_norm",
                    "rl_reward_mean",
                    "rl_episode_return",
                ),
                "Catalog metrics watched for non-finite values.",
                frozenset(catalog.BY_NAME),
            ),
            "keep_firing_for": kit.Knob(
                "10m",
                "Keep firing this long after the last non-finite value: a diverged run that stops "
                "(or ends) keeps its page, and the alerts it holds back stay held.",
            ),
        },
        severity="critical",
        expr=_nonfinite,
        summary="NaN or Inf in a loss, gradient norm or reward.",
        description=f"{{{{ $labels.metric }}}} of {ID} is not finite (value or count {HUMANIZE}): "
        "training has diverged or will.",
        check=_nonfinite_problems,
        runbook=kit.Runbook(
            "A loss or gradient norm became NaN or ±Inf (seen in the gauge or counted by the "
            "exporter), or the reward did, or the episode return did after it had values. "
            "Training has diverged or trains on NaN; later steps are usually wasted.",
            see(TRAINING, panels.NONFINITE, panels.GRAD_NORM, panels.LEARNING_RATE),
            (
                "Stop the run and resume from the last finite checkpoint.",
                "Lower the learning rate, enable gradient clipping, check mixed precision "
                "(bf16 instead of fp16, loss scaling).",
                "Look for a division by a zero standard deviation (group-normalised "
                "advantages of a zero-std group) or log of 0 probabilities.",
                "A reward or return (metric rl_reward_mean / rl_episode_return): the environment, "
                "a reward wrapper or the grader returned NaN or Inf; find the first step it did "
                "and the rollouts of that step.",
            ),
        ),
        tests=(
            kit.Scenario(
                "Non-finite values. A log replay sets the gauge to +Inf (no exporter counter): "
                "fires at once with the gauge's value. A live exporter also counts NaNs: rl_loss "
                "goes NaN at 10m and the counter grows 1 per minute, so at 15m the count is 6 (the "
                "counter wins). The grad-norm alert keeps firing for 10m after its last Inf (11m).",
                (
                    (series(GRAD_NORM, _POLICY), f"{const(1, 10)} Inf Inf {const(1, 10)}"),
                    (series(LOSS), f"{const(0.5, 10)} {' '.join(['NaN'] * 10)}"),
                    (series(NONFINITE, _LOSS), f"{const(0, 10)} {ramp(1, 1, 10)}"),
                ),
                (
                    kit.Check(NONFINITE_LOSS, "9m"),
                    kit.Check(
                        NONFINITE_LOSS,
                        "11m",
                        (
                            kit.Expect("critical", {**_POLICY, "metric": "rl_grad_norm"}, math.inf),
                            kit.Expect("critical", _LOSS, 2),
                        ),
                    ),
                    kit.Check(
                        NONFINITE_LOSS,
                        "15m",
                        (
                            # the grad norm is finite again from 12m: kept firing (keep_firing_for)
                            kit.Expect("critical", {**_POLICY, "metric": "rl_grad_norm"}, math.inf),
                            kit.Expect("critical", _LOSS, 6),
                        ),
                    ),
                ),
            ),
            kit.Scenario(
                "A reward gauge that reads NaN until its first batch ends (as RLlib logs its "
                "mean) is no failure: the exporter counts a reward's NaN only after a finite "
                "value. From 15m the reward turns NaN and the count grows 1 per minute: fires.",
                (
                    (
                        series(REWARD),
                        f"NaN NaN NaN NaN NaN {const(0.5, 10)} {' '.join(['NaN'] * 10)}",
                    ),
                    (series(NONFINITE, _REWARD), f"{const(0, 15)} {ramp(1, 1, 10)}"),
                ),
                (
                    kit.Check(NONFINITE_LOSS, "4m"),
                    kit.Check(NONFINITE_LOSS, "17m", (kit.Expect("critical", _REWARD, 3),)),
                ),
            ),
        ),
    ),
    kit.recent_mean(
        name=EXPLAINED_VARIANCE,
        doc="The value function predicts worse than a constant.",
        metric=EXPLAINED_VAR,
        threshold=(0.0, "explained variance"),
        below=True,
        for_="15m",
        summary="The value function explains less than a constant would.",
        description=lambda q, k: f"Explained variance of {ID} is {G3} (threshold {k.threshold:g}).",
        runbook=kit.Runbook(
            "The value function explains less of the returns than a constant would: its "
            "advantages are noise.",
            see(TRAINING, panels.EXPLAINED_VARIANCE, panels.LOSSES),
            (
                "Early in training this can be normal; if it persists, lower the critic "
                "learning rate, warm up the critic, or normalise rewards/returns.",
            ),
        ),
        shift=(
            "Explained variance: 0.5, then -0.3 from 20m; the 10m mean is negative from 26m "
            "and fires 15m later.",
            (0.5, -0.3),
        ),
        quiet=("35m",),
    ),
    kit.ThresholdAlert(
        name=IMPORTANCE_DRIFT,
        doc="Trainer and rollout-engine probabilities disagree (importance ratio far from 1).",
        settings={
            "max_deviation": kit.Knob(0.2, "Fire when the mean ratio is further than this from 1.")
        },
        severity="warning",
        expr=lambda q, k: f"abs({q.recent(IMPORTANCE)} - 1) > {k.max_deviation:g}",
        summary="Trainer and rollout engine disagree on token probabilities.",
        description=lambda q, k: (
            f"Mean importance ratio of {ID} is {G3} away from 1 (threshold {k.max_deviation:g})."
        ),
        runbook=kit.Runbook(
            "The importance ratio between trainer and rollout-engine probabilities is far "
            "from 1: the rollouts were generated by a different policy than the one being "
            "trained (precision mismatch, stale weights, different sampling settings).",
            see(TRAINING, panels.MISMATCH),
            (
                "Check weight synchronisation between trainer and inference engine.",
                "Align precision (bf16/fp32 logits) and sampling parameters; use truncated "
                "importance sampling to correct the mismatch.",
            ),
        ),
        tests=(
            kit.level_shift(
                IMPORTANCE_DRIFT,
                "Train/inference mismatch: importance ratio 1.0, then 1.5 from 20m: 0.5 away from "
                "1.",
                series(IMPORTANCE),
                (1, 1.5),
                TARGET,
                value=0.5,
            ),
        ),
    ),
)
