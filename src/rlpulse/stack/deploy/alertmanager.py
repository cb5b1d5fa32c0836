"""alertmanager.yml and its notification templates.

critical -> PagerDuty Events API v2 (the routing key read from ``routing_key_file``), warning ->
Slack (``api_url_file``) or a generic webhook, info -> nobody by default. Routing follows
ownership, the ``team`` label every alert carries (``routing.teams``): with
``receivers.pagerduty.infra_routing_key_file`` (and ``receivers.slack.infra_channel``) set, the
alerts of the system layer's team go to the infrastructure on-call, the others to the research
on-call (the default receivers); an alert no route matches goes to the warning receiver (the
root is a catch-all, never a receiver that drops it). The always-firing Watchdog goes to its own
receiver, which posts it to ``watchdog.heartbeat_url`` every minute when that is set.
Alerts group by ``alertname, run_id``. Inhibitions: a critical alert silences the warning and
info of the same alert and run, a warning its info; a down target silences the other alerts of
that target (and the run-level alerts of its run); a stalled run silences its throughput and
GPU-idle alerts; a paging cause its consequences (``_cause_rules``).

PagerDuty events name the node (or cluster, instance, job) as ``source``, carry the alert's
description (value, baseline, step) as their summary and the run's metadata (model, git sha,
framework, owner: the ``run_info`` annotation) in their details; Slack messages list at most
``SLACK_ALERTS`` alerts, each description cut at ``SLACK_DESCRIPTION_CHARS`` characters, with
dashboard, runbook and rollout links and a link that opens a silence for the group.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlpulse.stack import alerts as alert_defs
from rlpulse.stack import rules
from rlpulse.stack.alerts import NONFINITE, gpu, liveness, meta, system
from rlpulse.stack.config import Config
from rlpulse.stack.knobs import seconds
from rlpulse.stack.output import dump, header

PATH = "alertmanager/alertmanager.yml"
TEMPLATES = "alertmanager/templates/rlpulse.tmpl"
NULL_RECEIVER = "null"
PAGERDUTY = "pagerduty"
WATCHDOG_RECEIVER = "watchdog"
INFRA = "infra"  # the receivers of the system layer's team, when configured
STALL_SILENCES = (system.THROUGHPUT_DROP, gpu.IDLE)

# Alerts listed in one Slack message, and the characters kept of each description.
SLACK_ALERTS = 5
SLACK_DESCRIPTION_CHARS = 400

# PagerDuty accepts critical|error|warning|info; an unknown label value becomes "error".
_TEMPLATES = """\
TEMPLATE_HEADER{{ define "rlpulse.title" -}}
[{{ .Status | toUpper }}{{ if eq .Status "firing" }}:{{ .Alerts.Firing | len }}{{ end }}] \
{{ .CommonLabels.alertname }} - run {{ .CommonLabels.run_id }}
{{- end }}

{{ define "rlpulse.dashboard" -}}
{{ .Annotations.dashboard_url }}&from={{ (.StartsAt.Add -BEFORE_NS).UnixMilli }}\
&to={{ (.StartsAt.Add AFTER_NS).UnixMilli }}
{{- end }}

{{ define "rlpulse.group_dashboard" -}}
{{ with index .Alerts 0 }}{{ template "rlpulse.dashboard" . }}{{ end }}
{{- end }}

{{ define "rlpulse.ended" -}}
{{ if eq .Status "resolved" }}{{ with .Annotations.run_end }}resolved because the run ended \
({{ . }}) while this alert still fired: the failure was there at its end. \
{{ else }}resolved: the condition cleared. {{ end }}{{ end }}
{{- end }}

{{ define "rlpulse.links" -}}
<{{ template "rlpulse.dashboard" . }}|Dashboard> · <{{ .Annotations.runbook_url }}|Runbook>\
{{ with .Annotations.rollouts_url }} · <{{ . }}|Rollouts>{{ end }}
{{- end }}

