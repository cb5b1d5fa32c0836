"""The one typed configuration of the generated stack: thresholds, windows, intervals, receivers.

Every number a generated rule, route or scrape config uses has a documented default here; an
alert's own knobs are declared with the alert (``rlpulse.stack.alerts``) and gathered under
``alerts`` (like a monitoring mixin's ``_config``). ``load(path)`` overrides the defaults from
YAML and names the offending key for a bad one; ``fast()`` compresses every interval and window
so a test or demo sees alerts within seconds (``rlpulse generate --fast``, ``rlpulse stack up
--fast``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

import yaml

from rlpulse import keys, safeyaml
from rlpulse.rollouts.server import VIEWER_URL
from rlpulse.stack import alerts as alert_defs
from rlpulse.stack.knobs import _DURATION_RE, section, setting
from rlpulse.stack.knobs import Duration as Duration
from rlpulse.stack.knobs import doc as doc
from rlpulse.stack.knobs import duration as duration
from rlpulse.stack.knobs import seconds as seconds

# a Kubernetes label as key=value: an optional DNS prefix/, a name, a value (may be empty)
_K8S_LABEL_RE = re.compile(
    r"^([a-z0-9.-]+/)?[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?=([A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?)?$"
)


class ConfigError(ValueError):
    """A bad key or value in a configuration file; the message names it."""


# ---- Prometheus and Alertmanager plumbing ----------------------------------------------------


@dataclass(frozen=True)
class Scrape:
    """How Prometheus finds and reads trainer exporters (prometheus.yml)."""

    job_name: str = setting("rlpulse", "Scrape job of the trainer exporters; alerts select it.")
    interval: Duration = setting(Duration("15s"), "Scrape interval.")
    timeout: Duration = setting(Duration("10s"), "Scrape timeout (at most the interval).")
    evaluation_interval: Duration = setting(Duration("15s"), "Rule evaluation interval.")
    scheme: Literal["http", "https"] = setting("http", "Scheme of the exporter endpoints.")
    ca_file: str = setting(
        "", "CA file that signed the exporters' certificates (https; empty: system CAs)."
    )
    server_name: str = setting("", "Name the exporter certificates are issued for (https).")
    cert_file: str = setting(
        "", "Client certificate for exporters that require one (mutual TLS, https)."
    )
    key_file: str = setting("", "Key of cert_file.")
    username: str = setting("", "Basic-auth user for exporters behind basic_auth_users.")
    password_file: str = setting(
        "", "File holding that user's password (never the password itself)."
    )
    static_targets: tuple[str, ...] = setting(
        ("127.0.0.1:9400",), "host:port exporters always scraped (rlpulse's default port)."
    )
    file_sd: tuple[str, ...] = setting(
        ("targets/*.json",),
        "file_sd target files (globs, relative to prometheus.yml) a launcher writes per run.",
    )
    alertmanagers: tuple[str, ...] = setting(("127.0.0.1:9093",), "Alertmanager host:port list.")
    pushgateways: tuple[str, ...] = setting(
        (),
        "Pushgateway host:port list, scraped with honor_labels by the job "
        "<job_name>-pushgateway (short runs push their final state there: "
        "RLPULSE_PUSHGATEWAY).",
    )


Pairs = tuple[tuple[str, str], ...]
"""A YAML mapping of names to string values (labels, headers), kept in order as (name, value)."""
UserKeys = tuple[tuple[str, keys.Target | None], ...]
"""The ``keys:`` section: logged key -> where it goes (``rlpulse.keys.user_map``), in order."""

_LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_HEADER_RE = re.compile(r"^[A-Za-z0-9-]+$")
# headers Prometheus sets itself (it refuses them in remote_write.headers) or that carry a secret
_RESERVED_HEADERS = frozenset(
    h.lower()
    for h in (
        "Authorization",
        "Host",
        "Content-Encoding",
        "Content-Type",
        "Content-Length",
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Www-Authenticate",
        "Accept-Encoding",
        "User-Agent",
        "X-Prometheus-Remote-Write-Version",
        "X-Prometheus-Remote-Read-Version",
    )
)


@dataclass(frozen=True)
class RemoteWrite:
    """One remote_write endpoint: a scalable store (VictoriaMetrics, Thanos Receive, Mimir)."""

    url: str = setting(
        "", "Write endpoint, e.g. http://vm:8428/api/v1/write (no credentials in the URL)."
    )
    name: str = setting(
        "", 'Name of the queue in Prometheus\' remote-write metrics (unique; "": hashed).'
    )
    send: Literal["all", "recorded"] = setting(
        "all",
        "'all': every series; 'recorded': only the recording rules, ALERTS and rl_run_info "
        "(a central store holding per-run/per-node aggregates).",
    )
    username: str = setting("", "Basic-auth user (with password_file).")
    password_file: str = setting("", "File holding the basic-auth password.")
    bearer_token_file: str = setting("", "File holding a bearer token (instead of basic auth).")
    headers: Pairs = setting(
        (), "Extra HTTP headers, e.g. {X-Scope-OrgID: team-a} for Mimir (no secrets: use files)."
    )
    remote_timeout: Duration = setting(Duration("30s"), "Timeout of one write request.")
    batch_send_deadline: Duration = setting(
        Duration("5s"), "Longest a sample waits for a full batch (the delay a store lags by)."
    )
    max_samples_per_send: int = setting(
        0, "Samples per request (0: Prometheus' default); raise it for fewer, larger requests."
    )
    capacity: int = setting(
        0, "Samples queued per shard (0: Prometheus' default); 3-10x the batch size."
    )
    max_shards: int = setting(
        0, "Most parallel senders (0: Prometheus' default); lower it to spare a small store."
    )


@dataclass(frozen=True)
class Federation:
    """The scrape job a global Prometheus adds to federate aggregates from leaves (federate.yml)."""

    job_name: str = setting("rlpulse-federate", "Job name on the global server.")
    leaves: tuple[str, ...] = setting(
        ("127.0.0.1:9090",),
        "host:port of each leaf Prometheus (give each its own external_labels).",
    )
    scheme: Literal["http", "https"] = setting("http", "Scheme of the leaves' /federate endpoint.")
    interval: Duration = setting(
        Duration("30s"), "Federation scrape interval (at least the leaves' evaluation interval)."
    )
    timeout: Duration = setting(Duration("20s"), "Federation scrape timeout.")


@dataclass(frozen=True)
class Routing:
    """Alertmanager grouping and repeat timings, and who owns the alerts."""

    group_wait: Duration = setting(
        Duration("30s"), "Wait before the first notification of a group."
    )
    group_interval: Duration = setting(Duration("5m"), "Wait before notifying changes in a group.")
    repeat_interval: Duration = setting(
        Duration("4h"), "Re-notify a still-firing alert after this."
    )
    teams: Pairs = setting(
        (("rl", "research"), ("task", "research"), ("system", "infra")),
        "The team owning each layer's alerts, set as their team label. The system layer's "
        "team is the infrastructure on-call: with receivers.pagerduty.infra_routing_key_file "
        "(or receivers.slack.infra_channel) set, every alert of that team pages it.",
    )
    cluster: str = setting(
        "",
        "cluster label set on every alert (empty: none). Leave it empty when "
        "external_labels sets cluster: Prometheus adds that to every alert it sends.",
    )


@dataclass(frozen=True)
class Watchdog:
    """The always-firing RLWatchdog alert as a dead man's switch."""

    heartbeat_url: str = setting(
        "",
        "URL Alertmanager posts the Watchdog to every minute (healthchecks.io ping URL, "
        "an Opsgenie or Better Stack heartbeat, a PagerDuty-side dead man's switch); that "
        "service alerts when the posts stop. Empty: the watchdog receiver posts nowhere. "
        "The URL (its token) is written into alertmanager.yml (docs/security.md). "
        "`rlpulse stack up` points it at its own heartbeat checker.",
    )
    interval: Duration = setting(Duration("1m"), "How often Alertmanager posts the Watchdog.")
    missing_after: Duration = setting(
        Duration("5m"),
        "The heartbeat checker of `rlpulse stack up` pages (straight to PagerDuty, not "
        "through Alertmanager) when no Watchdog came for this long.",
    )


