"""Grafana output of ``rlpulse generate``: the four dashboards, provisioning, docker-compose.yml.

``render(config)`` maps each generated file's path (relative to the output root) to its text.
``panel_queries`` and ``expand`` let a test run every panel query against a real Prometheus.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from rlpulse.stack.config import Config
from rlpulse.stack.dashboards import classic, comparison, system, training
from rlpulse.stack.deploy import compose
from rlpulse.stack.docs import REFERENCE
from rlpulse.stack.output import dump, header
from rlpulse.stack.panels import CLASSIC_UID

DASHBOARD_DIR = "grafana/dashboards"
PROVISIONING_DIR = "grafana/provisioning"
PROMETHEUS_UID = "prometheus"
ALERTMANAGER_UID = "alertmanager"
_HEADER = header("dashboards.py")


def dashboards(config: Config) -> dict[str, dict[str, Any]]:
    """Each dashboard's file name and JSON model."""
    links = config.links
    return {
        "rl-training.json": training.build(links.training_dashboard_uid, config),
        "rl-system.json": system.build(links.system_dashboard_uid, config),
        "rl-comparison.json": comparison.build(links.comparison_dashboard_uid, config),
        "rl-classic.json": classic.build(CLASSIC_UID),
    }


def datasources(config: Config) -> dict[str, Any]:
    """Grafana datasource provisioning: Prometheus (default) and Alertmanager."""
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": "Prometheus",
                "uid": PROMETHEUS_UID,
                "type": "prometheus",
                "access": "proxy",
                "url": compose.PROMETHEUS_URL,
                "isDefault": True,
                "jsonData": {
                    "prometheusType": "Prometheus",
                    "timeInterval": config.scrape.interval,  # sizes $__rate_interval
                    "exemplarTraceIdDestinations": [
                        {
                            "name": "rollout_id",
                            "url": config.links.rollouts_url + "/view?id=${__value.raw}",
                        }
                    ],
                },
            },
            {
                "name": "Alertmanager",
                "uid": ALERTMANAGER_UID,
                "type": "alertmanager",
                "access": "proxy",
                "url": f"http://{config.scrape.alertmanagers[0]}",
                "jsonData": {"implementation": "prometheus", "handleGrafanaManagedAlerts": False},
            },
        ],
    }


def dashboard_provider() -> dict[str, Any]:
    """Grafana dashboard provisioning: load every JSON file of the mounted dashboards folder."""
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": "rlpulse",
                "folder": "rlpulse",
                "type": "file",
                "disableDeletion": False,
                "allowUiUpdates": True,
                "updateIntervalSeconds": 30,
                "options": {"path": compose.GRAFANA_DASHBOARDS, "foldersFromFilesStructure": False},
            }
        ],
    }


def render(config: Config | None = None) -> dict[str, str]:
    """Every Grafana and docker-compose file, path relative to the output root -> text."""
    cfg = config or Config()
    files = {
        f"{DASHBOARD_DIR}/{name}": json.dumps(model, indent=2, sort_keys=True, ensure_ascii=False)
        + "\n"
        for name, model in dashboards(cfg).items()
    }
    files[f"{PROVISIONING_DIR}/datasources/datasources.yml"] = dump(datasources(cfg), _HEADER)
    files[f"{PROVISIONING_DIR}/dashboards/dashboards.yml"] = dump(dashboard_provider(), _HEADER)
    files["docker-compose.yml"] = compose.render(cfg)
    files[f"{REFERENCE}/dashboards.md"] = markdown(dashboards(cfg))
    return files


