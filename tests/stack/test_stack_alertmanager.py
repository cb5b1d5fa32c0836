"""Generated Alertmanager config: amtool checks and routes, and a real Alertmanager on 127.0.0.1.

The real-process tests post alerts to ``prometheus-alertmanager`` (Debian package) running the
generated config, with PagerDuty and Slack stood in for by HTTP servers on 127.0.0.1: a critical
alert reaches the Events API v2 endpoint with the routing key read from its file, and the
inhibitions silence what they should.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.stackutil import Sink, api, free_port, server
from rlpulse.offline import stackrun
from rlpulse.stack import config, rules
from rlpulse.stack.alerts import gpu, liveness, meta, system
from rlpulse.stack.deploy import alertmanager, prometheus

AMTOOL = shutil.which("amtool")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def _write(tmp: Path, cfg: config.Config) -> Path:
    for rel, text in alertmanager.render(cfg).items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(text)
    return tmp / alertmanager.PATH


def _amtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert AMTOOL, "amtool (Debian package prometheus-alertmanager) is required"
    return subprocess.run([AMTOOL, *args], capture_output=True, text=True, timeout=60)


VARIANTS = {
    "default": {},
    "webhook": {"receivers": {"warning": "webhook", "info": "webhook"}},
    "slack-info": {"receivers": {"info": "slack"}},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_amtool_check_config(tmp_path: Path, variant: str) -> None:
    path = _write(tmp_path, config.from_dict(VARIANTS[variant]))
    run = _amtool("check-config", str(path))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 templates" in run.stdout


ROUTES = [
    ("default", "critical", "pagerduty"),
    ("default", "warning", "slack"),
    ("default", "info", "null"),
    ("webhook", "warning", "webhook"),
    ("webhook", "info", "webhook"),
    ("slack-info", "info", "slack"),
    # the root is a catch-all: a severity no route knows is still delivered
    ("default", "page", "slack"),
    ("webhook", "page", "webhook"),
]


OWNED = {
    "receivers": {
        "pagerduty": {"infra_routing_key_file": "/etc/alertmanager/secrets/pd_infra"},
        "slack": {"infra_channel": "#gpu-oncall"},
    }
}


# the task layer handed to the infrastructure team: its alerts page the infra service too
TASK_TO_INFRA = {
    **OWNED,
    "routing": {"teams": {"rl": "research", "task": "platform", "system": "platform"}},
}


@pytest.mark.parametrize(
    ("cfg", "layer", "severity", "receiver"),
    [
        (OWNED, "system", "critical", "pagerduty-infra"),
        (OWNED, "rl", "critical", "pagerduty"),
        (OWNED, "task", "critical", "pagerduty"),
        (OWNED, "system", "warning", "slack-infra"),
        (OWNED, "rl", "warning", "slack"),
        (TASK_TO_INFRA, "task", "critical", "pagerduty-infra"),
        (TASK_TO_INFRA, "rl", "critical", "pagerduty"),
        ({}, "system", "critical", "pagerduty"),  # one service pages every layer by default
    ],
)
def test_amtool_routes_by_ownership(
    tmp_path: Path, cfg: dict[str, Any], layer: str, severity: str, receiver: str
) -> None:
    """Routes follow the team label the rules put on each layer's alerts."""
    parsed = config.from_dict(cfg)
    path = _write(tmp_path, parsed)
    assert _amtool("check-config", str(path)).returncode == 0
    run = _amtool(
        "config",
        "routes",
        "test",
        f"--config.file={path}",
        f"severity={severity}",
        f"layer={layer}",
        f"team={rules.owner_labels(layer, parsed)['team']}",
        "alertname=RLGPUIdle",
        "run_id=r1",
    )
    assert run.stdout.strip() == receiver, run.stdout + run.stderr
    doc = yaml.safe_load(path.read_text())
    infra = [r for r in doc["receivers"] if r["name"] == "pagerduty-infra"]
    if cfg:
        key_file = infra[0]["pagerduty_configs"][0]["routing_key_file"]
        assert key_file == "/etc/alertmanager/secrets/pd_infra"
        slack = next(r for r in doc["receivers"] if r["name"] == "slack-infra")
        assert slack["slack_configs"][0]["channel"] == "#gpu-oncall"
    else:
        assert not infra