@dataclass(frozen=True)
class PagerDuty:
    """The critical receiver: PagerDuty Events API v2."""

    url: str = setting("https://events.pagerduty.com/v2/enqueue", "Events API v2 endpoint.")
    routing_key_file: str = setting(
        "/etc/alertmanager/secrets/pagerduty_routing_key",
        "File holding the integration's routing key (never put the key itself in a config).",
    )
    send_resolved: bool = setting(True, "Send a resolve event when the alert clears.")
    infra_routing_key_file: str = setting(
        "",
        "File holding the routing key of the infrastructure on-call, paged for the alerts of "
        "routing.teams.system (GPUs, liveness, exporters); empty: one service pages for "
        "every team.",
    )


@dataclass(frozen=True)
class Slack:
    """A warning receiver: Slack incoming webhook."""

    api_url_file: str = setting(
        "/etc/alertmanager/secrets/slack_api_url", "File holding the Slack webhook URL."
    )
    channel: str = setting("#rl-training", "Channel to post to.")
    send_resolved: bool = setting(True, "Post when the alert clears.")
    infra_channel: str = setting(
        "",
        "Channel of the infrastructure on-call for the warnings of routing.teams.system "
        "(same webhook); empty: every team posts to channel.",
    )


@dataclass(frozen=True)
class Webhook:
    """A warning receiver: a generic webhook (Alertmanager's JSON payload)."""

    url: str = setting("http://127.0.0.1:9095/alerts", "Endpoint that receives the alerts.")
    send_resolved: bool = setting(True, "Send resolved alerts too.")


