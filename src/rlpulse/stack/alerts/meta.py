"""Alerts on the alerting pipeline itself: an always-firing Watchdog (a dead man's switch) and
Prometheus and Alertmanager watching their own scrape and notifications.

They live in their own rule file (``prometheus/rules/meta.yml``, group ``rlpulse-meta``), apart
from the rl/task/system groups: ``rlpulse replay`` evaluates those on a training log, where an
alert that always fires or one about Alertmanager means nothing. ``stack.prometheus`` writes the
file, the self-scrape jobs and its promtool test; ``stack.alertmanager`` routes the Watchdog.
They have no config section: their knobs are the shipped ones.
"""

from __future__ import annotations

from collections.abc import Iterator

from rlpulse.stack.alerts import kit
from rlpulse.stack.alerts.inputs import raw
from rlpulse.stack.config import Config
from rlpulse.stack.knobs import Duration
from rlpulse.stack.query import Query

GROUP = "rlpulse-meta"
WATCHDOG = "RLWatchdog"
NOTIFICATIONS_FAILING = "RLNotificationsFailing"
ALERTS_UNDELIVERED = "RLAlertsUndelivered"
SELF_SCRAPE_DOWN = "RLMonitoringDown"
PROMETHEUS_JOB = "prometheus"
ALERTMANAGER_JOB = "alertmanager"
WINDOW = Duration("5m")
FOR = Duration("10m")

_PIPELINE = "Alertmanager's UI (Status, Alerts) and its log; Prometheus' Alerts and Targets pages."
_AM = {"job": ALERTMANAGER_JOB, "instance": "localhost:9093"}
_PROM = {"job": PROMETHEUS_JOB, "instance": "localhost:9090"}
_PD = {**_AM, "integration": "pagerduty"}


def _increased(*counters: str, by: str = "job, instance") -> str:
    """Any of the pipeline's failure ``counters`` went up in the last ``WINDOW``."""
    total = " + ".join(f"increase({c}[{WINDOW}])" for c in counters)
    return f"sum by ({by}) ({total}) > 0"


def _inputs(
    failed: str, errors: str, dropped: str, alertmanager_up: str, prometheus_up: str
) -> tuple[tuple[str, str], ...]:
    """The pipeline's input series (Alertmanager's failed PagerDuty notifications,
    Prometheus' notification errors and drops, both self-scrapes) with these values."""
    return (
        (raw("alertmanager_notifications_failed_total", _PD), failed),
        (raw("prometheus_notifications_errors_total", _PROM), errors),
        (raw("prometheus_notifications_dropped_total", _PROM), dropped),
        (raw("up", _AM), alertmanager_up),
        (raw("up", _PROM), prometheus_up),
    )


def _watcher(
    name: str,
    severity: kit.Severity,
    expr: str,
    summary: str,
    description: str,
    means: str,
    tries: tuple[str, ...],
    tests: tuple[kit.Scenario, ...] = (),
) -> kit.ThresholdAlert:
    """A pipeline alert held for ``FOR``; its runbook points at the pipeline's own pages."""
    return kit.ThresholdAlert(
        name=name,
        settings={"for_": FOR},
        severity=severity,
        expr=expr,
        summary=summary,
        description=description,
        runbook=kit.Runbook(means, _PIPELINE, tries),
        tests=tests,
    )


