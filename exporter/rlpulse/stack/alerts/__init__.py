"""Alert definitions, one module per area: knobs, signal, rule, runbook and scenarios."""

from __future__ import annotations

from rlpulse.stack.alerts import rl, task
from rlpulse.stack.alerts.kit import Area
from rlpulse.stack.alerts.step import StepAlert

STEP_ALERTS: dict[Area, tuple[StepAlert, ...]] = {"rl": rl.DEFS, "task": task.DEFS, "system": ()}
ALL_STEP: tuple[StepAlert, ...] = (*rl.DEFS, *task.DEFS)
