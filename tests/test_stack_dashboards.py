"""The generated Grafana dashboards, provisioning and docker-compose.yml.

Structure checks on the JSON (ids, refIds, units, datasource, variables, layout), every PromQL
expression parsed and its metric names checked against the catalog and the recording rules, and
``docker-compose config`` on the compose file.
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from rlpulse import catalog
from rlpulse.stack import compose, dashboards, rules
from rlpulse.stack.config import Config
from rlpulse.stack.grafana_common import ALERTS, Selector, ref_id
from tests import stackutil

REPO = Path(__file__).resolve().parents[1]
CONFIG = Config()
FILES = dashboards.render(CONFIG)
MODELS = {name: model for name, model in dashboards.dashboards(CONFIG).items()}
DS_UID = "${datasource}"
RATE_SENTINEL = datetime.timedelta(seconds=17)  # what $__rate_interval is expanded to here
HISTOGRAMS_WITH_EXEMPLARS = ("rl_rollout_duration_seconds", "rl_response_length_tokens")

KNOWN_SERIES = (
    catalog.all_series_names()
    | {r.record for g in rules.groups(CONFIG) for r in g.recordings}
    | {ALERTS}
)

by_dashboard = pytest.mark.parametrize("name", sorted(MODELS))


def walk(node: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object inside ``node``."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def content_panels(model: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboards.panels(model) if p["type"] != "row"]


def parse(expr: str) -> Any:
    return promql_parser.parse(dashboards.expand(expr, rate_interval="17s"))


def nodes(expr: str) -> list[Any]:
    out: list[Any] = []
    promql_parser.walk(parse(expr), lambda n: out.append(n))
    return out


def metric_names(expr: str) -> set[str]:
    """Every metric a panel's PromQL (with Grafana variables) selects."""
    return stackutil.metric_names(dashboards.expand(expr, rate_interval="17s"))


def all_exprs(model: dict[str, Any]) -> list[tuple[str, str]]:
    """Panel queries, annotation queries and the selectors inside variable queries."""
    out = list(dashboards.panel_queries(model))
    out += [(a["name"], a["expr"]) for a in model["annotations"]["list"] if a.get("expr")]
    for var in model["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]
            assert query.startswith("label_values(") and query.endswith(")"), query
            out.append((var["name"], query[len("label_values(") :].rsplit(",", 1)[0]))
    return out


# ---- structure --------------------------------------------------------------------------------


@by_dashboard
def test_panel_ids_unique_and_set(name: str) -> None:
    ids = [p["id"] for p in dashboards.panels(MODELS[name])]
    assert all(isinstance(i, int) and i > 0 for i in ids)
    assert len(ids) == len(set(ids))


@by_dashboard
def test_every_panel_has_queries_with_explicit_unique_ref_ids(name: str) -> None:
    for panel in content_panels(MODELS[name]):
        refs = [t.get("refId") for t in panel["targets"]]
        assert refs, panel["title"]
        assert all(isinstance(r, str) and r for r in refs), panel["title"]
        assert len(refs) == len(set(refs)), panel["title"]


@by_dashboard
def test_every_panel_has_a_unit_title_and_description(name: str) -> None:
    for panel in content_panels(MODELS[name]):
        assert panel["title"] and panel["description"]
        assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]


