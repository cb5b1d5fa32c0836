"""RL-dynamics alerts on step-indexed signals: policy entropy, KL, gradients, critic, reward."""

from __future__ import annotations

from rlpulse.stack import panels
from rlpulse.stack.alerts.kit import Runbook
from rlpulse.stack.alerts.step import StepAlert

ENTROPY_COLLAPSE = StepAlert(
    name="RLEntropyCollapse",
    key="entropy_collapse",
    area="rl",
    signal="entropy_ratio_to_peak",
    summary="Policy entropy collapsed against the run's own peak.",
    subject="Policy entropy",
    relation="of its peak so far",
    healthy=0.8,
    warning=0.35,
    critical=0.2,
    runbook=Runbook(
        "The policy's smoothed entropy fell far below its own peak: the policy is becoming "
        "near-deterministic, stops exploring, and groups stop disagreeing. It usually comes "
        "before reward stalls or collapses, so it is the earliest warning of a collapse.",
        panels.see(
            panels.TRAINING,
            panels.alert_signal("RLEntropyCollapse", "entropy_ratio_to_peak"),
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
    key="entropy_blowup",
    area="rl",
    signal="entropy_ratio_to_start",
    summary="Policy entropy rose far above the run's own starting level.",
    subject="Policy entropy",
    relation="its level at the start",
    healthy=1.2,
    warning=2.0,
    critical=3.0,
    runbook=Runbook(
        "The policy's smoothed entropy is several times its level at the start of the run: "
        "the policy is "
        "drifting toward uniform sampling (garbled text, random actions), usually after too "
        "large updates or a too-strong entropy bonus.",
        panels.see(
            panels.TRAINING,
            panels.alert_signal("RLEntropyBlowup", "entropy_ratio_to_start"),
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
    key="kl_reference_high",
    area="rl",
    signal="kl_reference_level",
    summary="KL divergence to the reference policy is high.",
    subject="KL to the reference",
    relation="(half of the last 10 logged steps); recent median",
    healthy=0.05,
    warning=1.0,
    critical=3.0,
    runbook=Runbook(
        "The policy's KL to the frozen reference stayed high over several logged steps (a "
        "step-smoothed median, so one spike does not fire it): the policy drifted far from the "
        "reference. Critical means a blow-up.",
        panels.see(
            panels.TRAINING,
            panels.alert_signal("RLKLReferenceHigh", "kl_reference_level"),
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
    key="kl_reference_spike",
    area="rl",
    signal="kl_reference_zscore",
    summary="KL to the reference jumped far above its recent history.",
    subject="KL to the reference",
    relation="from its recent median",
    healthy=0.5,
    warning=8.0,
    runbook=Runbook(
        "The latest KL to the reference is many robust standard deviations (median absolute "
        "deviations) above its recent history: a sudden jump, which often precedes a blow-up, "
        "or a single bad batch.",
        panels.see(
            panels.TRAINING,
            panels.alert_signal("RLKLReferenceSpike", "kl_reference_zscore"),
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
    key="grad_norm_spike",
    area="rl",
    signal="grad_norm_spike_ratio",
    summary="Gradient norm spiked against the run's own recent norms.",
    subject="Gradient norm",
    relation="its recent 90th percentile",
    healthy=1.1,
    warning=10.0,
    runbook=Runbook(
        "The latest gradient norm is many times its recent 90th percentile (relative, so runs "
        "whose stable norm is 1e5 do not fire). Isolated spikes are common; repeated ones precede "
        "divergence.",
        panels.see(
            panels.TRAINING,
            panels.alert_signal("RLGradNormSpike", "grad_norm_spike_ratio"),
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
    key="value_loss_explosion",
    area="rl",
    signal="value_loss_ratio",
    summary="Value loss exploded against its recent level.",
    subject="Value loss",
    relation="its recent median magnitude",
    healthy=1.0,
    warning=10.0,
    runbook=Runbook(
        "The critic's smoothed value loss is many times its recent median magnitude: the value "
        "function is diverging, which corrupts advantages (GAE) and then the policy.",
        panels.see(
            panels.TRAINING,
            panels.alert_signal("RLValueLossExplosion", "value_loss_ratio"),
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
    key="reward_collapse",
    area="rl",
    signal="reward_gain_lost_ratio",
    summary="The run lost most of the reward it had gained.",
    subject="Reward",
    relation="of its gain (start to peak) lost again; peak",
    healthy=0.05,
    warning=0.5,
    critical=0.75,
    runbook=Runbook(
        "The smoothed training reward (or episode return) fell back from its peak and lost "
        "most of what the run had learned: the policy broke (divergence, collapse to a "
        "do-nothing policy, a bad checkpoint) or the grader changed. It keeps firing while "
        "the reward stays down.",
        panels.see(
            panels.TRAINING,
            panels.alert_signal("RLRewardCollapse", "reward_gain_lost_ratio"),
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
ZERO_STD = StepAlert(
    name="RLZeroStdGroupsHigh",
    key="zero_std_groups_high",
    area="rl",
    signal="zero_std_unsolved_ratio",
    summary="Most prompt groups carry no learning signal and the task is not solved.",
    subject="Zero-std prompt groups",
    relation="of the last 10 batches; reward peak",
    healthy=0.1,
    warning=0.8,
    runbook=Runbook(
        "Most prompt groups have one reward for all samples (or the batch reward std is 0), "
        "so group-relative advantages are zero and there is no learning signal, while the "
        "reward is below its best (a run saturated at its best reward does not fire).",
        panels.see(
            panels.TRAINING,
            panels.alert_signal("RLZeroStdGroupsHigh", "zero_std_unsolved_ratio"),
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
    key="advantage_std_collapse",
    area="rl",
    signal="advantage_std_ratio_to_peak",
    summary="Advantage spread collapsed against the run's own peak.",
    subject="Advantage std",
    relation="of its peak so far",
    healthy=0.8,
    warning=0.1,
    runbook=Runbook(
        "The spread of the advantages fell to a small fraction of its peak: the policy "
        "gradient is near zero, learning has stopped (all samples alike, a saturated critic).",
        panels.see(
            panels.TRAINING,
            panels.alert_signal("RLAdvantageStdCollapse", "advantage_std_ratio_to_peak"),
            panels.ADVANTAGES,
        ),
        ("Check zero-std groups and entropy; check advantage normalisation and the critic.",),
    ),
)

DEFS: tuple[StepAlert, ...] = (
    ENTROPY_COLLAPSE,
    ENTROPY_BLOWUP,
    KL_HIGH,
    KL_SPIKE,
    GRAD_SPIKE,
    VALUE_LOSS,
    REWARD_COLLAPSE,
    ZERO_STD,
    ADVANTAGE_COLLAPSE,
)
