"""prometheus.yml: scraping trainer exporters (static and file_sd), Prometheus and Alertmanager
themselves, rule files, Alertmanager, external labels and remote_write; rules/meta.yml and its
promtool test: the alerts on the alerting pipeline (rlpulse.stack.alerts.meta); federate.yml:
the job a global Prometheus adds to federate the recorded aggregates from leaves
(docs/remote-storage.md).

Exemplars on the rollout histograms are kept only when Prometheus runs with
``--enable-feature=exemplar-storage`` (a command-line flag, not part of this file).
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from rlpulse import catalog
from rlpulse.stack import rules, ruletests
from rlpulse.stack.alerts import meta
from rlpulse.stack.alerts.kit import Alert
from rlpulse.stack.config import Config, RemoteWrite
from rlpulse.stack.output import dump, header
from rlpulse.stack.promql import regex_alternatives

PATH = "prometheus/prometheus.yml"
META_RULE_FILE = "rules/meta.yml"  # relative to prometheus.yml
META_TESTS_PATH = "prometheus/tests/meta.yml"
FEDERATE_PATH = "prometheus/federate.yml"
# Raw series a store of aggregates keeps besides the recording rules: ALERTS (what fired) and the
# info series the dashboards' job/run/rank/node variables read (one per rank).
KEPT_RAW = ("ALERTS", catalog.get("rl_run_info").name)


def aggregate_names() -> tuple[str, ...]:
    """The series a central store of aggregates holds: every recording rule, plus KEPT_RAW."""
    return (*sorted(rules.recorded_names()), *KEPT_RAW)


def aggregates_regex() -> str:
    """A relabel ``regex`` (Prometheus anchors it) matching exactly aggregate_names()."""
    return "|".join(re.escape(n) for n in aggregate_names())


def _remote_write(rw: RemoteWrite) -> dict[str, Any]:
    out: dict[str, Any] = {"url": rw.url}
    if rw.name:
        out["name"] = rw.name
    out["remote_timeout"] = rw.remote_timeout
    if rw.headers:
        out["headers"] = dict(rw.headers)
    if rw.username:
        out["basic_auth"] = {"username": rw.username, "password_file": rw.password_file}
    if rw.bearer_token_file:
        out["authorization"] = {"type": "Bearer", "credentials_file": rw.bearer_token_file}
    if rw.send == "recorded":
        out["write_relabel_configs"] = [
            {"source_labels": ["__name__"], "regex": aggregates_regex(), "action": "keep"}
        ]
    queue: dict[str, Any] = {"batch_send_deadline": rw.batch_send_deadline}
    for key in ("capacity", "max_shards", "max_samples_per_send"):
        if getattr(rw, key):
            queue[key] = getattr(rw, key)
    out["queue_config"] = queue
    return out


def config(cfg: Config) -> dict[str, Any]:
    """prometheus.yml as data."""
    s = cfg.scrape
    sd: list[dict[str, Any]] = []
    if s.static_targets:
        sd.append({"static_configs": [{"targets": list(s.static_targets)}]})
    if s.file_sd:
        sd.append({"file_sd_configs": [{"files": list(s.file_sd), "refresh_interval": "30s"}]})
    job: dict[str, Any] = {
        "job_name": s.job_name,
        "scheme": s.scheme,
        "scrape_interval": s.interval,
        "scrape_timeout": s.timeout,
        "metrics_path": "/metrics",
    }
    tls = {k: getattr(s, k) for k in ("ca_file", "server_name", "cert_file", "key_file")}
    if any(tls.values()):
        job["tls_config"] = {k: v for k, v in tls.items() if v}
    if s.username:
        job["basic_auth"] = {"username": s.username, "password_file": s.password_file}
    for part in sd:
        job.update(part)
    glob: dict[str, Any] = {
        "scrape_interval": s.interval,
        "scrape_timeout": s.timeout,
        "evaluation_interval": s.evaluation_interval,
    }
    if cfg.external_labels:
        glob["external_labels"] = dict(cfg.external_labels)
    out: dict[str, Any] = {
        "global": glob,
        "rule_files": [f"rules/{area}.yml" for area in rules.AREAS] + [META_RULE_FILE],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": list(s.alertmanagers)}]}]},
        "scrape_configs": [job, *_self_jobs(cfg), *_pushgateway_jobs(cfg)],
    }
    if cfg.remote_write:
        out["remote_write"] = [_remote_write(rw) for rw in cfg.remote_write]
    return out


def _self_jobs(cfg: Config) -> list[dict[str, Any]]:
    """Prometheus (at its external URL, links.prometheus_url) and Alertmanager scraped like any
    target, for the meta alerts."""
    own = urllib.parse.urlsplit(cfg.links.prometheus_url)
    return [
        {
            "job_name": meta.PROMETHEUS_JOB,
            "scheme": own.scheme,
            "metrics_path": own.path.rstrip("/") + "/metrics",
            "static_configs": [{"targets": [own.netloc]}],
        },
        {
            "job_name": meta.ALERTMANAGER_JOB,
            "static_configs": [{"targets": list(cfg.scrape.alertmanagers)}],
        },
    ]


def _meta_alerts(cfg: Config) -> list[Alert]:
    """The alerts on the alerting pipeline (rlpulse.stack.alerts.meta), with runbook links and
    the system layer's owner labels (the infrastructure on-call runs the pipeline)."""
    owner = rules.owner_labels("system", cfg)
    return [
        Alert(
            **{
                **a.__dict__,
                "annotations": {"runbook_url": runbook_url(a.name, cfg)},
                "labels": owner,
            }
        )
        for a in meta.ALERTS
    ]


