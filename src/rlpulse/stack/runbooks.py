"""docs/runbooks.md: one section per alert (what it means, what to do first, which panel to
open, what to try then).

Each alert's ``runbook_url`` points at ``#<alertname lowercased>``, the anchor GitHub and most
Markdown renderers give the ``## <AlertName>`` heading below.
"""

from __future__ import annotations

from rlpulse.stack import alerts as alert_defs
from rlpulse.stack import rules
from rlpulse.stack.alerts import meta
from rlpulse.stack.alerts.kit import Runbook
from rlpulse.stack.config import Config
from rlpulse.stack.output import header

# every alert carries its runbook (rlpulse.stack.alerts)
RUNBOOKS: dict[str, Runbook] = {
    **{name: rb for d in alert_defs.ALL for name, rb in d.runbooks.items()},
    **meta.RUNBOOKS,
}


def render(cfg: Config) -> dict[str, str]:
    """docs/runbooks.md for the alerts ``cfg`` generates."""
    seen: dict[str, list[str]] = {}
    for _, alert in rules.all_alerts(cfg):
        seen.setdefault(alert.name, []).append(alert.severity)
    lines = [
        "# Runbooks",
        "",
        header("runbooks.py", comment="<!--", end="-->").rstrip("\n"),
        "",
        "One section per alert rlpulse generates. Thresholds and windows are the defaults of",
        "[configuration.md](reference/configuration.md); dashboards are generated in "
        "`grafana/dashboards/`.",
        "",
    ]
    for alert in meta.ALERTS:  # the alerting pipeline's own (prometheus/rules/meta.yml)
        seen.setdefault(alert.name, []).append(alert.severity)
    for name, severities in seen.items():
        rb = RUNBOOKS[name]
        lines += [
            f"## {name}",
            "",
            f"Severity: {' / '.join(severities)}.",
            "",
            f"**What it means.** {rb.means}",
            "",
            f"**What to do first.** {rb.tries[0]}",
            "",
            f"**Panel to open.** {rb.panel}",
            "",
            *(["**Then.**", "", *(f"- {t}" for t in rb.tries[1:]), ""] if rb.tries[1:] else []),
        ]
    return {"docs/runbooks.md": "\n".join(lines)}