@dataclass(frozen=True)
class Receivers:
    """Where each severity goes: critical pages PagerDuty; warning goes to Slack or a webhook."""

    warning: Literal["slack", "webhook"] = setting("slack", "Receiver of severity=warning.")
    info: Literal["none", "slack", "webhook"] = setting(
        "none", "Receiver of severity=info ('none': only visible in Alertmanager and Grafana)."
    )
    pagerduty: PagerDuty = section(PagerDuty, "PagerDuty settings.")
    slack: Slack = section(Slack, "Slack settings.")
    webhook: Webhook = section(Webhook, "Webhook settings.")


@dataclass(frozen=True)
class Links:
    """URLs put into alert annotations and notifications."""

    grafana_url: str = setting(
        "http://localhost:3000",
        "Grafana base URL for dashboard links (also Grafana's root_url in compose).",
    )
    prometheus_url: str = setting(
        "http://localhost:9090",
        "Prometheus' external URL (--web.external-url in compose): the alerts' source links.",
    )
    alertmanager_url: str = setting(
        "http://localhost:9093",
        "Alertmanager's external URL (--web.external-url in compose): silence links in Slack "
        "and PagerDuty. Set these three to addresses on-call engineers can open.",
    )
    training_dashboard_uid: str = setting("rlpulse-training", "uid of the RL training dashboard.")
    system_dashboard_uid: str = setting("rlpulse-system", "uid of the RL system dashboard.")
    comparison_dashboard_uid: str = setting("rlpulse-comparison", "uid of the run comparison one.")
    runbook_url: str = setting(
        "https://github.com/rlpulse/rlpulse/blob/main/docs/runbooks.md",
        "Base URL of docs/runbooks.md; each alert links to its #anchor.",
    )
    rollouts_url: str = setting(
        VIEWER_URL,
        "Base URL of the rollout viewer (`rlpulse rollouts serve`, started by `rlpulse "
        "stack up`): the rollout links of pages, panels and exemplars open it.",
    )


@dataclass(frozen=True)
class Selectors:
    """Label matchers added to every rl_/rlpulse_ series a rule selects."""

    metrics: str = setting("", 'Extra matchers, e.g. cluster="a" (empty: none).')


@dataclass(frozen=True)
class Windows:
    """Shared PromQL windows."""

    rate: Duration = setting(Duration("5m"), "rate() and histogram-quantile window.")
    recent: Duration = setting(Duration("10m"), "Smoothing window for a series' current level.")
    zscore: Duration = setting(
        Duration("1h"), "Earlier window a z-score or drift compares against."
    )
    baseline: Duration = setting(Duration("6h"), "Lookback for a run's own peak/floor baseline.")
    resolution: Duration = setting(Duration("1m"), "Step of the subqueries behind baselines.")


