"""Task alerts: step-indexed signals (reward hacking, eval regressions, response lengths) and
the drift of the response-length distribution, with the healthy run no task alert fires on."""

from __future__ import annotations

from rlpulse.stack import panels
from rlpulse.stack.alerts import kit, step
from rlpulse.stack.alerts.inputs import (
    HEALTHY_SAMPLES,
    RUN,
    TARGET,
    const,
    counter,
    every,
    noisy,
    series,
)
from rlpulse.stack.alerts.kit import G3, RUN_TEXT
from rlpulse.stack.alerts.step import StepAlert
from rlpulse.stack.metrics import (
    EVAL_SCORE,
    FORMAT_OK,
    LENGTH_HIST,
    LENGTH_MEAN,
    REWARD,
    TRUNCATION_RATIO,
)
from rlpulse.stack.promql import record_name, sel, template_matchers, template_query

LENGTH_P90_DRIFT = record_name("run", LENGTH_HIST, "p90_drift_ratio")

EVAL_DROP_CRITICAL = 0.3  # RLEvalDrop's critical level, where RLRewardHacking pages too
# the true objective's value now, on a reward-hacking page (what the reward no longer follows)
_OBJECTIVE_NOW = template_query(
    sel(EVAL_SCORE, 'split!="train"', extra=template_matchers("job", "instance")),
    "$labels.job",
    "$labels.instance",
) + (
    "{{ range . }} The true objective {{ .Labels.benchmark }} ({{ .Labels.split }}) is now "
    '{{ .Value | printf "%.3g" }}.{{ end }}{{ end }}'
)

