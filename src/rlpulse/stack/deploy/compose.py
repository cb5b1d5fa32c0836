"""docker-compose.yml: Prometheus, Alertmanager, Grafana, the rollout viewer and the demo trainer,
on the host network.

Every service shares the host's network, so the generated configuration works unchanged: the
Prometheus config scrapes ``127.0.0.1:9400`` (the demo's and rlpulse's default port, or a trainer
running on the host) and alerts ``127.0.0.1:9093``, exactly as ``rlpulse stack up`` does with
local binaries; the demo writes its rollouts into the ``rollouts-data`` volume, which the viewer
reads on 127.0.0.1:9096, where the rollout links point. Secrets never enter the
repository: the receivers' key/URL files are read from ``./secrets/`` (git-ignored), and the
Grafana admin password from the environment.
"""

from __future__ import annotations

import posixpath
from typing import Any

from rlpulse.rollouts.server import VIEWER_PORT
from rlpulse.stack.config import Config
from rlpulse.stack.output import dump, header

PROMETHEUS_IMAGE = "prom/prometheus:v2.53.4"
ALERTMANAGER_IMAGE = "prom/alertmanager:v0.27.0"
GRAFANA_IMAGE = "grafana/grafana:11.6.0"  # the schema grafana-foundation-sdk 11.6 generates
PYTHON_IMAGE = "python:3.11-slim-bookworm"

PROMETHEUS_URL = "http://127.0.0.1:9090"
GRAFANA_DASHBOARDS = "/var/lib/grafana/dashboards"
SECRETS_DIR = "./secrets"
# what the demo service installs: rlpulse itself (never the project the file was generated in);
# RLPULSE_PIP_SPEC overrides it at `docker compose up` time (a fork, a branch, a release)
RLPULSE_PIP_SPEC = "rlpulse @ git+https://github.com/rlpulse/rlpulse"
ROLLOUTS_DATA = "/var/lib/rlpulse"  # the rollout stores, shared by trainers and the viewer


def _secret_mounts(config: Config) -> list[str]:
    """``./secrets`` mounted read-only wherever alertmanager.yml expects a key or URL file."""
    receivers = config.receivers
    pd = receivers.pagerduty
    files = [pd.routing_key_file, pd.infra_routing_key_file, receivers.slack.api_url_file]
    dirs = sorted({posixpath.dirname(f) for f in files if f})
    return [f"{SECRETS_DIR}:{d}:ro" for d in dirs]


def install_and_run(command: str) -> list[str]:
    """A shell command line that installs rlpulse (``RLPULSE_PIP_SPEC`` overrides what) unless
    the image has it, then runs ``command``."""
    return [
        "sh",
        "-c",
        f"command -v rlpulse >/dev/null || pip install --no-cache-dir "
        f'"${{RLPULSE_PIP_SPEC:-{RLPULSE_PIP_SPEC}}}" && exec {command}',
    ]


def services(config: Config) -> dict[str, Any]:
    """The compose file as data."""
    return {
        "services": {
            "prometheus": {
                "image": PROMETHEUS_IMAGE,
                "network_mode": "host",
                "restart": "unless-stopped",
                "command": [
                    "--config.file=/etc/prometheus/prometheus.yml",
                    "--storage.tsdb.path=/prometheus",
                    "--enable-feature=exemplar-storage",
                    "--web.enable-lifecycle",
                    f"--web.external-url={config.links.prometheus_url}",
                ],
                "volumes": ["./prometheus:/etc/prometheus:ro", "prometheus-data:/prometheus"],
            },
            "alertmanager": {
                "image": ALERTMANAGER_IMAGE,
                "network_mode": "host",
                "restart": "unless-stopped",
                "command": [
                    "--config.file=/etc/alertmanager/config/alertmanager.yml",
                    "--storage.path=/alertmanager",
                    "--cluster.listen-address=",
                    f"--web.external-url={config.links.alertmanager_url}",
                ],
                "volumes": [
                    "./alertmanager:/etc/alertmanager/config:ro",
                    *_secret_mounts(config),
                    "alertmanager-data:/alertmanager",
                ],
            },
            "grafana": {
                "image": GRAFANA_IMAGE,
                "network_mode": "host",
                "restart": "unless-stopped",
                "environment": {
                    "GF_SECURITY_ADMIN_PASSWORD": "${GRAFANA_ADMIN_PASSWORD:-admin}",
                    "GF_AUTH_ANONYMOUS_ENABLED": "true",
                    "GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer",
                    "GF_SERVER_ROOT_URL": config.links.grafana_url,
                    "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH": (
                        f"{GRAFANA_DASHBOARDS}/rl-training.json"
                    ),
                },
                "volumes": [
                    "./grafana/provisioning:/etc/grafana/provisioning:ro",
                    f"./grafana/dashboards:{GRAFANA_DASHBOARDS}:ro",
                    "grafana-data:/var/lib/grafana",
                ],
                "depends_on": ["prometheus", "alertmanager"],
            },
            "rollouts": {
                "image": PYTHON_IMAGE,
                "network_mode": "host",
                "restart": "unless-stopped",
                "working_dir": "/tmp",
                "command": install_and_run(
                    f"rlpulse rollouts serve --data-dir {ROLLOUTS_DATA} --port {VIEWER_PORT}"
                ),
                # not :ro: SQLite readers of a WAL store write its -shm index (queries stay
                # read-only: the viewer's connections are query_only)
                "volumes": [f"rollouts-data:{ROLLOUTS_DATA}"],
            },
            "demo": {
                "image": PYTHON_IMAGE,
                "network_mode": "host",
                "working_dir": "/tmp",
                "environment": {"RLPULSE_DATA_DIR": ROLLOUTS_DATA},
                "command": install_and_run("rlpulse demo"),
                "volumes": [f"rollouts-data:{ROLLOUTS_DATA}"],
                "depends_on": ["prometheus", "rollouts"],
            },
        },
        "volumes": {
            "prometheus-data": {},
            "alertmanager-data": {},
            "grafana-data": {},
            "rollouts-data": {},
        },
    }


def render(config: Config) -> str:
    """docker-compose.yml as text."""
    return dump(services(config), header("compose.py"))
