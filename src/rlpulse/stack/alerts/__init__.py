"""Alert definitions, one module per area. Every alert is one declaration (``kit.AlertDef``):
a ``kit.ThresholdAlert`` on a PromQL condition or a ``step.StepAlert`` on a step signal, with
its knobs, rules, recording rules, runbook and promtool scenarios. Adding an alert is adding
its declaration to its area's ``DEFS`` (and, for a new metric, the metric to the catalog).

``DEFS[area]`` is what the generators read: ``stack.config`` makes a config section of each
definition's knobs, ``stack.rules`` its rules and recording rules, ``stack.runbooks`` its
sections and ``stack.ruletests`` its promtool scenarios, with the area's ``HEALTHY`` run last.
The alerting pipeline's own alerts (``meta``) are declared alike, without a config section.
"""

from __future__ import annotations

from collections.abc import Callable

from rlpulse.stack.alerts import gpu, liveness, rl, system, task
from rlpulse.stack.alerts.kit import AlertDef, Area, Scenario
from rlpulse.stack.alerts.step import StepAlert

STEP_ALERTS: dict[Area, tuple[StepAlert, ...]] = {
    "rl": rl.STEP_ALERTS,
    "task": task.STEP_ALERTS,
    "system": (),
}
DEFS: dict[Area, tuple[AlertDef, ...]] = {
    "rl": rl.DEFS,
    "task": task.DEFS,
    "system": (*liveness.DEFS, *gpu.DEFS, *system.DEFS),
}
ALL: tuple[AlertDef, ...] = tuple(d for defs in DEFS.values() for d in defs)
# the modules an area's alerts are declared in (what its generated files name as their source)
SOURCES: dict[Area, str] = {
    "rl": "alerts/rl.py",
    "task": "alerts/task.py",
    "system": "alerts/{liveness,gpu,system}.py",
}
HEALTHY: dict[Area, Callable[[], Scenario]] = {
    "rl": rl.healthy,
    "task": task.healthy,
    "system": system.healthy,
}

NONFINITE = rl.NONFINITE_LOSS
# One root cause, one incident: while a cause pages (critical), Alertmanager holds back the
# alerts it brings about on the same run. NaN/Inf values break every statistic of the run.
# A policy that games its reward drifts in length, format and entropy (RLRewardHacking pages
# once the objective fell as far as RLEvalDrop pages for). No cycles: two alerts holding each
# other back would both stay silent.
CAUSES: dict[str, tuple[str, ...]] = {
    task.REWARD_HACKING.name: (
        task.LENGTH_EXPLOSION.name,
        task.LENGTH_COLLAPSE.name,
        task.TRUNCATION.name,
        task.FORMAT_DROP.name,
        task.EVAL_DROP.name,
        rl.ENTROPY_BLOWUP.name,
        rl.ENTROPY_COLLAPSE.name,  # the policy settles on the exploit
    ),
    task.LENGTH_EXPLOSION.name: (
        task.TRUNCATION.name,
        task.FORMAT_DROP.name,
        task.EVAL_DROP.name,
    ),
    # updates too large (an lr jump) move the policy away and collapse or scatter it
    rl.KL_HIGH.name: (
        rl.REWARD_COLLAPSE.name,
        task.EVAL_DROP.name,
        rl.ENTROPY_BLOWUP.name,
        rl.ENTROPY_COLLAPSE.name,
        task.LENGTH_COLLAPSE.name,
    ),
    # a failing grader scores nothing: rewards, their spread and held-out scores fall with it
    system.GRADER: (
        rl.REWARD_COLLAPSE.name,
        rl.REWARD_LOST.name,
        rl.ZERO_STD.name,
        rl.ADVANTAGE_COLLAPSE.name,
        task.EVAL_DROP.name,
    ),
    # no reward signal: the policy drifts, and the frozen reward's spread goes too
    rl.REWARD_LOST.name: (
        rl.ZERO_STD.name,
        rl.ADVANTAGE_COLLAPSE.name,
    ),
    # a reward that lost its gain and then reads one value is one failure, paged as the loss:
    # the loss shows within a few readings (a frozen stretch counts only after 20 or more, a
    # 0/1 reward's drop after 15-26 episodes), so the later alert joins the first one's incident
    rl.REWARD_COLLAPSE.name: (rl.REWARD_LOST.name,),
    # a policy that stopped exploring takes its reward down with it (an lr spike, a sign flip)
    rl.ENTROPY_COLLAPSE.name: (
        rl.ZERO_STD.name,
        rl.ADVANTAGE_COLLAPSE.name,
        task.LENGTH_COLLAPSE.name,
        rl.REWARD_COLLAPSE.name,
    ),
}
# a run that fails also leaves the band of its healthy references, and drift is context (a
# failure's page names it): those warnings join the incident of whatever cause pages
CAUSES = {
    cause: (*effects, rl.REFERENCE_BAND.name, rl.INPUT_DRIFT) for cause, effects in CAUSES.items()
}