@by_dashboard
def test_datasource_only_through_the_variable(name: str) -> None:
    model = MODELS[name]
    refs = [o["datasource"] for o in walk(model) if isinstance(o.get("datasource"), dict)]
    assert refs
    assert all(r == {"type": "prometheus", "uid": DS_UID} for r in refs), refs
    for panel in content_panels(model):
        assert panel["datasource"]["uid"] == DS_UID
        assert all(t["datasource"]["uid"] == DS_UID for t in panel["targets"])
    (ds_var,) = [v for v in model["templating"]["list"] if v["type"] == "datasource"]
    assert ds_var["name"] == "datasource" and ds_var["query"] == "prometheus"
    uids = [o["uid"] for o in walk(model) if "uid" in o and o is not model]
    assert set(uids) == {DS_UID}  # no hard-coded datasource uid anywhere


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("rl-training.json", ["datasource", "job", "run_id", "rank"]),
        ("rl-system.json", ["datasource", "job", "run_id", "rank", "node", "gpu"]),
        ("rl-comparison.json", ["datasource", "job", "run_id"]),
    ],
)
def test_variables(name: str, expected: list[str]) -> None:
    variables = {v["name"]: v for v in MODELS[name]["templating"]["list"]}
    assert list(variables) == expected
    run = variables["run_id"]
    assert run["multi"] and run["includeAll"] and run["allValue"] == ".*"
    assert run["datasource"]["uid"] == DS_UID


@by_dashboard
def test_firing_alerts_are_annotations(name: str) -> None:
    (annotation,) = MODELS[name]["annotations"]["list"]
    assert annotation["enable"] and annotation["datasource"]["uid"] == DS_UID
    assert metric_names(annotation["expr"]) == {ALERTS}
    assert 'alertstate="firing"' in annotation["expr"]
    assert annotation["titleFormat"] == "{{alertname}}"


@by_dashboard
def test_rows_and_grid_layout(name: str) -> None:
    """Panels fit the 24-column grid, never overlap, and every panel sits under a row."""
    panels = list(dashboards.panels(MODELS[name]))
    assert panels[0]["type"] == "row"
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine


def test_training_dashboard_has_the_twelve_plots() -> None:
    titles = {p["title"] for p in content_panels(MODELS["rl-training.json"])}
    for wanted in (
        "Reward · $run_id",
        "Reward components",
        "Reward spread and zero-std groups",
        "Policy entropy",
        "KL to reference",
        "Update-step KL and clip fractions",
        "Response length",
        "Truncation, format compliance, success",
        "Gradient norm (log)",
        "Non-finite values",
        "Learning rate",
        "Policy and value losses",
        "Explained variance",
        "Advantages",
        "Train / inference mismatch",
        "Throughput",
        "Phase time share",
        "Liveness: seconds since last log",
    ):
        assert wanted in titles
    rows = [p["title"] for p in dashboards.panels(MODELS["rl-training.json"]) if p["type"] == "row"]
    assert rows[1:] == [
        "Reward",
        "Policy: entropy and divergence",
        "Optimisation",
        "Task: responses and episodes",
        "System: throughput, phases, liveness",
    ]


def test_reward_band_and_log_scale() -> None:
    panels = {p["title"]: p for p in content_panels(MODELS["rl-training.json"])}
    band = panels["Reward · $run_id"]
    assert band["repeat"] == "run_id"
    max_override = next(
        o for o in band["fieldConfig"]["overrides"] if o["matcher"]["options"] == "max"
    )
    assert {"id": "custom.fillBelowTo", "value": "min"} in max_override["properties"]
    legends = {t["legendFormat"] for t in band["targets"]}
    assert {"mean", "min", "max"} <= legends
    scale = panels["Gradient norm (log)"]["fieldConfig"]["defaults"]["custom"]["scaleDistribution"]
    assert scale == {"type": "log", "log": 10}


def test_entropy_baseline_follows_the_config() -> None:
    model = dashboards.dashboards(Config(windows=type(CONFIG.windows)(baseline="90m")))
    (entropy,) = [
        p for p in content_panels(model["rl-training.json"]) if p["title"] == "Policy entropy"
    ]
    assert "[90m]" in entropy["targets"][1]["expr"]


def test_comparison_tables() -> None:
    panels = {p["title"]: p for p in content_panels(MODELS["rl-comparison.json"])}
    runs, hparams = panels["Runs"], panels["Hyperparameters"]
    assert metric_names(runs["targets"][0]["expr"]) == {"rl_run_info"}
    assert metric_names(hparams["targets"][0]["expr"]) == {"rl_hyperparameter"}
    for panel in (runs, hparams):
        assert panel["type"] == "table"
        assert panel["targets"][0]["instant"] and panel["targets"][0]["format"] == "table"
    assert hparams["transformations"][0]["id"] == "groupingToMatrix"