def test_amtool_routes_the_watchdog_to_its_own_receiver(tmp_path: Path) -> None:
    path = _write(tmp_path, config.Config())
    run = _amtool(
        "config",
        "routes",
        "test",
        f"--config.file={path}",
        f"alertname={meta.WATCHDOG}",
        "severity=info",
    )
    assert run.stdout.strip() == alertmanager.WATCHDOG_RECEIVER, run.stdout + run.stderr


def test_prometheus_watches_itself_and_alertmanager() -> None:
    cfg = config.Config()
    doc = prometheus.config(cfg)
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    assert jobs[meta.ALERTMANAGER_JOB]["static_configs"][0]["targets"] == list(
        cfg.scrape.alertmanagers
    )
    assert jobs[meta.PROMETHEUS_JOB]["static_configs"][0]["targets"] == ["localhost:9090"]
    moved = config.from_dict({"links": {"prometheus_url": "https://prom.example:8443/p/"}})
    own = next(
        j for j in prometheus.config(moved)["scrape_configs"] if j["job_name"] == "prometheus"
    )
    assert own["static_configs"][0]["targets"] == ["prom.example:8443"]
    assert own["scheme"] == "https" and own["metrics_path"] == "/p/metrics"
    assert prometheus.META_RULE_FILE in doc["rule_files"]
    (group,) = prometheus.meta_rules(cfg)["groups"]
    names = {r["alert"] for r in group["rules"]}
    assert {meta.WATCHDOG, meta.NOTIFICATIONS_FAILING, meta.SELF_SCRAPE_DOWN} <= names
    watchdog = next(r for r in group["rules"] if r["alert"] == meta.WATCHDOG)
    assert watchdog["expr"] == "vector(1)" and "for" not in watchdog
    # apart from the rl/task/system groups that `rlpulse replay` evaluates on a training log
    assert not names & {a.name for _, a in rules.all_alerts(cfg)}