{{ define "rlpulse.silence" -}}
{{ .ExternalURL }}/#/silences/new?filter=%7B\
{{ range $i, $p := .CommonLabels.SortedPairs }}{{ if $i }}%2C{{ end }}\
{{ $p.Name }}%3D%22{{ $p.Value | urlquery }}%22{{ end }}%7D
{{- end }}

{{ define "rlpulse.text" -}}
{{ with .CommonAnnotations.run_info }}Run: {{ . }}
{{ end }}{{ range $i, $a := .Alerts }}{{ if lt $i MAX_ALERTS }}\
{{ $d := $a.Annotations.description }}*{{ $a.Labels.severity }}* \
{{ template "rlpulse.ended" $a }}\
{{ if gt (len $d) MAX_CHARS }}{{ reReplaceAll "(?s)^(.{0,MAX_CHARS}).*$" "$1" $d }}…\
{{ else }}{{ $d }}{{ end }}
{{ with $a.Annotations.last_good }}{{ . }}
{{ end }}{{ template "rlpulse.links" $a }}
{{ end }}{{ end }}\
{{ if gt (len .Alerts) MAX_ALERTS }}(first MAX_ALERTS of {{ len .Alerts }} alerts)
{{ end }}<{{ template "rlpulse.silence" . }}|Silence these alerts>
{{- end }}

{{ define "rlpulse.pagerduty.severity" -}}
{{ if eq .CommonLabels.severity "critical" }}critical\
{{ else if eq .CommonLabels.severity "warning" }}warning\
{{ else if eq .CommonLabels.severity "info" }}info\
{{ else }}error{{ end }}
{{- end }}

{{ define "rlpulse.pagerduty.source" -}}
{{ with .CommonLabels.node }}{{ . }}{{ else }}{{ with .CommonLabels.cluster }}{{ . }}\
{{ else }}{{ with .CommonLabels.instance }}{{ . }}{{ else }}{{ .CommonLabels.job }}\
{{ end }}{{ end }}{{ end }}
{{- end }}

{{ define "rlpulse.pagerduty.description" -}}
{{ .CommonLabels.alertname }} (run {{ .CommonLabels.run_id }}): \
{{ if eq (len .Alerts.Firing) 1 }}{{ (index .Alerts.Firing 0).Annotations.description }}\
{{ else if and (eq (len .Alerts.Firing) 0) (eq (len .Alerts.Resolved) 1) }}\
{{ with index .Alerts.Resolved 0 }}{{ template "rlpulse.ended" . }}{{ .Annotations.description }}\
{{ end }}{{ else }}{{ .CommonAnnotations.summary }}{{ end }}
{{- end }}