# ---- PromQL -----------------------------------------------------------------------------------


@by_dashboard
def test_every_metric_is_in_the_catalog_or_a_recording_rule(name: str) -> None:
    exprs = all_exprs(MODELS[name])
    assert exprs
    for title, expr in exprs:
        names = metric_names(expr)
        assert names, f"{title}: {expr} selects no metric"
        assert names <= KNOWN_SERIES, f"{title}: unknown {names - KNOWN_SERIES} in {expr}"


def test_the_name_check_catches_an_unknown_metric() -> None:
    expr = 'sum(rate(rl_bogus_total{run_id=~"$run_id"}[$__rate_interval])) / {__name__="rl_nope"}'
    assert metric_names(expr) == {"rl_bogus_total", "rl_nope"}
    assert not metric_names(expr) <= KNOWN_SERIES


def test_selector_refuses_names_outside_the_catalog() -> None:
    sel = Selector(("run_id",))
    with pytest.raises(KeyError, match="rl_bogus"):
        sel("rl_bogus")
    with pytest.raises(ValueError, match="_bucket"):
        sel("rl_reward_mean", "_bucket")
    assert sel("rl_eval_score", split="eval") == 'rl_eval_score{run_id=~"$run_id", split="eval"}'


@by_dashboard
def test_rates_use_rate_interval_and_quantiles_bucket_by_le(name: str) -> None:
    for title, expr in dashboards.panel_queries(MODELS[name]):
        for node in nodes(expr):
            if not isinstance(node, promql_parser.Call):
                continue
            if node.func.name in ("rate", "increase"):
                assert node.args[0].range == RATE_SENTINEL, f"{title}: {expr}"
            if node.func.name == "histogram_quantile":
                inner = node.args[1]
                assert isinstance(inner, promql_parser.AggregateExpr), f"{title}: {expr}"
                assert "le" in inner.modifier.labels, f"{title}: {expr}"
                assert metric_names(str(inner)) <= {
                    catalog.get(h).name + "_bucket" for h in catalog.BY_NAME
                }, f"{title}: {expr}"


@by_dashboard
def test_exemplars_on_the_rollout_and_length_histograms(name: str) -> None:
    buckets = {catalog.get(h).name + "_bucket" for h in HISTOGRAMS_WITH_EXEMPLARS}
    for panel in content_panels(MODELS[name]):
        for target in panel["targets"]:
            if metric_names(target["expr"]) & buckets:
                assert target["exemplar"] is True, panel["title"]


def test_rollout_heatmap() -> None:
    (heat,) = [p for p in content_panels(MODELS["rl-system.json"]) if p["type"] == "heatmap"]
    (target,) = heat["targets"]
    assert (
        target["format"] == "heatmap" and target["exemplar"] and target["legendFormat"] == "{{le}}"
    )
    assert heat["options"]["calculate"] is False


def test_panel_queries_and_expand() -> None:
    model = MODELS["rl-training.json"]
    queries = dashboards.panel_queries(model)
    assert len(queries) == sum(len(p["targets"]) for p in content_panels(model))
    assert all(title and expr for title, expr in queries)
    for _, expr in queries:
        expanded = dashboards.expand(expr, {"run_id": "r1"}, rate_interval="2m")
        assert "$" not in expanded
        parse(expr)
    expr = 'rate(x{run_id=~"$run_id", rank=~"${rank}"}[$__rate_interval])'
    assert dashboards.expand(expr, {"run_id": "r1"}) == 'rate(x{run_id=~"r1", rank=~".*"}[1m])'
    assert ref_id(0) == "A" and ref_id(25) == "Z" and ref_id(26) == "AA"