@dataclass(frozen=True)
class Kubernetes:
    """prometheus-operator manifests and Grafana dashboard ConfigMaps (``--kubernetes``)."""

    name: str = setting("rlpulse", "Name (prefix) of every generated object.")
    namespace: str = setting(
        "monitoring", "Namespace of the PodMonitor, PrometheusRule and dashboard ConfigMaps."
    )
    labels: tuple[str, ...] = setting(
        ("release=kube-prometheus-stack",),
        "key=value labels on every object; kube-prometheus-stack selects PodMonitors and "
        "PrometheusRules by release=<its Helm release>.",
    )
    pod_selector: tuple[str, ...] = setting(
        ("app.kubernetes.io/component=rl-trainer",),
        "key=value labels that select the trainer pods.",
    )
    pod_namespaces: tuple[str, ...] = setting(
        (), "Namespaces the trainer pods run in (empty: any)."
    )
    port_name: str = setting(
        "rlpulse",
        "Container port name of the exporter; a pod with several exporters names them "
        "<port_name>-<local rank>.",
    )
    pod_target_labels: tuple[str, ...] = setting((), "Pod labels copied onto every scraped series.")
    tls_secret: str = setting(
        "rlpulse-scrape-tls",
        "Secret (key ca.crt) with the CA of the exporter certificates (https).",
    )
    basic_auth_secret: str = setting(
        "", "Secret (keys username, password) for exporters behind basic auth (empty: none)."
    )
    dashboard_label: str = setting(
        "grafana_dashboard=1", "key=value label the Grafana dashboard sidecar watches for."
    )
    dashboard_folder_annotation: str = setting(
        "grafana_folder",
        "Annotation the sidecar reads the Grafana folder from (its folderAnnotation).",
    )
    dashboard_folder: str = setting("rlpulse", "Grafana folder of the dashboards.")
    rollouts_claim: str = setting(
        "rlpulse-rollouts",
        "PersistentVolumeClaim (ReadWriteMany) holding the rollout stores: trainers mount it "
        "at $RLPULSE_DATA_DIR, the rollout viewer reads it.",
    )
    rollouts_storage: str = setting("10Gi", "Size requested for rollouts_claim.")
    viewer_image: str = setting(
        "python:3.11-slim-bookworm",
        "Image of the rollout viewer (rlpulse is installed at start if missing).",
    )


# ---- alerts -------------------------------------------------------------------------------------


# every alert brings its own knobs (rlpulse.stack.alerts), area by area
_Declared = dataclasses.make_dataclass(
    "_Declared",
    [(d.key, d.knobs, section(d.knobs, f"{', '.join(d.runbooks)}.")) for d in alert_defs.ALL],
    frozen=True,
)


@dataclass(frozen=True)
class Alerts(_Declared):  # type: ignore[misc, valid-type]
    """Per-alert settings; the key is the alert name in snake_case without the RL prefix."""


@dataclass(frozen=True)
class Config:
    """Everything ``rlpulse generate`` needs."""

    scrape: Scrape = section(Scrape, "Prometheus scraping.")
    routing: Routing = section(Routing, "Alertmanager timings.")
    receivers: Receivers = section(Receivers, "Notification receivers.")
    watchdog: Watchdog = section(Watchdog, "Dead man's switch of the alerting pipeline.")
    links: Links = section(Links, "Dashboard and runbook links.")
    selectors: Selectors = section(Selectors, "Series selection.")
    windows: Windows = section(Windows, "Shared PromQL windows.")
    kubernetes: Kubernetes = section(Kubernetes, "prometheus-operator manifests.")
    alerts: Alerts = section(Alerts, "Alert thresholds.")
    external_labels: Pairs = setting(
        (),
        "Labels this Prometheus adds to remote-written, federated and alerted series, "
        "e.g. {cluster: a, replica: prom-0} (needed by federation and HA dedup).",
    )
    remote_write: tuple[RemoteWrite, ...] = setting((), "Remote-write endpoints (none by default).")
    federation: Federation = section(Federation, "Federation of leaves into a global server.")
    keys: UserKeys = setting(
        (),
        "Your trainer's logged keys, searched before the framework tables: key: objective "
        "(the true objective), a catalog metric, {metric, labels, scale} or null "
        "(docs/replay.md).",
    )


# ---- YAML loading -------------------------------------------------------------------------------