{{ define "rlpulse.pagerduty.descriptions" -}}
{{ range .Alerts.Firing }}{{ .Annotations.description }}
{{ end }}{{ range .Alerts.Resolved }}{{ template "rlpulse.ended" . }}{{ .Annotations.description }}
{{ end }}
{{- end }}
""".replace("TEMPLATE_HEADER", header("alertmanager.py", comment="{{/*", end="*/}}"))
_TEMPLATES = _TEMPLATES.replace("MAX_ALERTS", str(SLACK_ALERTS)).replace(
    "MAX_CHARS", str(SLACK_DESCRIPTION_CHARS)
)


def _warning_receiver(cfg: Config, name: str, channel: str = "") -> dict[str, Any]:
    r = cfg.receivers
    if name == "slack":
        return {
            "name": f"slack-{INFRA}" if channel else "slack",
            "slack_configs": [
                {
                    "api_url_file": r.slack.api_url_file,
                    "channel": channel or r.slack.channel,
                    "send_resolved": r.slack.send_resolved,
                    "title": '{{ template "rlpulse.title" . }}',
                    "title_link": '{{ template "rlpulse.group_dashboard" . }}',
                    "text": '{{ template "rlpulse.text" . }}',
                }
            ],
        }
    return {
        "name": "webhook",
        "webhook_configs": [{"url": r.webhook.url, "send_resolved": r.webhook.send_resolved}],
    }


def _pagerduty(cfg: Config, key_file: str = "") -> dict[str, Any]:
    pd = cfg.receivers.pagerduty
    return {
        "name": f"{PAGERDUTY}-{INFRA}" if key_file else PAGERDUTY,
        "pagerduty_configs": [
            {
                "routing_key_file": key_file or pd.routing_key_file,
                "url": pd.url,
                "send_resolved": pd.send_resolved,
                "client": "rlpulse",
                "client_url": '{{ template "rlpulse.group_dashboard" . }}',
                "source": '{{ template "rlpulse.pagerduty.source" . }}',
                "severity": '{{ template "rlpulse.pagerduty.severity" . }}',
                "description": '{{ template "rlpulse.pagerduty.description" . }}',
                "class": "{{ .CommonLabels.layer }}",
                "component": "{{ .CommonLabels.run_id }}",
                "group": "{{ .CommonLabels.job }}",
                "details": {
                    "run_id": "{{ .CommonLabels.run_id }}",
                    "run": "{{ .CommonAnnotations.run_info }}",
                    "alertname": "{{ .CommonLabels.alertname }}",
                    "team": "{{ .CommonLabels.team }}",
                    "cluster": "{{ .CommonLabels.cluster }}",
                    "node": "{{ .CommonLabels.node }}",
                    "summary": "{{ .CommonAnnotations.summary }}",
                    "description": '{{ template "rlpulse.pagerduty.descriptions" . }}',
                    "dashboard": '{{ template "rlpulse.group_dashboard" . }}',
                    "runbook": "{{ .CommonAnnotations.runbook_url }}",
                    "rollouts": "{{ .CommonAnnotations.rollouts_url }}",
                    "last_good": "{{ .CommonAnnotations.last_good }}",
                    "labels": "{{ range .CommonLabels.SortedPairs }}{{ .Name }}={{ .Value }} "
                    "{{ end }}",
                    "silence": '{{ template "rlpulse.silence" . }}',
                },
                "links": [
                    {"href": '{{ template "rlpulse.group_dashboard" . }}', "text": "Dashboard"},
                    {"href": "{{ .CommonAnnotations.runbook_url }}", "text": "Runbook"},
                ],
            }
        ],
    }


def _inhibit_rules(cfg: Config) -> list[dict[str, Any]]:
    alerts = rules.all_alerts(cfg)
    run_scoped = sorted({a.name for _, a in alerts if a.scope == "run"})
    down = f'alertname="{liveness.TARGET_DOWN}"'
    out: list[dict[str, Any]] = [
        {
            "source_matchers": ['severity="critical"'],
            "target_matchers": ['severity=~"warning|info"'],
            "equal": ["alertname", "run_id"],
        },
        {
            "source_matchers": ['severity="warning"'],
            "target_matchers": ['severity="info"'],
            "equal": ["alertname", "run_id"],
        },
        {
            "source_matchers": [down],
            "target_matchers": [f'alertname!="{liveness.TARGET_DOWN}"'],
            # the dead run's: a run that took its port is another run
            "equal": ["job", "instance", "run_id"],
        },
    ]
    if run_scoped:
        out.append(
            {
                "source_matchers": [down],
                "target_matchers": [f'alertname=~"{"|".join(run_scoped)}"'],
                "equal": ["run_id"],
            }
        )
    out.append(
        {
            "source_matchers": [f'alertname="{liveness.STALLED}"'],
            "target_matchers": [f'alertname=~"{"|".join(STALL_SILENCES)}"'],
            "equal": ["run_id"],
        }
    )
    return out + _cause_rules(alerts)


def _cause_rules(alerts: Sequence[tuple[str, Any]]) -> list[dict[str, Any]]:
    """One root cause, one incident: a paging cause holds back its consequences on its run
    (``rlpulse.stack.alerts.CAUSES``); non-finite values hold back every other RL/task alert."""
    names = {a.name for _, a in alerts}
    training = sorted({a.name for area, a in alerts if area in ("rl", "task")} - {NONFINITE})
    causes = {NONFINITE: tuple(training), **alert_defs.CAUSES}
    return [
        {
            "source_matchers": [f'alertname="{cause}"', 'severity="critical"'],
            "target_matchers": [f'alertname=~"{"|".join(sorted(set(effects) & names))}"'],
            "equal": ["run_id"],
        }
        for cause, effects in causes.items()
        if cause in names and set(effects) & names
    ]


def _infra_routes(cfg: Config) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Routes and receivers of the infrastructure on-call: the alerts of the system layer's
    team page its own PagerDuty service (and post to its Slack channel) when the config names
    them; the other teams' alerts stay with the research on-call of the default receivers."""
    r = cfg.receivers
    team = f'team="{dict(cfg.routing.teams)["system"]}"'
    routes, receivers = [], []
    if r.pagerduty.infra_routing_key_file:
        receivers.append(_pagerduty(cfg, r.pagerduty.infra_routing_key_file))
        routes.append({"severity": "critical", "receiver": f"{PAGERDUTY}-{INFRA}"})
    if r.slack.infra_channel and r.warning == "slack":
        receivers.append(_warning_receiver(cfg, "slack", r.slack.infra_channel))
        routes.append({"severity": "warning", "receiver": f"slack-{INFRA}"})
    return [
        {
            "matchers": [team, f'severity="{route["severity"]}"'],
            "receiver": route["receiver"],
        }
        for route in routes
    ], receivers