def runbook_url(name: str, cfg: Config) -> str:
    """The docs/runbooks.md section of alert ``name``."""
    return f"{cfg.links.runbook_url}#{rules.anchor(name)}"


def meta_rules(cfg: Config) -> dict[str, Any]:
    """prometheus/rules/meta.yml as data: one group, evaluated apart from rl/task/system."""
    return {
        "groups": [{"name": meta.GROUP, "rules": [a.rule("system") for a in _meta_alerts(cfg)]}]
    }


def meta_tests(cfg: Config) -> dict[str, Any]:
    """prometheus/tests/meta.yml as data: the promtool tests of the meta group."""
    alerts = {(a.name, a.severity): a for a in _meta_alerts(cfg)}
    return {
        "rule_files": [f"../{META_RULE_FILE}"],
        "evaluation_interval": ruletests.EVALUATION_INTERVAL,
        "tests": [ruletests.unit_test(scn, "system", alerts) for scn in meta.scenarios()],
    }


def _pushgateway_jobs(cfg: Config) -> list[dict[str, Any]]:
    """The job scraping the Pushgateways (none without any): ``honor_labels`` keeps the job,
    run_id and rank each run pushed, so the rules see pushed runs like scraped ones."""
    s = cfg.scrape
    if not s.pushgateways:
        return []
    return [
        {
            "job_name": f"{s.job_name}-pushgateway",
            "honor_labels": True,
            "scrape_interval": s.interval,
            "scrape_timeout": s.timeout,
            "static_configs": [{"targets": list(s.pushgateways)}],
        }
    ]


def federate_job(cfg: Config) -> dict[str, Any]:
    """The scrape job a global Prometheus adds to pull the aggregates from every leaf."""
    f = cfg.federation
    return {
        "job_name": f.job_name,
        "honor_labels": True,  # keep the leaf's job/instance/run_id and its external labels
        "metrics_path": "/federate",
        "scheme": f.scheme,
        "scrape_interval": f.interval,
        "scrape_timeout": f.timeout,
        "params": {"match[]": [f'{{__name__=~"{regex_alternatives(aggregate_names())}"}}']},
        "static_configs": [{"targets": list(f.leaves)}],
    }


def federate(cfg: Config) -> dict[str, Any]:
    """federate.yml as data: a scrape_configs fragment for the global server's prometheus.yml."""
    return {"scrape_configs": [federate_job(cfg)]}


HEADER = header(
    "prometheus.py", "Run with --enable-feature=exemplar-storage to keep rollout-id exemplars."
)


FEDERATE_HEADER = header(
    "prometheus.py",
    "Not loaded by the leaf: add this job to the scrape_configs of a global Prometheus that",
    "federates the recorded aggregates of every leaf (docs/remote-storage.md).",
)


META_HEADER = header("alerts/meta.py")


def render(cfg: Config) -> dict[str, str]:
    """Relative path -> text of prometheus.yml, federate.yml and the meta rules."""
    return {
        PATH: dump(config(cfg), HEADER),
        FEDERATE_PATH: dump(federate(cfg), FEDERATE_HEADER),
        f"prometheus/{META_RULE_FILE}": dump(meta_rules(cfg), META_HEADER),
    }


def render_tests(cfg: Config) -> dict[str, str]:
    """Relative path -> text of the meta rules' promtool test, when they fire as with the
    default config (the scenarios are written for it)."""
    rules_of = [[ruletests.firing_rule(a) for a in _meta_alerts(c)] for c in (cfg, Config())]
    if rules_of[0] != rules_of[1]:
        return {}
    return {META_TESTS_PATH: dump(meta_tests(cfg), META_HEADER)}
