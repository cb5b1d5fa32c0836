"""Task alerts on step-indexed signals: reward hacking, eval regressions, response lengths."""

from __future__ import annotations

from rlpulse.stack import panels
from rlpulse.stack.alerts.kit import Runbook
from rlpulse.stack.alerts.step import StepAlert

REWARD_HACKING = StepAlert(
    name="RLRewardHacking",
    key="reward_hacking",
    area="task",
    signal="reward_hacking_rise_ratio",
    summary="Training reward rises while the true objective does not: likely reward hacking.",
    subject="Training reward",
    relation="above its level when the true objective was last at its best",
    healthy=0.0,
    warning=0.25,
    critical=0.5,
    runbook=Runbook(
        "The smoothed training reward rose well above where it stood when the true objective "
        "(a held-out eval score, or a key declared the objective) was last at its best, and "
        "the objective has not improved since: the policy is likely exploiting the reward "
        "(grader loophole, format trick, length).",
        panels.see(
            panels.TRAINING,
            panels.alert_signal("RLRewardHacking", "reward_hacking_rise_ratio"),
            panels.REWARD,
            panels.EVAL_SCORES,
            panels.RESPONSE_LENGTH,
            panels.RESPONSE_QUALITY,
        ),
        (
            "Read samples with high reward and low objective score; look for the loophole "
            "(`rlpulse rollouts show` for the run and step range).",
            "Fix the grader, add a penalty or a second verifier; resume from the checkpoint "
            "where the objective peaked.",
        ),
    ),
)
EVAL_DROP = StepAlert(
    name="RLEvalDrop",
    key="eval_drop",
    area="task",
    signal="eval_drop_ratio",
    summary="A held-out score fell below its best.",
    subject="Held-out score",
    relation="below its best so far",
    healthy=0.0,
    warning=0.15,
    critical=0.3,
    runbook=Runbook(
        "The latest eval / objective score is well below the best the run reached: the "
        "policy regressed on held-out data (over-optimisation, forgetting, reward hacking).",
        panels.see(
            panels.TRAINING,
            panels.alert_signal("RLEvalDrop", "eval_drop_ratio"),
            panels.EVAL_SCORES,
        ),
        (
            "Compare the training reward: if it still rises, see RLRewardHacking.",
            "Check response length and format on held-out prompts; resume from the best "
            "checkpoint.",
        ),
    ),
)
LENGTH_EXPLOSION = StepAlert(
    name="RLResponseLengthExplosion",
    key="response_length_explosion",
    area="task",
    signal="length_ratio_to_start",
    summary="Response length exploded against the run's own starting length.",
    subject="Mean response length",
    relation="its length at the start",
    healthy=1.1,
    warning=2.5,
    critical=5.0,
    runbook=Runbook(
        "Smoothed mean response length is many times its level at the start of the run: "
        "responses "
        "grow without bound (repetition, rambling, a length-rewarding grader).",
        panels.see(
            panels.TRAINING,
            panels.alert_signal("RLResponseLengthExplosion", "length_ratio_to_start"),
            panels.RESPONSE_LENGTH,
            panels.RESPONSE_QUALITY,
        ),
        (
            "Check for a length bias in the reward; add a length penalty or normalise the loss "
            "per token.",
            "Read long samples for repetition loops; check truncation.",
        ),
    ),
)
LENGTH_COLLAPSE = StepAlert(
    name="RLResponseLengthCollapse",
    key="response_length_collapse",
    area="task",
    signal="length_ratio_to_peak",
    summary="Response length collapsed against the run's own peak.",
    subject="Mean response length",
    relation="of its peak so far",
    healthy=0.9,
    warning=0.5,
    critical=0.25,
    runbook=Runbook(
        "Smoothed mean response length fell to a fraction of its peak: the policy answers in "
        "a few tokens (an empty or degenerate answer the grader still pays, or a collapse).",
        panels.see(
            panels.TRAINING,
            panels.alert_signal("RLResponseLengthCollapse", "length_ratio_to_peak"),
            panels.RESPONSE_LENGTH,
            panels.RESPONSE_QUALITY,
        ),
        (
            "Read short samples; check the reward for a shortcut (format-only, empty answers).",
            "Check entropy and zero-std groups; resume from the step before the drop.",
        ),
    ),
)
TRUNCATION = StepAlert(
    name="RLTruncationHigh",
    key="truncation_high",
    area="task",
    signal="truncation_level",
    summary="Many responses are cut at the length limit.",
    subject="Truncated responses",
    relation="(median of the last 5 logged steps); recent median",
    healthy=0.02,
    warning=0.2,
    critical=0.5,
    runbook=Runbook(
        "Many responses are cut at the generation length limit: their rewards are "
        "unreliable and the policy may be learning to ramble.",
        panels.see(
            panels.TRAINING,
            panels.alert_signal("RLTruncationHigh", "truncation_level"),
            panels.RESPONSE_LENGTH,
            panels.RESPONSE_QUALITY,
        ),
        (
            "Raise the max generation length or penalise truncated responses.",
            "Look at RLResponseLengthExplosion and the reward per component.",
        ),
    ),
)
FORMAT_DROP = StepAlert(
    name="RLFormatComplianceDrop",
    key="format_compliance_drop",
    area="task",
    signal="format_ratio_to_peak",
    summary="Format compliance fell below the run's own peak.",
    subject="Format compliance",
    relation="of its peak so far",
    healthy=0.98,
    warning=0.8,
    runbook=Runbook(
        "The smoothed share of responses in the required format fell well below the run's own "
        "peak: the policy is unlearning the format, or found a reward that does not need it.",
        panels.see(
            panels.TRAINING,
            panels.alert_signal("RLFormatComplianceDrop", "format_ratio_to_peak"),
            panels.RESPONSE_LENGTH,
            panels.RESPONSE_QUALITY,
        ),
        (
            "Check the format reward component and the parser; read non-compliant samples.",
            "Raise the weight of the format reward or roll back.",
        ),
    ),
)

DEFS: tuple[StepAlert, ...] = (
    REWARD_HACKING,
    EVAL_DROP,
    LENGTH_EXPLOSION,
    LENGTH_COLLAPSE,
    TRUNCATION,
    FORMAT_DROP,
)