def _watchdog(cfg: Config) -> dict[str, Any]:
    """The Watchdog's receiver: a webhook to the heartbeat URL (a ping a minute, never a
    resolve), or no integration where none is configured."""
    url = cfg.watchdog.heartbeat_url
    hook = {"webhook_configs": [{"url": url, "send_resolved": False}]} if url else {}
    return {"name": WATCHDOG_RECEIVER, **hook}


def config(cfg: Config) -> dict[str, Any]:
    """alertmanager.yml as data."""
    r = cfg.receivers
    infra_routes, infra_receivers = _infra_routes(cfg)
    receivers = [
        {"name": NULL_RECEIVER},
        _watchdog(cfg),
        _pagerduty(cfg),
        _warning_receiver(cfg, r.warning),
        *infra_receivers,
    ]
    if r.info not in ("none", r.warning):
        receivers.append(_warning_receiver(cfg, r.info))
    routing = cfg.routing
    return {
        "global": {"resolve_timeout": "5m"},
        "templates": ["templates/*.tmpl"],
        "route": {
            # catch-all: an alert no route matches (an unexpected severity) is still seen
            "receiver": r.warning,
            "group_by": ["alertname", "run_id"],
            "group_wait": routing.group_wait,
            "group_interval": routing.group_interval,
            "repeat_interval": routing.repeat_interval,
            "routes": [
                {
                    # always firing (stack.alerts.meta): the heartbeat of a dead man's switch
                    "matchers": [f'alertname="{meta.WATCHDOG}"'],
                    "receiver": WATCHDOG_RECEIVER,
                    "group_by": ["alertname"],
                    "group_interval": str(cfg.watchdog.interval),
                    "repeat_interval": str(cfg.watchdog.interval),
                },
                *infra_routes,
                {"matchers": ['severity="critical"'], "receiver": PAGERDUTY},
                {"matchers": ['severity="warning"'], "receiver": r.warning},
                {
                    "matchers": ['severity="info"'],
                    "receiver": NULL_RECEIVER if r.info == "none" else r.info,
                },
            ],
        },
        "inhibit_rules": _inhibit_rules(cfg),
        "receivers": receivers,
    }


HEADER = header("alertmanager.py")


def render(cfg: Config) -> dict[str, str]:
    """Relative path -> text of alertmanager.yml and its templates."""
    return {PATH: dump(config(cfg), HEADER), TEMPLATES: templates(cfg)}


def templates(cfg: Config) -> str:
    """The notification templates: dashboard links pinned from the baseline window before an
    alert's start to as long after it (Grafana's from/to in epoch ms), so a page opened hours
    later still shows when the failure began."""
    span = f"{int(seconds(cfg.windows.baseline) * 1e9)}"
    return _TEMPLATES.replace("BEFORE_NS", span).replace("AFTER_NS", span)
