"""prometheus/alert_levels.yml: where each step alert fires, as data the runtime reads.

A trainer's exporter names where a failure began (``rlpulse.detect.lastgood``): the first logged
step of its step signal's latest excursion past the alert's first level. It must not import this
generator, so the generator writes each step alert's signal, direction and levels here; the
package ships the file for the default config (``rlpulse/alert_levels.yml``, kept equal to it by
``tests/stack/test_stack_generate.py``) and a run reads another with ``RLPULSE_RULES_CONFIG``.
"""

from __future__ import annotations

from typing import Any

from rlpulse.stack.alerts import STEP_ALERTS
from rlpulse.stack.config import Config
from rlpulse.stack.output import dump, header

PATH = "prometheus/alert_levels.yml"


def table(cfg: Config) -> dict[str, dict[str, Any]]:
    """Alert name -> its signal, direction, subject, unit and level per severity."""
    out: dict[str, dict[str, Any]] = {}
    for alerts in STEP_ALERTS.values():
        for a in alerts:
            knobs = getattr(cfg.alerts, a.key)
            if not knobs.enabled:
                continue
            out[a.name] = {
                "signal": a.signal,
                "worse": a.sig.worse,
                "subject": a.subject,
                "unit": a.sig.unit,
                **{sev: float(level) for sev, level in a.tiers(knobs)},
            }
    return out


def render(cfg: Config) -> dict[str, str]:
    """Relative path -> text of the levels file."""
    head = header(
        "levels.py",
        "Read by the exporter (rlpulse.detect.lastgood): start(rules_config=<this file>) or "
        "RLPULSE_RULES_CONFIG.",
    )
    return {PATH: dump({"alerts": table(cfg)}, head)}
