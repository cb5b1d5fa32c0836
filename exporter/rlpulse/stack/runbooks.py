"""docs/runbooks.md: one section per alert (what it means, which panel to open, what to try).

Each alert's ``runbook_url`` points at ``#<alertname lowercased>``, the anchor GitHub and most
Markdown renderers give the ``## <AlertName>`` heading below.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlpulse.stack import rules
from rlpulse.stack.config import Config

TRAINING = "RL training"
SYSTEM = "RL system"


@dataclass(frozen=True)
class Runbook:
    """The three parts of a runbook section."""

    means: str
    panel: str
    tries: tuple[str, ...]


RUNBOOKS: dict[str, Runbook] = {
    "RLEntropyCollapse": Runbook(
        "The policy's token entropy fell far below its own early-run peak (or under an absolute "
        "floor). The policy is close to deterministic: it stops exploring, groups stop "
        "disagreeing and learning stalls, often while reward still looks fine.",
        f"{TRAINING} → Entropy (absolute and % of baseline); compare Zero-std groups and KL.",
        (
            "Lower the learning rate or the number of update epochs per batch.",
            "Add or raise an entropy bonus; raise the sampling temperature of rollouts.",
            "Tighten clipping (clip-higher / asymmetric clipping keeps low-probability tokens "
            "alive); check that the KL penalty is on.",
            "Roll back to the last checkpoint before the drop if reward later collapses too.",
        ),
    ),
    "RLKLReferenceHigh": Runbook(
        "The policy's KL divergence to the frozen reference stayed high (median over the recent "
        "window): the policy drifted far from the reference model. Critical means a blow-up.",
        f"{TRAINING} → KL to reference with KL coefficient.",
        (
            "Raise the KL coefficient (beta) or enable an adaptive KL controller.",
            "Lower the learning rate; check for reward hacking (the policy may exploit the "
            "grader, see RLRewardHacking).",
            "Check the reference model is the intended checkpoint and its log-probs are computed "
            "with the same tokenizer and template.",
        ),
    ),
    "RLKLReferenceRising": Runbook(
        "KL to the reference rose many standard deviations above its earlier window: a fast "
        "rise that often precedes a blow-up, or a single large spike.",
        f"{TRAINING} → KL to reference; Grad norm for a simultaneous spike.",
        (
            "Look at the steps around the rise: a bad batch, a learning-rate schedule jump, "
            "a resumed checkpoint.",
            "If it keeps rising, treat it like RLKLReferenceHigh.",
        ),
    ),
    "RLUpdateKLHigh": Runbook(
        "The approximate KL between the policy before and after each update is high: each "
        "optimisation step moves the policy too far (PPO's trust region is not respected).",
        f"{TRAINING} → Update-step KL and clip fractions.",
        (
            "Lower the learning rate or the number of PPO epochs / mini-batches per rollout.",
            "Use early stopping on a target KL per update.",
        ),
    ),
    "RLClipFractionHigh": Runbook(
        "A large fraction of probability ratios hit the clip bound: most of the batch gives no "
        "gradient, a sign that updates are too large or the data is stale (off-policy).",
        f"{TRAINING} → Update-step KL and clip fractions.",
        (
            "Lower the learning rate or the update epochs; check rollout/trainer weight sync "
            "(stale rollouts raise the clip fraction).",
            "Compare with Train/inference mismatch: a precision or sampling mismatch also shows "
            "here.",
        ),
    ),
    "RLNonFiniteLoss": Runbook(
        "A loss or gradient norm became NaN or ±Inf (seen in the gauge or counted by the "
        "exporter). Training has diverged; later steps are usually wasted.",
        f"{TRAINING} → Grad norm (log), non-finite count, learning rate.",
        (
            "Stop the run and resume from the last finite checkpoint.",
            "Lower the learning rate, enable gradient clipping, check mixed precision (bf16 "
            "instead of fp16, loss scaling).",
            "Look for a division by a zero standard deviation (group-normalised advantages of a "
            "zero-std group) or log of 0 probabilities.",
        ),
    ),
    "RLGradNormSpike": Runbook(
        "The gradient norm jumped far above its rolling median. Isolated spikes are common; "
        "repeated ones precede divergence.",
        f"{TRAINING} → Grad norm (log), non-finite count, learning rate.",
        (
            "Check gradient clipping is active and its threshold sensible.",
            "Inspect the batch at that step (very long responses, extreme advantages).",
            "If spikes repeat, lower the learning rate or warm it up longer.",
        ),
    ),
    "RLValueLossExplosion": Runbook(
        "The critic's value loss is many times its earlier level: the value function is "
        "diverging, which corrupts advantages (GAE) and then the policy.",
        f"{TRAINING} → Policy and value losses; Explained variance.",
        (
            "Lower the critic learning rate; enable value clipping or value-loss scaling.",
            "Check reward scale changes (a new reward component, a grader change).",
        ),
    ),
    "RLExplainedVarianceNegative": Runbook(
        "The value function explains less of the returns than a constant would: its "
        "advantages are noise.",
        f"{TRAINING} → Explained variance; Policy and value losses.",
        (
            "Early in training this can be normal; if it persists, lower the critic learning "
            "rate, warm up the critic, or normalise rewards/returns.",
        ),
    ),
    "RLRewardCollapse": Runbook(
        "The training reward dropped suddenly, many standard deviations below its earlier "
        "window and by a large fraction: the policy broke (divergence, collapse, a bad "
        "checkpoint) or the grader changed.",
        f"{TRAINING} → Reward (mean with min/max band, per component).",
        (
            "Check the grader first (RLGraderErrors, a new grader_version in the run metadata).",
            "Check entropy, KL and grad norm at the same time for a training instability.",
            "Roll back to the last good checkpoint and lower the learning rate.",
        ),
    ),
    "RLRewardPlateau": Runbook(
        "The mean reward has not changed over the plateau window. Informational: the run may "
        "have converged or stopped learning (e.g. all groups already solved or all failing).",
        f"{TRAINING} → Reward; Reward spread and zero-std groups.",
        (
            "If the task is not solved, check zero-std groups and entropy; consider harder or "
            "easier prompts, or a higher learning rate.",
            "If it is solved, stop the run and save compute.",
        ),
    ),
    "RLZeroStdGroupsHigh": Runbook(
        "Most prompt groups have identical rewards for all samples, so group-relative "
        "advantages are zero and there is no learning signal (GRPO-style training).",
        f"{TRAINING} → Reward spread and zero-std groups.",
        (
            "Filter or re-sample prompts that are always solved or always failed (dynamic "
            "sampling), adjust the curriculum.",
            "Raise sampling temperature or group size; check entropy for a collapse.",
        ),
    ),
    "RLImportanceRatioDrift": Runbook(
        "The importance ratio between trainer and rollout-engine probabilities is far from 1: "
        "the rollouts were generated by a different policy than the one being trained "
        "(precision mismatch, stale weights, different sampling settings).",
        f"{TRAINING} → Train/inference mismatch.",
        (
            "Check weight synchronisation between trainer and inference engine.",
            "Align precision (bf16/fp32 logits) and sampling parameters; use truncated "
            "importance sampling to correct the mismatch.",
        ),
    ),
    "RLRewardHacking": Runbook(
        "Training reward keeps rising while the held-out eval score is flat or falling: the "
        "policy is likely exploiting the reward (grader loophole, format trick, length).",
        f"{TRAINING} → Reward with eval overlaid; Response length, truncation and format.",
        (
            "Read samples with high reward and low eval score; look for the loophole.",
            "Fix the grader, add a penalty or a second verifier; roll back to the checkpoint "
            "where the eval score peaked.",
        ),
    ),
    "RLResponseLengthExplosion": Runbook(
        "Mean response length is many times the run's own early length: responses grow "
        "without bound (repetition, rambling, length-rewarding grader).",
        f"{TRAINING} → Response length, truncation and format compliance.",
        (
            "Check for a length bias in the reward; add a length penalty or normalise the loss "
            "per token.",
            "Read long samples for repetition loops; check truncation.",
        ),
    ),
    "RLResponseLengthDrift": Runbook(
        "The p90 of the response-length histogram moved by a large factor against the same "
        "window an hour earlier: the length distribution shifted (either way).",
        f"{TRAINING} → Response length; {SYSTEM} → rollout latency.",
        (
            "A shift upward usually precedes truncation and latency problems; downward, "
            "a collapse to short answers. Read samples from both windows.",
        ),
    ),
    "RLTruncationHigh": Runbook(
        "Many responses are cut at the generation length limit: their rewards are "
        "unreliable and the policy may be learning to ramble.",
        f"{TRAINING} → Response length, truncation and format compliance.",
        (
            "Raise the max generation length or penalise truncated responses.",
            "Look at RLResponseLengthExplosion and the reward per component.",
        ),
    ),
    "RLFormatComplianceDrop": Runbook(
        "The fraction of responses in the required format fell well below the run's own peak: "
        "the policy is unlearning the format, or found a reward that does not need it.",
        f"{TRAINING} → Response length, truncation and format compliance.",
        (
            "Check the format reward component and the parser; read non-compliant samples.",
            "Raise the weight of the format reward or roll back.",
        ),
    ),
    "RLTargetDown": Runbook(
        "Prometheus cannot scrape a trainer exporter that served a run within the baseline "
        "window: the process died, hung hard, or lost its network. Other alerts of that "
        "target are inhibited while this fires.",
        f"{SYSTEM} → Exporter health; {TRAINING} → Throughput, phase times and liveness.",
        (
            "Check the trainer's process and logs (OOM killer, NCCL timeout, node failure).",
            "A run that ends (rlpulse.finish(), a normal interpreter exit, or a crash, which "
            "RLRunCrashed pages) has a last scrape carry its end mark and this alert stays "
            "quiet. If it paged for a run that did end, that last scrape never came (the exit "
            "wait, RLPULSE_FINAL_WAIT, was shorter than the scrape interval, or the process "
            "was killed): raise the wait, or remove the run's file_sd target "
            "(rlpulse.targets.register does on close).",
        ),
    ),
    "RLRunCrashed": Runbook(
        "The trainer process ended in an uncaught exception (in any thread) or called "
        "sys.exit with a non-zero status; rlpulse exported the outcome (rl_run_outcome, reason: "
        "the exception type or the exit status) in a last scrape or a push. RLTargetDown stays "
        "quiet for it: this alert is the page.",
        f"{TRAINING} → Throughput, phase times and liveness (where the run stopped).",
        (
            "Read the traceback at the end of the trainer's log; the reason label names the "
            "exception type.",
            "Resume from the last checkpoint once the cause is fixed.",
            "A Pushgateway keeps the crashed run's series until its group is deleted: "
            "curl -X DELETE <pushgateway>/metrics/job/rlpulse/run_id/<run_id>/rank/<rank>.",
        ),
    ),
    "RLTrainingStalled": Runbook(
        "The exporter still answers but the training step has not changed for the stall "
        "window: the loop hangs (deadlock, stuck collective, waiting on a dead worker or grader).",
        f"{TRAINING} → Throughput, phase times and liveness; {SYSTEM} → phase-time breakdown.",
        (
            "Dump the stacks of the trainer (py-spy dump) to see where it waits.",
            "Check the phase that stopped finishing (rollout, reward, update, sync).",
            "If the trainer logs less often than the window, raise alerts.training_stalled.window.",
        ),
    ),
    "RLGPUIdle": Runbook(
        "A GPU of a live run averaged near-zero utilization: the run waits on something "
        "(rollouts, grader, data, a stalled rank) or the GPU is not used at all.",
        f"{SYSTEM} → per-GPU utilization; phase-time breakdown.",
        (
            "Check which phase dominates; overlap generation and training, or add rollout workers.",
            "Check the device assignment (CUDA_VISIBLE_DEVICES) of each rank.",
        ),
    ),
    "RLGPUMemoryFull": Runbook(
        "GPU framebuffer memory is nearly full; the next long batch can run out of memory.",
        f"{SYSTEM} → per-GPU memory.",
        (
            "Lower the micro-batch size or max length, enable activation checkpointing, lower "
            "the inference engine's memory fraction.",
        ),
    ),
    "RLGPUTemperatureHigh": Runbook(
        "A GPU runs hot; it will throttle and may fail.",
        f"{SYSTEM} → per-GPU temperature and power.",
        ("Check the node's cooling and fans; move the job off the node if it keeps rising.",),
    ),
    "RLGPUThrottling": Runbook(
        "A GPU's clocks are held down by a thermal or hardware slowdown (power capping is not "
        "counted): training runs slower than it should on that GPU and the whole job waits.",
        f"{SYSTEM} → per-GPU power, temperature and clocks.",
        ("Check cooling and power delivery of the node; report hardware slowdowns.",),
    ),
    "RLGPUECCErrors": Runbook(
        "A GPU reported uncorrected ECC memory errors: results on that GPU may be wrong and the "
        "process usually crashes.",
        f"{SYSTEM} → per-GPU panels.",
        (
            "Drain the node, reset the GPU or replace it; resume the run from a checkpoint on "
            "healthy hardware.",
        ),
    ),
    "RLThroughputDrop": Runbook(
        "Training steps or samples per second fell well below the run's rate over the earlier "
        "window.",
        f"{TRAINING} → Throughput, phase times and liveness; {SYSTEM} → phase-time breakdown.",
        (
            "Find the phase whose share grew; check GPU throttling, a slow grader, longer "
            "responses (RLResponseLengthDrift), a straggler rank.",
        ),
    ),
    "RLRolloutLatencyTail": Runbook(
        "The p99 rollout latency is far above p50: a few very slow generations or episodes "
        "hold up every batch (synchronous RL waits for the slowest).",
        f"{SYSTEM} → rollout-latency heatmap and quantiles (exemplars link slow rollouts).",
        (
            "Cap generation length or time; use partial rollouts / asynchronous generation.",
            "Open an exemplar to find the slow rollout and its prompt.",
        ),
    ),
    "RLGraderErrors": Runbook(
        "A large fraction of grader / reward-model calls fail; failed calls usually score 0 "
        "and corrupt the reward signal.",
        f"{SYSTEM} → grader latency and errors.",
        (
            "Check the grader service (rate limits, timeouts, crashes) and its version.",
            "Pause training when critical: the reward is no longer meaningful.",
        ),
    ),
    "RLExporterCollectorErrors": Runbook(
        "One of the exporter's collectors (GPU via NVML, host via psutil) keeps failing or "
        "timing out; its panels and alerts go blind.",
        f"{SYSTEM} → Exporter health.",
        (
            "Check the trainer log for the rlpulse collector message; check the NVIDIA driver "
            "(nvidia-smi) on that node.",
        ),
    ),
    "RLExporterDroppedValues": Runbook(
        "The exporter dropped logged values (non-numeric, None, …) or folded label values into "
        "__overflow__ at the cardinality cap. Informational: some series are incomplete.",
        f"{SYSTEM} → Exporter health.",
        (
            "Look at the reason/label; log numbers only, or raise label_cap if the values are "
            "legitimately many.",
        ),
    ),
}


def render(cfg: Config) -> dict[str, str]:
    """docs/runbooks.md for the alerts ``cfg`` generates."""
    seen: dict[str, list[str]] = {}
    for _, alert in rules.all_alerts(cfg):
        seen.setdefault(alert.name, []).append(alert.severity)
    lines = [
        "# Runbooks",
        "",
        "<!-- GENERATED by `rlpulse generate` from rlpulse/stack/runbooks.py; edit the source. -->",
        "",
        "One section per alert rlpulse generates. Thresholds and windows are the defaults of",
        "[configuration.md](configuration.md); dashboards are generated in `grafana/dashboards/`.",
        "",
    ]
    for name, severities in seen.items():
        rb = RUNBOOKS[name]
        lines += [
            f"## {name}",
            "",
            f"Severity: {' / '.join(severities)}.",
            "",
            f"**What it means.** {rb.means}",
            "",
            f"**Panel to open.** {rb.panel}",
            "",
            "**What to try.**",
            "",
            *(f"- {t}" for t in rb.tries),
            "",
        ]
    return {"docs/runbooks.md": "\n".join(lines)}