REWARD_HACKING = StepAlert(
    name="RLRewardHacking",
    signal="reward_hacking_rise_ratio",
    summary="Training reward rises while the true objective does not: likely reward hacking.",
    subject="Training reward",
    relation="above its level when the true objective was last at its best",
    healthy=0.0,
    warning=0.25,
    critical=0.5,
    # the objective fell as far as RLEvalDrop pages for: the hack has done its damage
    escalate=("eval_drop_ratio", EVAL_DROP_CRITICAL),
    also=_OBJECTIVE_NOW,
    runbook=kit.Runbook(
        "The smoothed training reward rose well above where it stood when the true objective "
        "(a held-out eval score, or a key declared the objective) was last at its best, and "
        "the objective has not improved since: the policy is likely exploiting the reward "
        "(grader loophole, format trick, length). It pages at the warning level already once "
        "the objective fell as far below its best as RLEvalDrop pages for (which it then "
        "holds back, with the length, format and entropy alerts a hack brings about).",
        panels.see(
            panels.TRAINING,
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
    signal="eval_drop_ratio",
    summary="A held-out score fell below its best.",
    subject="Held-out score",
    relation="below its best so far",
    healthy=0.0,
    warning=0.15,
    critical=EVAL_DROP_CRITICAL,
    runbook=kit.Runbook(
        "The latest eval / objective score is well below the best the run reached: the "
        "policy regressed on held-out data (over-optimisation, forgetting, reward hacking).",
        panels.see(
            panels.TRAINING,
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
    signal="length_ratio_to_start",
    summary="Response length exploded against the run's own starting length.",
    subject="Mean response length",
    relation="its length at the start",
    healthy=1.1,
    warning=2.5,
    critical=5.0,
    runbook=kit.Runbook(
        "Smoothed mean response length is many times its level at the start of the run: "
        "responses "
        "grow without bound (repetition, rambling, a length-rewarding grader).",
        panels.see(
            panels.TRAINING,
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
    signal="length_ratio_to_peak",
    summary="Response length collapsed against the run's own peak.",
    subject="Mean response length",
    relation="of its peak so far",
    healthy=0.9,
    warning=0.5,
    critical=0.25,
    runbook=kit.Runbook(
        "Smoothed mean response length fell to a fraction of its peak: the policy answers in "
        "a few tokens (an empty or degenerate answer the grader still pays, or a collapse).",
        panels.see(
            panels.TRAINING,
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
    signal="truncation_level",
    summary="Many responses are cut at the length limit.",
    subject="Truncated responses",
    relation="(median of the last 5 logged steps); recent median",
    healthy=0.02,
    warning=0.2,
    critical=0.5,
    runbook=kit.Runbook(
        "Many responses are cut at the generation length limit: their rewards are "
        "unreliable and the policy may be learning to ramble.",
        panels.see(
            panels.TRAINING,
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
    signal="format_ratio_to_peak",
    summary="Format compliance fell below the run's own peak.",
    subject="Format compliance",
    relation="of its peak so far",
    healthy=0.98,
    warning=0.8,
    runbook=kit.Runbook(
        "The smoothed share of responses in the required format fell well below the run's own "
        "peak: the policy is unlearning the format, or found a reward that does not need it.",
        panels.see(
            panels.TRAINING,
            panels.RESPONSE_LENGTH,
            panels.RESPONSE_QUALITY,
        ),
        (
            "Check the format reward component and the parser; read non-compliant samples.",
            "Raise the weight of the format reward or roll back.",
        ),
    ),
)

STEP_ALERTS: tuple[StepAlert, ...] = (
    REWARD_HACKING,
    EVAL_DROP,
    LENGTH_EXPLOSION,
    LENGTH_COLLAPSE,
    TRUNCATION,
    FORMAT_DROP,
)

LENGTH_DRIFT = "RLResponseLengthDrift"


def healthy() -> kit.Scenario:
    """A healthy run no task alert fires on."""
    n = HEALTHY_SAMPLES
    gsm = {**TARGET, "benchmark": "gsm8k", "split": "eval"}
    hist = {**TARGET, "le": "128"}
    return kit.Scenario(
        "Healthy run, 8 hours: reward rises 0.2 -> 0.8 and the held-out eval score (logged every "
        "30 minutes) rises 0.3 -> 0.6; mean length grows 200 -> 400 tokens from a stable "
        "distribution; truncation 2%; format compliance 0.9 -> 0.95.",
        (
            (series(REWARD), noisy(0.2, 0.8, 0.05, n, 9)),
            (series(EVAL_SCORE, gsm), every(lambda i: 0.3 + 0.3 * i / n, n, 30)),
            (series(LENGTH_MEAN), noisy(200, 400, 10, n, 12)),
            (series(LENGTH_HIST, hist, "_bucket"), const(0, n)),
            (series(LENGTH_HIST, {**hist, "le": "256"}, "_bucket"), counter((10, n))),
            (series(LENGTH_HIST, {**hist, "le": "512"}, "_bucket"), counter((11, n))),
            (series(LENGTH_HIST, {**hist, "le": "+Inf"}, "_bucket"), counter((11, n))),
            (series(TRUNCATION_RATIO), noisy(0.02, 0.02, 0.01, n, 13)),
            (series(FORMAT_OK), noisy(0.9, 0.95, 0.02, n, 14)),
            *step.healthy_inputs(STEP_ALERTS, TARGET, n),
        ),
    )


DEFS: tuple[kit.AlertDef, ...] = (
    *STEP_ALERTS,
    kit.ThresholdAlert(
        name=LENGTH_DRIFT,
        doc="The response-length distribution's p90 moved against the earlier window.",
        settings={
            "for_": "15m",
            "ratio": kit.Knob(2.0, "Fire when p90 is this many times (or 1/this) the earlier p90."),
        },
        severity="warning",
        records=lambda q, k: [
            kit.RecordingRule(
                LENGTH_P90_DRIFT,
                f"{q.run_quantile(0.9, LENGTH_HIST, q.w.recent)} / "
                f"{q.run_quantile(0.9, LENGTH_HIST, q.w.zscore, q.w.zscore)}",
            )
        ],
        expr=lambda q, k: (
            f"{LENGTH_P90_DRIFT} > {k.ratio:g} or {LENGTH_P90_DRIFT} < {1 / k.ratio:g}"
        ),
        summary="The response-length distribution shifted against its earlier window.",
        description=lambda q, k: (
            f"p90 response length of {RUN_TEXT} is {G3} times its p90 of {q.w.zscore} before "
            f"(threshold x{k.ratio:g} either way)."
        ),
        scope="run",
        runbook=kit.Runbook(
            "The p90 of the response-length histogram moved by a large factor against the "
            "same window an hour earlier: the length distribution shifted (either way).",
            panels.see_in(
                (panels.TRAINING, panels.RESPONSE_LENGTH), (panels.SYSTEM, panels.ROLLOUT_QUANTILES)
            ),
            (
                "A shift upward usually precedes truncation and latency problems; downward, "
                "a collapse to short answers. Read samples from both windows.",
            ),
        ),
        tests=(
            kit.Scenario(
                "Length-distribution drift: 10 responses a minute in (64, 128] for an hour, then "
                "in (256, 512]. p90 goes from 64 + 0.9 * 64 = 121.6 to 256 + 0.9 * 256 = 486.4 "
                "tokens, 4x the p90 an hour earlier; fires 15m after the shift shows.",
                tuple(
                    (series(LENGTH_HIST, {**TARGET, "le": le}, "_bucket"), v)
                    for le, v in {
                        "64": const(0, 121),
                        "128": counter((10, 61), (0, 60)),
                        "256": counter((10, 61), (0, 60)),
                        "512": counter((10, 121)),
                        "+Inf": counter((10, 121)),
                    }.items()
                ),
                (
                    kit.Check(LENGTH_DRIFT, "60m"),
                    kit.Check(LENGTH_DRIFT, "100m", (kit.Expect("warning", RUN, 4),)),
                ),
            ),
        ),
    ),
)