def yaml_key(f: dataclasses.Field[Any]) -> str:
    """The YAML key of a dataclass field (``for_`` is spelled ``for``)."""
    return f.name.rstrip("_")


def _coerce(where: str, f: dataclasses.Field[Any], hint: Any, value: Any) -> Any:
    """``value`` checked against the type ``hint``; ConfigError naming ``where`` if it is bad."""
    if hint is Duration:
        if not isinstance(value, str) or not _DURATION_RE.match(value):
            raise ConfigError(f"{where}: expected a duration like 30s, 5m or 1h, got {value!r}")
        return Duration(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{where}: expected a whole number >= 0, got {value!r}")
        return value
    if hint == UserKeys:
        try:
            return tuple(keys.user_map(value, where).items())
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if hint == Pairs:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping of names to strings, got {value!r}")
        for k, v in value.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise ConfigError(f"{where}.{k}: expected a string, got {v!r}")
        return tuple(value.items())
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        if not math.isfinite(value):  # a NaN threshold would silently never fire
            raise ConfigError(f"{where}: expected a finite number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        choices = f.metadata.get("choices")
        if choices is not None and value not in choices:
            allowed = ", ".join(sorted(choices)) if len(choices) <= 12 else "see the catalog"
            raise ConfigError(f"{where}: {value!r} is not an allowed value ({allowed})")
        return value
    origin = get_origin(hint)
    if origin is Literal:
        if value not in get_args(hint):
            raise ConfigError(f"{where}: expected one of {list(get_args(hint))}, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        item: Any = get_args(hint)[0]
        if isinstance(item, type) and dataclasses.is_dataclass(item):  # a list of sections
            return tuple(_build(f"{where}[{i}]", item(), v) for i, v in enumerate(value))
        return tuple(_coerce(f"{where}[{i}]", f, item, v) for i, v in enumerate(value))
    raise TypeError(f"unsupported config type {hint!r} at {where}")


def _build(where: str, base: Any, data: Any) -> Any:
    """``base`` (a config dataclass) with the keys of ``data`` replaced, each one checked."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or 'top level'}: expected a mapping of keys, got {data!r}")
    known = {yaml_key(f): f for f in dataclasses.fields(base)}
    hints = get_type_hints(type(base))
    changes: dict[str, Any] = {}
    for key, value in data.items():
        sub = f"{where}.{key}" if where else str(key)
        f = known.get(key)
        if f is None:
            raise ConfigError(f"{sub}: unknown key (expected one of: {', '.join(sorted(known))})")
        current = getattr(base, f.name)
        if dataclasses.is_dataclass(current):
            changes[f.name] = _build(sub, current, value)
        else:
            changes[f.name] = _coerce(sub, f, hints[f.name], value)
    return dataclasses.replace(base, **changes)


def from_dict(
    data: Mapping[str, Any] | None, *, source: str = "config", base: Config | None = None
) -> Config:
    """``base`` (default: the defaults) overridden by nested plain data, e.g. parsed YAML."""
    try:
        cfg: Config = _build("", base or Config(), data or {})
        _check(cfg)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return cfg


def _check(cfg: Config) -> None:
    """Relations between values that each look fine alone."""
    s, w = cfg.scrape, cfg.windows
    for d in alert_defs.ALL:
        for problem in d.problems(getattr(cfg.alerts, d.key)):
            raise ConfigError(f"alerts.{d.key}.{problem}")
    if seconds(s.timeout) > seconds(s.interval):
        raise ConfigError(
            f"scrape.timeout: {s.timeout} is longer than scrape.interval {s.interval}"
        )
    if bool(s.username) != bool(s.password_file):
        raise ConfigError("scrape: username and password_file go together")
    if bool(s.cert_file) != bool(s.key_file):
        raise ConfigError("scrape: cert_file and key_file go together")
    tls = ("ca_file", "server_name", "cert_file")
    if s.scheme == "http" and any(getattr(s, key) for key in tls):
        raise ConfigError(f"scrape: {', '.join(tls)} need scheme https")
    for key in ("rate", "recent"):
        value = getattr(w, key)
        if seconds(value) < 2 * seconds(s.interval):
            raise ConfigError(
                f"windows.{key}: {value} holds fewer than two scrapes "
                f"(scrape.interval {s.interval})"
            )
    if seconds(w.resolution) > seconds(w.recent):
        raise ConfigError(f"windows.resolution: {w.resolution} is longer than windows.recent")
    k = cfg.kubernetes
    for key in ("labels", "pod_selector", "dashboard_label"):
        value = getattr(k, key)
        for item in (value,) if isinstance(value, str) else value:
            if not _K8S_LABEL_RE.match(item):
                raise ConfigError(f"kubernetes.{key}: {item!r} is not a key=value label")
    for name, _ in cfg.external_labels:
        if not _LABEL_RE.match(name) or name == "__name__":
            raise ConfigError(f"external_labels.{name}: not a label name")
    names = [rw.name for rw in cfg.remote_write if rw.name]
    for i, rw in enumerate(cfg.remote_write):
        _check_remote_write(f"remote_write[{i}]", rw)
        if rw.name and names.count(rw.name) > 1:
            raise ConfigError(f"remote_write[{i}].name: {rw.name!r} is used twice")
    _check_plumbing(cfg)
    _check_owners(cfg)
    fed = cfg.federation
    if seconds(fed.timeout) > seconds(fed.interval):
        raise ConfigError(
            f"federation.timeout: {fed.timeout} is longer than federation.interval {fed.interval}"
        )


def _check_remote_write(where: str, rw: RemoteWrite) -> None:
    """One endpoint: a URL without credentials, one auth method, secrets only from files."""
    if not re.match(r"^https?://[^/@\s]+(/\S*)?$", rw.url):
        raise ConfigError(
            f"{where}.url: expected http(s)://host[:port]/path without credentials, got "
            f"{'a URL with user info' if '@' in rw.url else repr(rw.url)}"
        )
    if bool(rw.username) != bool(rw.password_file):
        raise ConfigError(f"{where}: username and password_file go together")
    if rw.username and rw.bearer_token_file:
        raise ConfigError(f"{where}: basic auth and bearer_token_file exclude each other")
    for name, _ in rw.headers:
        if not _HEADER_RE.match(name):
            raise ConfigError(f"{where}.headers.{name}: not an HTTP header name")
        if name.lower() in _RESERVED_HEADERS:
            raise ConfigError(
                f"{where}.headers.{name}: set by Prometheus or a credential "
                "(use username/password_file or bearer_token_file)"
            )


# Values copied into PromQL, or into text Prometheus and Alertmanager run as Go templates.
_JOB_RE = re.compile(r"^[A-Za-z0-9_.:/-]+$")
_MATCHER = r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\\n]|\\.)*"\s*'
_MATCHERS_RE = re.compile(rf"^(?:{_MATCHER}(?:,{_MATCHER})*,?\s*)?$")
_URL_RE = re.compile(r"^https?://[^\s{}]+$")
_HOST_PORT_RE = re.compile(r"^(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$")
_HOST_PORTS = (
    ("scrape.static_targets", lambda c: c.scrape.static_targets),
    ("scrape.alertmanagers", lambda c: c.scrape.alertmanagers),
    ("scrape.pushgateways", lambda c: c.scrape.pushgateways),
)
_TEMPLATED = (
    ("receivers.slack.channel", lambda c: c.receivers.slack.channel),
    ("receivers.slack.infra_channel", lambda c: c.receivers.slack.infra_channel),
    ("links.training_dashboard_uid", lambda c: c.links.training_dashboard_uid),
    ("links.system_dashboard_uid", lambda c: c.links.system_dashboard_uid),
    ("links.comparison_dashboard_uid", lambda c: c.links.comparison_dashboard_uid),
)
_URLS = (
    ("links.grafana_url", lambda c: c.links.grafana_url),
    ("links.prometheus_url", lambda c: c.links.prometheus_url),
    ("links.alertmanager_url", lambda c: c.links.alertmanager_url),
    ("links.runbook_url", lambda c: c.links.runbook_url),
    ("links.rollouts_url", lambda c: c.links.rollouts_url),
    ("receivers.pagerduty.url", lambda c: c.receivers.pagerduty.url),
    ("receivers.webhook.url", lambda c: c.receivers.webhook.url),
)
_OPTIONAL_URLS = (("watchdog.heartbeat_url", lambda c: c.watchdog.heartbeat_url),)


def _check_plumbing(cfg: Config) -> None:
    """Settings that end up inside PromQL or Go templates: refused unless they are inert."""
    for where, job in (
        ("scrape.job_name", cfg.scrape.job_name),
        ("federation.job_name", cfg.federation.job_name),
    ):
        if not _JOB_RE.match(job):
            raise ConfigError(
                f"{where}: {_shown(job)} is not a job name (letters, digits and _.:/- only)"
            )
    if not _MATCHERS_RE.match(cfg.selectors.metrics) or "{{" in cfg.selectors.metrics:
        raise ConfigError(
            f"selectors.metrics: {_shown(cfg.selectors.metrics)} is not a comma-separated list "
            'of label matchers like cluster="a", env=~"prod|staging"'
        )
    for where, get in (*_URLS, *((w, g) for w, g in _OPTIONAL_URLS if g(cfg))):
        if not _URL_RE.match(get(cfg)):
            raise ConfigError(
                f"{where}: {_shown(get(cfg))} is not an http(s) URL without spaces or braces"
            )
    for where, get in _HOST_PORTS:
        for i, target in enumerate(get(cfg)):
            if not _HOST_PORT_RE.match(target):
                raise ConfigError(f"{where}[{i}]: {_shown(target)} is not a host:port")
    for where, get in _TEMPLATED:
        if "{{" in get(cfg) or "}}" in get(cfg):
            raise ConfigError(f"{where}: {_shown(get(cfg))}: template braces are not allowed")


def _check_owners(cfg: Config) -> None:
    """routing.teams names a team for each layer; the owner labels are plain label values."""
    r = cfg.routing
    layers = [layer for layer, _ in r.teams]
    if sorted(layers) != sorted(alert_defs.DEFS):
        raise ConfigError(
            f"routing.teams: expected one team for each layer ({', '.join(alert_defs.DEFS)}), "
            f"got {_shown(dict(r.teams))}"
        )
    named = [(f"routing.teams.{layer}", team) for layer, team in r.teams]
    for where, value in named + ([("routing.cluster", r.cluster)] if r.cluster else []):
        if not _JOB_RE.match(value):
            raise ConfigError(
                f"{where}: {_shown(value)} is not a name (letters, digits and _.:/- only)"
            )
    if r.cluster and "cluster" in dict(cfg.external_labels):
        raise ConfigError(
            "routing.cluster: external_labels sets cluster already (Prometheus adds it to every "
            "alert); set one of the two"
        )


def _shown(value: Any) -> str:
    """A value for an error message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def load(path: str | Path, *, base: Config | None = None) -> Config:
    """The defaults (or ``base``) overridden by the YAML file at ``path``."""
    p = Path(path)
    try:
        data = safeyaml.load(p.read_text(encoding="utf-8"))
    except safeyaml.LimitError as exc:
        raise ConfigError(f"{p}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text (byte {exc.start})") from None
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None
    return from_dict(data, source=str(p), base=base)


# ---- the fast preset ----------------------------------------------------------------------------

FAST_FACTOR = 60.0
"""``fast()`` divides every duration by this: an hour becomes a minute, ten minutes ten seconds."""
# How often the --fast local stack's Prometheus re-sends firing alerts (its default: 1m). Not
# divided like the windows: Alertmanager keeps an alert 4 re-sends long without one, and a
# restart of Prometheus takes as long in a demo as in production.
FAST_RESEND_S = 10.0
_MIN_INTERVAL = 1.0  # scrape/eval intervals and timeouts stay at least this many seconds


def scaled(cfg: Any, factor: float) -> Any:
    """``cfg`` with every Duration field divided by ``factor`` (intervals kept >= 1 s)."""
    hints = get_type_hints(type(cfg))
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            changes[f.name] = scaled(value, factor)
        elif hints[f.name] is Duration:
            secs = seconds(value) / factor
            if secs and f.name in ("interval", "timeout", "evaluation_interval"):
                secs = max(secs, _MIN_INTERVAL)
            changes[f.name] = duration(secs)
    return dataclasses.replace(cfg, **changes)


def fast(base: Config | None = None) -> Config:
    """Compressed intervals, windows and ``for`` durations so alerts fire within seconds."""
    cfg: Config = scaled(base or Config(), FAST_FACTOR)
    return cfg
