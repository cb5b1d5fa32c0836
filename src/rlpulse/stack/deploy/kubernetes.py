"""prometheus-operator manifests (``rlpulse generate --kubernetes``), from the same objects as the
Prometheus files: a PodMonitor that scrapes the trainer pods like prometheus.yml's job, a
PrometheusRule holding the groups of ``rlpulse.stack.rules``, and one ConfigMap per Grafana
dashboard for the Grafana dashboard sidecar (kube-prometheus-stack, the grafana Helm chart), and
the rollout viewer: a Deployment and Service reading the claim the trainers' rollout stores live on.

The exporter labels its own series with ``run_id``, ``rank``, ``local_rank`` and ``node``
(``catalog.IDENTITY_LABELS``, from ``RLPULSE_RUN_ID``, ``RANK``, ``LOCAL_RANK``,
``RLPULSE_NODE``), so the PodMonitor adds no identity label of its own: ``honorLabels`` keeps the
exporter's where a copied pod label has the same name, and the only relabelings keep the exporter
ports and set ``job`` to ``scrape.job_name`` (the operator's default job, ``<namespace>/<name>``,
would not match the alerts' ``up{job=...}``). The operator adds ``namespace``, ``pod`` and
``container``.
"""

from __future__ import annotations

import re
from typing import Any

from rlpulse.rollouts.server import VIEWER_PORT
from rlpulse.stack import dashboards, rules
from rlpulse.stack.config import Config
from rlpulse.stack.deploy import compose
from rlpulse.stack.generate import KUBERNETES_DIR as DIR
from rlpulse.stack.output import dump, header

MONITORING = "monitoring.coreos.com/v1"
HEADER = header("kubernetes.py", "Written by `rlpulse generate --kubernetes`.")
CONFIGMAP_LIMIT = 1024 * 1024  # bytes of data a ConfigMap may hold
PART_OF = {"app.kubernetes.io/part-of": "rlpulse"}


def pairs(items: tuple[str, ...] | str) -> dict[str, str]:
    """``("a=b", "c=d")`` as ``{"a": "b", "c": "d"}`` (the Config spells labels ``key=value``)."""
    out = {}
    for item in (items,) if isinstance(items, str) else items:
        key, _, value = item.partition("=")
        out[key] = value
    return out


def port_regex(cfg: Config) -> str:
    """Container port names the PodMonitor keeps: ``rlpulse`` and ``rlpulse-<local rank>``."""
    return f"{re.escape(cfg.kubernetes.port_name)}(-[0-9]+)?"


def _metadata(cfg: Config, name: str, extra: dict[str, str] | None = None) -> dict[str, Any]:
    k = cfg.kubernetes
    return {
        "name": name,
        "namespace": k.namespace,
        "labels": {**PART_OF, **pairs(k.labels), **(extra or {})},
    }


def _endpoint(cfg: Config) -> dict[str, Any]:
    s, k = cfg.scrape, cfg.kubernetes
    ep: dict[str, Any] = {
        "path": "/metrics",
        "scheme": s.scheme,
        "interval": s.interval,
        "scrapeTimeout": s.timeout,
        "honorLabels": True,
    }
    if s.scheme == "https":
        tls: dict[str, Any] = {"ca": {"secret": {"name": k.tls_secret, "key": "ca.crt"}}}
        if cfg.scrape.server_name:
            tls["serverName"] = cfg.scrape.server_name
        ep["tlsConfig"] = tls
    if k.basic_auth_secret:
        ep["basicAuth"] = {
            "username": {"name": k.basic_auth_secret, "key": "username"},
            "password": {"name": k.basic_auth_secret, "key": "password"},
        }
    ep["relabelings"] = [
        {
            "action": "keep",
            "sourceLabels": ["__meta_kubernetes_pod_container_port_name"],
            "regex": port_regex(cfg),
        },
        {"action": "replace", "targetLabel": "job", "replacement": s.job_name},
    ]
    return ep


def pod_monitor(cfg: Config) -> dict[str, Any]:
    """The PodMonitor: prometheus.yml's scrape job for pods labelled ``pod_selector``."""
    k = cfg.kubernetes
    ns: dict[str, Any] = (
        {"matchNames": list(k.pod_namespaces)} if k.pod_namespaces else {"any": True}
    )
    spec: dict[str, Any] = {
        "selector": {"matchLabels": pairs(k.pod_selector)},
        "namespaceSelector": ns,
    }
    if k.pod_target_labels:
        spec["podTargetLabels"] = list(k.pod_target_labels)
    spec["podMetricsEndpoints"] = [_endpoint(cfg)]
    return {
        "apiVersion": MONITORING,
        "kind": "PodMonitor",
        "metadata": _metadata(cfg, k.name),
        "spec": spec,
    }