_DOC_INTRO = """\
# Dashboards

Generated from `src/rlpulse/stack/dashboards/*.py` by `rlpulse generate`; do not edit by hand.

Four Grafana dashboards ship in `grafana/dashboards/`:

- **With docker compose**: `docker compose up` provisions them (folder *rlpulse*) together with
  the Prometheus and Alertmanager datasources; Grafana is on <http://localhost:3000>.
- **By hand**: in any Grafana 11 or 12, *Dashboards → New → Import*, upload the JSON file; the
  import asks for the Prometheus datasource (`__inputs`), which becomes the *Data source*
  variable's value. No datasource uid is hard-coded (`schemaVersion` 41, Grafana 11.6 / 12).

The training and classic dashboards open on one run (their `run_id` variable is single-valued): the
run with a firing alert, else the newest (by `rl_exporter_start_timestamp_seconds`; the variable
lists the runs seen in the time range in that order and Grafana picks the first); the system and
comparison dashboards filter by their variables (*All* is the default). Every dashboard draws the
alerts firing for the selection as red annotations (the `ALERTS` series) and links to the other
two, keeping the time range and the run. The row *What the alerts test* plots each step signal an
alert thresholds (`rl_step_signal{signal=…}`) with the alert's warning and critical levels as
dashed lines, taken from the same config as the rules, so a page leads to the curve that caused it;
the runbooks (docs/runbooks.md) name panels by their titles here. Rows a kind of run cannot fill
(grader and tools) are collapsed. A Gymnasium, SB3 or CleanRL run has a dashboard of its own,
*Classic RL*: episode return, length and success rate, episodes and env steps per second,
exploration (epsilon or entropy), losses, Q-values, and each phase's share of wall time with the
untimed rest shown (so does the training dashboard); policy-gradient details are collapsed. The
*Outcome* says how the run ended, from the last `rl_run_outcome` in the time range (finished,
crashed, interrupted, stopped), `running` while it is scraped without one, and `died (no end
recorded)` when it went away without one (a kill); *Since last log* counts from the last log time
seen in the range, so it keeps counting after a kill. Graphs leave a gap where a run has no samples
(no `spanNulls`); quantiles and ratios of an idle window are left out rather than NaN; phase shares
never exceed 100 % (overlapping phases are shares of the timed total).

**By training step.** The training dashboard (collapsed row) and the comparison dashboard plot
every training curve of the Reward, Policy, Optimisation and Task rows against the step
(*trend* panels, x = `rl_step`), one line per run and series, so runs that did not run at the
same time overlay at the same step. What they can show is what Prometheus holds: one sample
per scrape. Each panel asks for one point per scrape interval (its `interval`) and keeps the
points where the run's step advanced, so a run that logs slower than it is scraped has one
point per logged step, and a faster one has the step reached at each scrape — the steps logged
between two scrapes never reach Prometheus (at the default 15 s scrape, a run logging a step a
second shows every 15th step). For every logged step, replay the run's log
(`rlpulse replay`, docs/replay.md). A run restarted with the same `run_id` whose step goes
back draws its second part over the first.

From a curve to the rollouts behind it: the Reward and reward-component panels link to the run's
highest- and lowest-reward rollouts in the rollout viewer (docs/rollouts.md; the *Rollout viewer*
variable is its base URL, `links.rollouts_url`, what `rlpulse stack up` serves), the response-length
panel to the longest, the alert-signal, gradient-norm and response-quality panels to the lowest:
up to the clicked point of the visible time range (`since=${__from}&until=${__value.time}`), in the
visible step range (`step_min=${step_min}&step_max=${step_max}`, hidden variables computed from
`rl_step` over the time range), and the whole run; `rlpulse rollouts show --run RUN --step-min A
--step-max B --best 20` prints the same and the link. Exemplars (the `rollout_id` of single
rollouts) on the rollout-latency and response-length histograms open the viewer's `/view?id=…`
through the Prometheus datasource's exemplar link. Rates use
`$__rate_interval`; error counters read 0 for each run that is up until their first increment
(labelled `none`, never a label-less `vector(0)`).

Grafana does not run in this project's tests: tests/e2e/test_stack_dashboards_prometheus.py runs
every panel query, as Grafana would send it, against a real Prometheus scraping five runs (one
finished, one crashed, one killed with SIGKILL, one running with overlapping phases and idle
histogram windows, one logging slower than it is scraped) and checks the values (no NaN, no
share above 100 %, each legend's labels set, each run's outcome, the tables, the Run
variable's order, one by-step point per logged step); tests/stack/test_stack_dashboards.py
checks the JSON (units, axes and overrides, `spanNulls`, variables, transformations).

## The stack with docker compose

`docker-compose.yml` runs Prometheus (with `--enable-feature=exemplar-storage`), Alertmanager,
Grafana and the demo trainer (`rlpulse demo`, installed from this checkout into a Python image),
all with pinned image tags and on the host network (Linux), so the generated configuration works
as it is: Prometheus scrapes `127.0.0.1:9400` and the `file_sd` targets in `prometheus/targets/`,
and alerts `127.0.0.1:9093`; a trainer started on the host is scraped like the demo. The
`rollouts` service serves the rollout viewer on `127.0.0.1:9096` over the `rollouts-data` volume
the demo records into, where the pages' and panels' rollout links point. Receiver
secrets are never committed: put the PagerDuty routing key and the Slack webhook URL in files
under `./secrets/` (mounted read-only where `alertmanager.yml` reads them, see
docs/reference/configuration.md) and set `GRAFANA_ADMIN_PASSWORD` in the environment (default
`admin`).
"""


def markdown(models: Mapping[str, Mapping[str, Any]]) -> str:
    """docs/reference/dashboards.md: what each dashboard and panel shows, from the panels'
    descriptions."""
    lines = [_DOC_INTRO]
    for file_name, model in models.items():
        variables = ", ".join(f"`{v['name']}`" for v in model["templating"]["list"])
        lines += [
            f"## {model['title']}",
            "",
            f"{model['description']} File `{DASHBOARD_DIR}/{file_name}`, uid `{model['uid']}`;"
            f" variables {variables}.",
            "",
        ]
        for panel in panels(model):
            if panel["type"] == "row":
                lines += ["", f"### {panel['title']}", ""]
            else:
                lines.append(f"- **{panel['title']}**: {panel['description']}")
        lines.append("")
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).rstrip() + "\n"


# ---- reading the generated JSON back ----------------------------------------------------------


def panels(dashboard_json: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every panel of a dashboard, including those nested in (collapsed) rows."""
    for panel in dashboard_json.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def panel_queries(dashboard_json: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(panel title, PromQL expr)`` for every query target of every panel."""
    return [
        (panel.get("title", ""), target["expr"])
        for panel in panels(dashboard_json)
        for target in panel.get("targets", [])
        if target.get("expr")
    ]


_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def expand(
    expr: str,
    values: Mapping[str, str] | None = None,
    *,
    rate_interval: str = "1m",
    interval: str = "",
    range_: str = "1h",
) -> str:
    """``expr`` with Grafana's variables replaced as Grafana would before querying.

    ``$__rate_interval`` becomes ``rate_interval``, ``$__interval`` ``interval`` (default
    ``rate_interval``), ``$__range`` ``range_``; a dashboard variable takes its value from
    ``values``, or ``.*`` (the "All" value) when absent.
    """
    given = dict(values or {})
    builtin = {
        "__rate_interval": rate_interval,
        "__interval": interval or rate_interval,
        "__range": range_,
    }

    def sub(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return builtin.get(name) or given.get(name, ".*")

    return _VARIABLE.sub(sub, expr)