# ---- files: provisioning, compose, freshness --------------------------------------------------


def test_render_paths() -> None:
    assert set(FILES) == {
        "grafana/dashboards/rl-training.json",
        "grafana/dashboards/rl-system.json",
        "grafana/dashboards/rl-comparison.json",
        "grafana/provisioning/datasources/datasources.yml",
        "grafana/provisioning/dashboards/dashboards.yml",
        "docker-compose.yml",
        "docs/dashboards.md",
    }
    for rel, text in FILES.items():
        if rel.endswith(".json"):
            assert json.loads(text)["uid"].startswith("rlpulse-")


def test_docs_list_every_panel() -> None:
    doc = FILES["docs/dashboards.md"]
    for model in MODELS.values():
        assert f"## {model['title']}" in doc
        for panel in content_panels(model):
            assert f"- **{panel['title']}**: {panel['description']}" in doc


def test_committed_files_are_fresh() -> None:
    stale = [rel for rel, text in FILES.items() if (REPO / rel).read_text() != text]
    assert not stale, f"regenerate with `rlpulse generate`: {stale}"


def test_provisioning() -> None:
    sources = yaml.safe_load(FILES["grafana/provisioning/datasources/datasources.yml"])
    types = {d["type"]: d for d in sources["datasources"]}
    assert set(types) == {"prometheus", "alertmanager"}
    assert types["prometheus"]["isDefault"]
    assert types["prometheus"]["jsonData"]["timeInterval"] == CONFIG.scrape.interval
    assert types["alertmanager"]["url"] == f"http://{CONFIG.scrape.alertmanagers[0]}"
    provider = yaml.safe_load(FILES["grafana/provisioning/dashboards/dashboards.yml"])
    (entry,) = provider["providers"]
    assert entry["type"] == "file" and entry["options"]["path"] == compose.GRAFANA_DASHBOARDS


@pytest.fixture
def compose_dir(tmp_path: Path) -> Path:
    """A folder laid out like the repository: the compose file and every folder it mounts."""
    for rel, text in FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    for folder in ("prometheus/rules", "alertmanager", "secrets"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    return tmp_path


def test_docker_compose_config_accepts_the_file(compose_dir: Path) -> None:
    binary = shutil.which("docker-compose")
    assert binary, "the docker-compose binary (Debian package docker-compose) is required"
    run = subprocess.run(
        [binary, "config"], cwd=compose_dir, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    resolved = yaml.safe_load(run.stdout)["services"]
    assert set(resolved) == {"prometheus", "alertmanager", "grafana", "demo"}
    for service in resolved.values():
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), image
    assert "--enable-feature=exemplar-storage" in resolved["prometheus"]["command"]
    binds = [
        Path(v.split(":")[0])
        for service in resolved.values()
        for v in service.get("volumes", [])
        if v.startswith("/")
    ]
    assert all(b.is_dir() for b in binds), binds
    assert {str(b.relative_to(compose_dir.resolve())) for b in binds} == {
        "prometheus",
        "alertmanager",
        "secrets",
        "grafana/provisioning",
        "grafana/dashboards",
    }


def test_compose_mounts_secrets_where_alertmanager_reads_them() -> None:
    spec = yaml.safe_load(FILES["docker-compose.yml"])
    volumes = spec["services"]["alertmanager"]["volumes"]
    key_dir = str(Path(CONFIG.receivers.pagerduty.routing_key_file).parent)
    assert f"{compose.SECRETS_DIR}:{key_dir}:ro" in volumes
    assert "routing_key:" not in FILES["docker-compose.yml"]
    assert spec["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"].startswith("${")
    demo = spec["services"]["demo"]
    assert "rlpulse demo" in " ".join(demo["command"])
    assert "volumes" not in demo  # it installs rlpulse, never the project it was generated in
    assert compose.RLPULSE_PIP_SPEC in " ".join(demo["command"])