def test_meta_alerts_pass_their_promtool_tests(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is required"
    files = {**prometheus.render(config.Config()), **prometheus.render_tests(config.Config())}
    for rel in (f"prometheus/{prometheus.META_RULE_FILE}", prometheus.META_TESTS_PATH):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(files[rel])
    run = subprocess.run(
        [promtool, "test", "rules", str(tmp_path / prometheus.META_TESTS_PATH)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize(("variant", "severity", "receiver"), ROUTES)
def test_amtool_routes_each_severity(
    tmp_path: Path, variant: str, severity: str, receiver: str
) -> None:
    path = _write(tmp_path, config.from_dict(VARIANTS[variant]))
    run = _amtool(
        "config",
        "routes",
        "test",
        f"--config.file={path}",
        f"--verify.receivers={receiver}",
        f"severity={severity}",
        "alertname=RLEntropyCollapse",
        "run_id=r1",
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip() == receiver


def test_no_secret_in_the_file_and_routing_by_config(tmp_path: Path) -> None:
    cfg = config.from_dict(
        {"receivers": {"pagerduty": {"routing_key_file": "/run/secrets/pd", "url": "http://x/"}}}
    )
    doc = yaml.safe_load(_write(tmp_path, cfg).read_text())
    pd = next(r for r in doc["receivers"] if r["name"] == "pagerduty")["pagerduty_configs"][0]
    assert pd["routing_key_file"] == "/run/secrets/pd" and pd["url"] == "http://x/"
    assert "routing_key" not in pd and "service_key" not in pd
    slack = next(r for r in doc["receivers"] if r["name"] == "slack")["slack_configs"][0]
    assert "api_url" not in slack and slack["api_url_file"]
    assert doc["route"]["group_by"] == ["alertname", "run_id"]


def test_inhibit_rules_cover_severity_target_down_and_stall() -> None:
    inhibit = alertmanager.config(config.Config())["inhibit_rules"]
    by_source = {tuple(r["source_matchers"]): r for r in inhibit}
    sev = by_source[('severity="critical"',)]
    assert sev["equal"] == ["alertname", "run_id"]
    down = [r for r in inhibit if r["source_matchers"] == [f'alertname="{liveness.TARGET_DOWN}"']]
    assert {tuple(r["equal"]) for r in down} == {("job", "instance", "run_id"), ("run_id",)}
    run_level = next(r for r in down if r["equal"] == ["run_id"])["target_matchers"][0]
    for _, alert in rules.all_alerts(config.Config()):
        assert (alert.name in run_level) == (alert.scope == "run"), alert.name


# ---- a real Alertmanager ---------------------------------------------------------------------


Stack = tuple[str, Sink, Sink, Sink]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """A real Alertmanager with the generated config; PagerDuty, Slack and the Watchdog's
    heartbeat service as local sinks."""
    assert ALERTMANAGER, "prometheus-alertmanager (Debian package) is required"
    pagerduty, slack, heartbeat = Sink(), Sink(), Sink()
    (tmp_path / "pd_key").write_text("test-routing-key-0123456789abcdef\n")
    (tmp_path / "slack_url").write_text(slack.url)
    cfg = config.from_dict(
        {
            "routing": {"group_wait": "100ms", "group_interval": "1s"},
            "receivers": {
                "pagerduty": {"url": pagerduty.url, "routing_key_file": str(tmp_path / "pd_key")},
                "slack": {"api_url_file": str(tmp_path / "slack_url")},
            },
            "watchdog": {"heartbeat_url": heartbeat.url},
        }
    )
    path = _write(tmp_path, cfg)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        ALERTMANAGER,
        f"--config.file={path}",
        f"--storage.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    try:
        with server(argv, f"{url}/-/ready"):
            yield url, pagerduty, slack, heartbeat
    finally:
        pagerduty.shutdown()
        slack.shutdown()
        heartbeat.shutdown()


def _alert(name: str, severity: str, **labels: str) -> dict[str, Any]:
    return {
        "labels": {"alertname": name, "severity": severity, "layer": "rl", **labels},
        "annotations": {
            "summary": f"{name} summary",
            "description": f"{name} of run {labels.get('run_id')}",
            "runbook_url": f"https://example.test/docs/runbooks.md#{name.lower()}",
            "dashboard_url": f"http://grafana.test/d/x?var-run_id={labels.get('run_id')}",
            "rollouts_url": ROLLOUTS,
            "run_info": RUN_INFO,
        },
    }


ROLLOUTS = "http://127.0.0.1:9096/view?run=r1&step_min=40&order=best&limit=20"
RUN_INFO = "model=qwen2.5-0.5b git_sha=1a2b3c4 framework=trl owner=alice"


TARGET = {"job": "rlpulse", "instance": "127.0.0.1:9400", "run_id": "r1", "rank": "0"}


def test_critical_pages_pagerduty_with_the_key_from_its_file(
    stack: Stack,
) -> None:
    url, pagerduty, slack, _ = stack
    api(
        f"{url}/api/v2/alerts",
        [_alert("RLEntropyCollapse", "critical", **TARGET, node="n7", team="research")],
    )
    (event,) = pagerduty.wait(1)
    assert event["routing_key"] == "test-routing-key-0123456789abcdef"
    assert event["event_action"] == "trigger" and event["dedup_key"]
    payload = event["payload"]
    assert payload["severity"] == "critical"
    # the one alert's description (value, baseline, step) is the summary
    assert payload["summary"] == "RLEntropyCollapse (run r1): RLEntropyCollapse of run r1"
    assert payload["source"] == "n7"  # the node, not "rlpulse" for every alert
    details = payload["custom_details"]
    assert details["rollouts"] == ROLLOUTS and details["node"] == "n7"
    assert (
        "/#/silences/new?filter=%7B" in details["silence"]
        and "run_id%3D%22r1%22" in (details["silence"])
    )
    assert details["run_id"] == "r1" and details["run"] == RUN_INFO
    assert details["team"] == "research"
    assert details["runbook"].endswith("#rlentropycollapse")
    # pinned around the alert's start: the baseline window (6h) before and after it, in ms
    base, _, span = details["dashboard"].partition("&from=")
    start, _, end = span.partition("&to=")
    assert base == "http://grafana.test/d/x?var-run_id=r1"
    assert int(end) - int(start) == 2 * 6 * 3600 * 1000
    assert "RLEntropyCollapse of run r1" in details["description"]
    assert {link["text"] for link in event["links"]} == {"Dashboard", "Runbook"}
    assert not slack.bodies, "a critical alert does not go to Slack"


def test_warning_posts_to_slack(stack: Stack) -> None:
    url, pagerduty, slack, _ = stack
    api(f"{url}/api/v2/alerts", [_alert("RLUpdateKLHigh", "warning", **TARGET)])
    (msg,) = slack.wait(1)
    attachment = msg["attachments"][0]
    assert attachment["title"] == "[FIRING:1] RLUpdateKLHigh - run r1"
    assert "RLUpdateKLHigh of run r1" in attachment["text"]
    assert attachment["text"].startswith(f"Run: {RUN_INFO}\n")
    assert "#rlupdateklhigh" in attachment["text"]
    assert f"<{ROLLOUTS}|Rollouts>" in attachment["text"]
    assert "/#/silences/new?filter=%7B" in attachment["text"]
    assert not pagerduty.bodies


def test_slack_messages_are_capped(stack: Stack) -> None:
    """Seven alerts of one group: five listed, each description cut, and a silence link."""
    url, _, slack, _ = stack
    alerts = []
    for rank in range(7):
        alert = _alert("RLGPUIdle", "warning", **{**TARGET, "rank": str(rank)})
        alert["annotations"]["description"] = "x" * 2000
        alerts.append(alert)
    api(f"{url}/api/v2/alerts", alerts)
    (msg,) = slack.wait(1)
    text = msg["attachments"][0]["text"]
    assert text.count("*warning*") == alertmanager.SLACK_ALERTS
    assert "(first 5 of 7 alerts)" in text
    assert "x" * alertmanager.SLACK_DESCRIPTION_CHARS + "…" in text
    assert len(text) < 4000  # 14,000 characters of descriptions were sent
    assert "Silence these alerts" in text


Key = tuple[str, str, str]


def _states(url: str, suppressed: Iterable[Key] = ()) -> dict[Key, str]:
    """Each alert's state, read once every alert in ``suppressed`` reads suppressed:
    Alertmanager's inhibitor learns of a new source alert asynchronously, so a read right
    after the post can miss an inhibition (seen under a loaded suite)."""

    def read() -> dict[Key, str]:
        return {
            (a["labels"]["alertname"], a["labels"]["severity"], a["labels"]["run_id"]): a["status"][
                "state"
            ]
            for a in api(f"{url}/api/v2/alerts")
        }

    wanted, deadline = set(suppressed), time.monotonic() + 15
    states = read()
    while time.monotonic() < deadline and any(states.get(k) != "suppressed" for k in wanted):
        time.sleep(0.2)
        states = read()
    return states  # the test's assertion names what did not settle


def test_inhibitions(stack: Stack) -> None:
    url, _, _, _ = stack
    other = {**TARGET, "run_id": "r2", "instance": "127.0.0.1:9401"}
    run2 = {"job": "rlpulse", "run_id": "r2"}
    api(
        f"{url}/api/v2/alerts",
        [
            # critical silences the warning of the same alert and run, not of another run
            _alert("RLKLReferenceHigh", "critical", **TARGET),
            _alert("RLKLReferenceHigh", "warning", **TARGET),
            _alert("RLKLReferenceHigh", "warning", **other),
            # a down target silences its other alerts and its run's run-level alerts
            _alert(liveness.TARGET_DOWN, "critical", **other),
            _alert("RLEntropyCollapse", "critical", **other),
            _alert(system.THROUGHPUT_DROP, "warning", **run2, throughput="rl_train_steps"),
            # ...not those of the run that took its port
            _alert("RLEntropyCollapse", "critical", **{**other, "run_id": "r4"}),
            # a warning silences the info of the same alert and run
            _alert("RLExporterDroppedValues", "warning", **TARGET),
            _alert("RLExporterDroppedValues", "info", **TARGET),
            # a stalled run silences its GPU-idle alert
            _alert(liveness.STALLED, "critical", **TARGET),
            _alert(gpu.IDLE, "warning", **TARGET, gpu="0"),
        ],
    )
    expected = {
        ("RLKLReferenceHigh", "critical", "r1"): "active",
        ("RLKLReferenceHigh", "warning", "r1"): "suppressed",
        ("RLKLReferenceHigh", "warning", "r2"): "suppressed",  # by the target-down of r2
        (liveness.TARGET_DOWN, "critical", "r2"): "active",
        ("RLEntropyCollapse", "critical", "r2"): "suppressed",
        ("RLEntropyCollapse", "critical", "r4"): "active",
        (system.THROUGHPUT_DROP, "warning", "r2"): "suppressed",
        (liveness.STALLED, "critical", "r1"): "active",
        (gpu.IDLE, "warning", "r1"): "suppressed",
        ("RLExporterDroppedValues", "warning", "r1"): "active",
        ("RLExporterDroppedValues", "info", "r1"): "suppressed",
    }
    states = _states(url, [k for k, v in expected.items() if v == "suppressed"])
    assert states == expected


def test_critical_does_not_silence_other_runs_warnings(stack: Stack) -> None:
    url, _, _, _ = stack
    other = {**TARGET, "run_id": "r3"}
    api(
        f"{url}/api/v2/alerts",
        [
            _alert("RLTruncationHigh", "critical", **TARGET),
            _alert("RLTruncationHigh", "warning", **TARGET),  # the inhibitor has read r1's
            _alert("RLTruncationHigh", "warning", **other),
        ],
    )
    states = _states(url, [("RLTruncationHigh", "warning", "r1")])
    assert states[("RLTruncationHigh", "warning", "r3")] == "active"


def test_one_root_cause_opens_one_incident(stack: Stack) -> None:
    """Cause-based inhibition: NaN losses hold back every other training alert of the run,
    reward hacking the length and truncation alerts it drives, a reward that lost its gain the
    frozen-stretch alert that follows it (a 0/1 reward gone to 0 pages the loss first); another
    run keeps its pages."""
    url, _, _, _ = stack
    nan_run = {**TARGET, "run_id": "r5"}
    long_run = {**TARGET, "run_id": "r6"}
    other = {**TARGET, "run_id": "r7"}
    lost_run = {**TARGET, "run_id": "r8"}
    api(
        f"{url}/api/v2/alerts",
        [
            _alert("RLNonFiniteLoss", "critical", **nan_run, metric="rl_loss"),
            _alert("RLResponseLengthExplosion", "critical", **nan_run),
            _alert("RLGradNormSpike", "warning", **nan_run),
            _alert("RLResponseLengthExplosion", "critical", **long_run),
            _alert("RLTruncationHigh", "critical", **long_run),
            _alert("RLRewardHacking", "critical", **long_run),
            _alert("RLTruncationHigh", "critical", **other),
            _alert("RLRewardCollapse", "critical", **lost_run, series="episode_return"),
            _alert("RLRewardSignalLost", "critical", **lost_run, series="episode_return"),
            _alert("RLRewardSignalLost", "critical", **other, series="episode_return"),
        ],
    )
    expected = {
        ("RLNonFiniteLoss", "critical", "r5"): "active",
        ("RLResponseLengthExplosion", "critical", "r5"): "suppressed",
        ("RLGradNormSpike", "warning", "r5"): "suppressed",
        ("RLRewardHacking", "critical", "r6"): "active",
        ("RLResponseLengthExplosion", "critical", "r6"): "suppressed",
        ("RLTruncationHigh", "critical", "r6"): "suppressed",
        ("RLTruncationHigh", "critical", "r7"): "active",
        ("RLRewardCollapse", "critical", "r8"): "active",
        ("RLRewardSignalLost", "critical", "r8"): "suppressed",
        ("RLRewardSignalLost", "critical", "r7"): "active",
    }
    settled = _states(url, [k for k, v in expected.items() if v == "suppressed"])
    states = {k: v for k, v in settled.items() if k[2] in ("r5", "r6", "r7", "r8")}
    assert states == expected


def test_the_watchdog_pings_its_heartbeat_url(stack: Stack) -> None:
    """The always-firing Watchdog is posted to the heartbeat service (which alerts when the
    posts stop), every repeat_interval, and pages nobody."""
    url, pagerduty, slack, heartbeat = stack
    watchdog = _alert(meta.WATCHDOG, "info", layer="system", team="infra")
    api(f"{url}/api/v2/alerts", [watchdog])
    (ping,) = heartbeat.wait(1)
    assert ping["status"] == "firing" and ping["receiver"] == alertmanager.WATCHDOG_RECEIVER
    assert [a["labels"]["alertname"] for a in ping["alerts"]] == [meta.WATCHDOG]
    route = alertmanager.config(config.Config())["route"]["routes"][0]
    assert route["repeat_interval"] == "1m" and route["receiver"] == alertmanager.WATCHDOG_RECEIVER
    assert not pagerduty.bodies and not slack.bodies
    hook = next(
        r
        for r in alertmanager.config(config.Config())["receivers"]
        if r["name"] == alertmanager.WATCHDOG_RECEIVER
    )
    assert "webhook_configs" not in hook, "no heartbeat URL configured: posts nowhere"


def test_stack_up_is_loud_about_a_placeholder_pagerduty_key(tmp_path: Path) -> None:
    opts = stackrun.StackOptions(dir=tmp_path)
    stackrun.write_files(opts, stackrun.stack_config(opts))
    assert "placeholder" in stackrun.placeholder_key_warning(opts)
    assert "nobody is paged" in stackrun.placeholder_key_warning(opts)
    real = dataclasses.replace(opts, pagerduty_url="https://events.pagerduty.com/v2/enqueue")
    assert "will reject every page" in stackrun.placeholder_key_warning(real)
    key = tmp_path / "key"
    key.write_text("0123456789abcdef0123456789abcdef\n")
    assert stackrun.placeholder_key_warning(dataclasses.replace(real, pagerduty_key_file=key)) == ""


def test_a_resolve_says_whether_the_run_ended_or_the_condition_cleared(stack: Stack) -> None:
    """An RL alert that resolves after its run ended (its run_end annotation holds the outcome)
    says so; one whose condition cleared says that; neither reads as the other."""
    url, pagerduty, _, _ = stack
    ended = _alert("RLKLReferenceHigh", "critical", **TARGET)
    ended["annotations"]["run_end"] = "finished"
    cleared = _alert("RLEntropyCollapse", "critical", **{**TARGET, "run_id": "r2"})
    api(f"{url}/api/v2/alerts", [ended, cleared])
    pagerduty.wait(2)
    past = "2020-01-01T00:00:00Z"
    api(f"{url}/api/v2/alerts", [{**a, "endsAt": past} for a in (ended, cleared)])
    events = pagerduty.wait(4)
    resolves = {e["payload"]["custom_details"]["run_id"]: e for e in events[2:]}
    assert {e["event_action"] for e in resolves.values()} == {"resolve"}
    text = resolves["r1"]["payload"]["custom_details"]["description"]
    assert text.startswith("resolved because the run ended (finished) while this alert still")
    assert "condition cleared" not in text
    other = resolves["r2"]["payload"]["custom_details"]["description"]
    assert other.startswith("resolved: the condition cleared.")