DEFS: tuple[kit.AlertDef, ...] = (
    kit.ThresholdAlert(
        name=WATCHDOG,
        settings={"for_": "0s"},
        severity="info",
        expr="vector(1)",
        summary="Always firing: proves that Prometheus evaluates rules and Alertmanager delivers "
        "them.",
        description="The Watchdog fires all the time; its notifications stopping means alerting "
        "is broken.",
        runbook=kit.Runbook(
            "Always firing, on purpose: Alertmanager posts it every watchdog.interval to "
            "watchdog.heartbeat_url, a dead man's switch that alerts when the posts stop. "
            "`rlpulse stack up` points it at its own heartbeat checker, which pages PagerDuty "
            "directly (RLWatchdogMissing, not through Alertmanager) after watchdog.missing_after "
            "without a post; elsewhere use a healthchecks.io check, an Opsgenie or Better Stack "
            "heartbeat (`rlpulse generate` warns while the URL is empty). Silence from the "
            "Watchdog means Prometheus stopped evaluating rules, cannot reach Alertmanager (which "
            "RLAlertsUndelivered, delivered by that same Alertmanager, cannot tell you), or "
            "Alertmanager stopped delivering.",
            _PIPELINE,
            (
                "First, on an RLWatchdogMissing page: open Prometheus' Alerts page (is RLWatchdog "
                "firing?) and Alertmanager's Status page; whichever does not answer or lists no "
                "Watchdog is the broken link. Restart it; the page resolves with the next post.",
                "Set watchdog.heartbeat_url to the service's ping URL, with a grace period of a "
                "few intervals there.",
                "Never silence it; if its heartbeats stop, check Prometheus and Alertmanager "
                "first.",
            ),
        ),
        tests=(
            kit.Scenario(
                "Watchdog fires from the first evaluation on, with nothing as input.",
                (),
                (
                    kit.Check(WATCHDOG, "1m", (kit.Expect("info", {}, 1),)),
                    kit.Check(WATCHDOG, "3h", (kit.Expect("info", {}, 1),)),
                ),
            ),
        ),
    ),
    _watcher(
        NOTIFICATIONS_FAILING,
        "critical",
        _increased("alertmanager_notifications_failed_total", by="job, instance, integration"),
        summary="Alertmanager fails to deliver notifications.",
        description="Alertmanager {{ $labels.instance }} failed {{ $value | humanize }} "
        f"{{{{ $labels.integration }}}} notifications in {WINDOW}: pages and messages of that "
        "integration are lost.",
        means="Alertmanager's notifications to an integration (PagerDuty, Slack, webhook) fail: "
        "the alerts still fire but nobody hears of them there.",
        tries=(
            "Read Alertmanager's log for the integration's error (a wrong routing key or "
            "webhook URL, a network policy, the receiver's rate limit).",
            "Check the routing-key and webhook files mounted under secrets/.",
        ),
        tests=(
            kit.Scenario(
                "PagerDuty notifications fail once a minute from minute 10; Prometheus drops "
                "alerts; Alertmanager is down from minute 10.",
                _inputs(
                    failed="0x10 1+1x30",
                    errors="0x10 1+1x30",
                    dropped="0x40",
                    alertmanager_up="1x10 0x30",
                    prometheus_up="1x40",
                ),
                (
                    kit.Check(NOTIFICATIONS_FAILING, "5m"),
                    kit.Check(NOTIFICATIONS_FAILING, "30m", (kit.Expect("critical", _PD, 5),)),
                    kit.Check(ALERTS_UNDELIVERED, "30m", (kit.Expect("critical", _PROM, 5),)),
                    kit.Check(SELF_SCRAPE_DOWN, "30m", (kit.Expect("warning", _AM, 0),)),
                ),
            ),
        ),
    ),
    _watcher(
        ALERTS_UNDELIVERED,
        "critical",
        _increased(
            "prometheus_notifications_errors_total", "prometheus_notifications_dropped_total"
        ),
        summary="Prometheus cannot hand its alerts to Alertmanager.",
        description="Prometheus {{ $labels.instance }} failed or dropped {{ $value | humanize }} "
        f"alert notifications in {WINDOW}.",
        means="Prometheus fails to send alerts to Alertmanager or drops them from its queue.",
        tries=(
            "Check that Alertmanager runs and that alerting.alertmanagers in prometheus.yml "
            "points at it.",
        ),
    ),
    _watcher(
        SELF_SCRAPE_DOWN,
        "warning",
        f'up{{job=~"{PROMETHEUS_JOB}|{ALERTMANAGER_JOB}"}} == 0',
        summary="Prometheus cannot scrape itself or Alertmanager.",
        description="The {{ $labels.job }} target {{ $labels.instance }} is down "
        "(up = {{ $value | humanize }}).",
        means="Prometheus cannot scrape its own or Alertmanager's metrics, so the two alerts "
        "above go blind.",
        tries=("Check the process and the address in the prometheus/alertmanager scrape jobs.",),
    ),
)
ALERTS: tuple[kit.Alert, ...] = tuple(a for d in DEFS for a in d.rules(Query(Config()), d.knobs()))
RUNBOOKS: dict[str, kit.Runbook] = {d.name: d.runbook for d in DEFS}


def scenarios() -> Iterator[kit.Scenario]:
    """promtool scenarios: the Watchdog always fires; failures fire their alert; a healthy
    pipeline raises nothing else (last)."""
    for d in DEFS:
        yield from d.scenarios(d.knobs())
    yield kit.Scenario(
        "Healthy pipeline, 3 hours: both self-scrapes up, no failed notification.",
        _inputs("0x180", "0x180", "0x180", alertmanager_up="1x180", prometheus_up="1x180"),
        tuple(
            kit.Check(name, at)
            for name in (NOTIFICATIONS_FAILING, ALERTS_UNDELIVERED, SELF_SCRAPE_DOWN)
            for at in ("1h", "2h59m")
        ),
    )