def rule_groups(cfg: Config) -> list[dict[str, Any]]:
    """The rule groups of prometheus/rules/*.yml, as they are there (no ``interval``: the
    operator's Prometheus evaluates them at its ``evaluationInterval``)."""
    return [g.as_dict() for g in rules.groups(cfg)]


def prometheus_rule(cfg: Config) -> dict[str, Any]:
    """The PrometheusRule: every recording and alerting rule, from ``rules.groups``."""
    return {
        "apiVersion": MONITORING,
        "kind": "PrometheusRule",
        "metadata": _metadata(cfg, cfg.kubernetes.name),
        "spec": {"groups": rule_groups(cfg)},
    }


def dashboard_config_maps(cfg: Config) -> dict[str, dict[str, Any]]:
    """One ConfigMap per dashboard (the sidecar's advice), keyed by the dashboard's file name;
    each holds the exact text of grafana/dashboards/<name>."""
    k = cfg.kubernetes
    texts = {
        path.rsplit("/", 1)[1]: text
        for path, text in dashboards.render(cfg).items()
        if path.startswith(f"{dashboards.DASHBOARD_DIR}/")
    }
    out = {}
    for name, text in texts.items():
        meta = _metadata(
            cfg, f"{k.name}-dashboard-{name.removesuffix('.json')}", pairs(k.dashboard_label)
        )
        meta["annotations"] = {k.dashboard_folder_annotation: k.dashboard_folder}
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {name: text}}
        size = len(text.encode())
        if size > CONFIGMAP_LIMIT:
            raise ValueError(
                f"{name}: {size} bytes, over the {CONFIGMAP_LIMIT}-byte ConfigMap limit"
            )
        out[name] = cm
    return out


def rollout_viewer(cfg: Config) -> dict[str, dict[str, Any]]:
    """The rollout viewer (``rlpulse rollouts serve``) over the claim the trainers write their
    rollout stores to: the claim, a Deployment reading it, and its Service."""
    k = cfg.kubernetes
    name = f"{k.name}-rollouts"
    selector = {"app.kubernetes.io/name": name}
    meta = _metadata(cfg, name)
    meta["labels"] = {**meta["labels"], **selector}
    data = compose.ROLLOUTS_DATA
    serve = f"rlpulse rollouts serve --addr 0.0.0.0 --port {VIEWER_PORT} --data-dir {data}"
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {**_metadata(cfg, k.rollouts_claim)},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": k.rollouts_storage}},
        },
    }
    container = {
        "name": "viewer",
        "image": k.viewer_image,
        "command": compose.install_and_run(serve),
        "ports": [{"name": "http", "containerPort": VIEWER_PORT}],
        "readinessProbe": {"httpGet": {"path": "/-/ready", "port": "http"}},
        # writable: SQLite readers of a WAL store write its -shm index (the viewer's
        # connections are query_only)
        "volumeMounts": [{"name": "rollouts", "mountPath": data}],
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "rollouts",
                            "persistentVolumeClaim": {"claimName": k.rollouts_claim},
                        }
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": VIEWER_PORT, "targetPort": "http"}],
        },
    }
    return {
        f"{DIR}/rollouts-claim.yaml": claim,
        f"{DIR}/rollouts-deployment.yaml": deployment,
        f"{DIR}/rollouts-service.yaml": service,
    }


def objects(cfg: Config) -> dict[str, dict[str, Any]]:
    """Relative path -> the Kubernetes object written there."""
    files = {
        f"{DIR}/podmonitor.yaml": pod_monitor(cfg),
        f"{DIR}/prometheusrule.yaml": prometheus_rule(cfg),
        **rollout_viewer(cfg),
    }
    for name, cm in dashboard_config_maps(cfg).items():
        files[f"{DIR}/dashboard-{name.removesuffix('.json')}.yaml"] = cm
    return files


def render(cfg: Config) -> dict[str, str]:
    """Relative path -> text of every manifest, plus a kustomization.yaml listing them."""
    objs = objects(cfg)
    files = {path: dump(obj, HEADER) for path, obj in objs.items()}
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [path.removeprefix(f"{DIR}/") for path in objs],
    }
    files[f"{DIR}/kustomization.yaml"] = dump(kustomization, HEADER)
    return files
