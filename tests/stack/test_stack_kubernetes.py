"""``rlpulse generate --kubernetes``: the PodMonitor, PrometheusRule and dashboard ConfigMaps.

The PrometheusRule's groups are extracted and run through the real ``promtool check rules`` and
the promtool unit tests of prometheus/tests/, so the operator gets the rules the tests prove. The
operator objects are validated against the prometheus-operator CRD schemas as pydantic models
(``cloudcoil-models-prometheus-operator``, generated from the v0.80 CRDs) and must survive a
round trip through them unchanged, so a field the CRD does not know fails too; the ConfigMaps
are checked by hand against the core API's rules (names, data keys, the 1 MiB limit).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.stackutil import promtool
from rlpulse import catalog, cli
from rlpulse.stack import config, dashboards, generate, rules, ruletests
from rlpulse.stack.deploy import kubernetes, prometheus

REPO = Path(__file__).resolve().parents[2]
DEFAULT = config.Config()
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_KEY = re.compile(r"^([a-z0-9.-]+/)?[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?)?$")
CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([a-z0-9]|-(?!-))*$")  # IANA_SVC_NAME, <= 15 chars
LAST_APPLIED_LIMIT = 256 * 1024  # all annotations of an object; kubectl apply stores it whole
HTTPS = config.from_dict(
    {
        "scrape": {"scheme": "https", "server_name": "rlpulse"},
        "kubernetes": {"basic_auth_secret": "rlpulse-scrape-auth"},
    }
)


def _objects(files: dict[str, str]) -> dict[str, dict[str, Any]]:
    out = {}
    for path, text in files.items():
        docs = list(yaml.safe_load_all(text))
        assert len(docs) == 1, f"{path}: {len(docs)} YAML documents"
        out[path] = docs[0]
    return out


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    return kubernetes.render(DEFAULT)


@pytest.fixture(scope="module")
def objects(files: dict[str, str]) -> dict[str, dict[str, Any]]:
    return _objects(files)


def _kind(objects: dict[str, dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects.values() if o["kind"] == kind]


def test_the_folder_holds_one_object_per_file_and_a_kustomization(
    objects: dict[str, dict[str, Any]],
) -> None:
    assert all(p.startswith("kubernetes/") and p.endswith(".yaml") for p in objects)
    kinds = sorted(o["kind"] for o in objects.values())
    assert kinds == ["ConfigMap"] * 4 + [
        "Deployment",  # the rollout viewer, its Service, and the claim it reads
        "Kustomization",
        "PersistentVolumeClaim",
        "PodMonitor",
        "PrometheusRule",
        "Service",
    ]
    resources = objects["kubernetes/kustomization.yaml"]["resources"]
    assert sorted(f"kubernetes/{r}" for r in resources) == sorted(
        p for p in objects if not p.endswith("kustomization.yaml")
    )


def test_metadata_names_namespace_and_labels(objects: dict[str, dict[str, Any]]) -> None:
    names = set()
    for path, obj in objects.items():
        if obj["kind"] == "Kustomization":
            continue
        meta = obj["metadata"]
        assert DNS_SUBDOMAIN.match(meta["name"]) and len(meta["name"]) <= 253, path
        assert meta["namespace"] == "monitoring", path
        labels = meta["labels"]
        assert labels["release"] == "kube-prometheus-stack", path
        assert labels["app.kubernetes.io/part-of"] == "rlpulse", path
        for key, value in {**labels, **meta.get("annotations", {})}.items():
            assert LABEL_KEY.match(key) and isinstance(value, str), (path, key)
        for value in labels.values():
            assert LABEL_VALUE.match(value) and len(value) <= 63, (path, value)
        names.add((obj["kind"], meta["name"]))
    assert len(names) == len(objects) - 1


def test_pod_monitor_selects_trainer_pods_and_every_exporter_port(
    objects: dict[str, dict[str, Any]],
) -> None:
    (pm,) = _kind(objects, "PodMonitor")
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    spec = pm["spec"]
    assert spec["selector"] == {"matchLabels": {"app.kubernetes.io/component": "rl-trainer"}}
    assert spec["namespaceSelector"] == {"any": True}
    (ep,) = spec["podMetricsEndpoints"]
    assert "port" not in ep  # one endpoint for every exporter port of the pod, kept by name
    keep, job = ep["relabelings"]
    assert keep["action"] == "keep"
    assert keep["sourceLabels"] == ["__meta_kubernetes_pod_container_port_name"]
    # Prometheus anchors relabel regexes: fullmatch is what it does
    for name in ("rlpulse", "rlpulse-0", "rlpulse-7", "rlpulse-15"):
        assert PORT_NAME.match(name) and len(name) <= 15, name
        assert re.fullmatch(keep["regex"], name), name
    for name in ("http", "rlpulse2", "rlpulse-", "xrlpulse", "metrics"):
        assert not re.fullmatch(keep["regex"], name), name
    # the rules select the scrape job (RLTargetDown's latch: up{job=...}); the operator's
    # default job would be monitoring/rlpulse
    assert job == {"action": "replace", "targetLabel": "job", "replacement": "rlpulse"}
    assert DEFAULT.scrape.job_name == "rlpulse"
    up = f'up{{job="{DEFAULT.scrape.job_name}"}}'
    assert any(up in text for text in rules.render(DEFAULT).values())


def test_the_exporter_keeps_its_identity_labels(objects: dict[str, dict[str, Any]]) -> None:
    """run_id, rank, local_rank and node come from the exporter's own series; the PodMonitor sets
    none of them, and honorLabels keeps the exporter's where a copied pod label collides."""
    (pm,) = _kind(objects, "PodMonitor")
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    assert ep["honorLabels"] is True
    targets = {r.get("targetLabel") for r in ep["relabelings"]}
    assert not targets & set(catalog.IDENTITY_LABELS)
    assert "podTargetLabels" not in pm["spec"]


@pytest.mark.parametrize("preset", ["default", "fast", "slow"])
def test_pod_monitor_scrapes_like_prometheus_yml(preset: str) -> None:
    cfg = {
        "default": DEFAULT,
        "fast": config.fast(),
        "slow": config.from_dict({"scrape": {"interval": "1m", "timeout": "45s"}}),
    }[preset]
    job = prometheus.config(cfg)["scrape_configs"][0]  # the trainers' (then the self-scrapes)
    (ep,) = kubernetes.pod_monitor(cfg)["spec"]["podMetricsEndpoints"]
    assert ep["interval"] == job["scrape_interval"]
    assert ep["scrapeTimeout"] == job["scrape_timeout"]
    assert ep["scheme"] == job["scheme"]
    assert ep["path"] == job["metrics_path"]
    assert ep["relabelings"][-1]["replacement"] == job["job_name"]


def test_https_refers_to_secrets_and_holds_no_secret() -> None:
    (ep,) = kubernetes.pod_monitor(HTTPS)["spec"]["podMetricsEndpoints"]
    assert ep["scheme"] == "https"
    assert ep["tlsConfig"] == {
        "ca": {"secret": {"name": "rlpulse-scrape-tls", "key": "ca.crt"}},
        "serverName": "rlpulse",
    }
    assert ep["basicAuth"] == {
        "username": {"name": "rlpulse-scrape-auth", "key": "username"},
        "password": {"name": "rlpulse-scrape-auth", "key": "password"},
    }
    (plain,) = kubernetes.pod_monitor(DEFAULT)["spec"]["podMetricsEndpoints"]
    assert "tlsConfig" not in plain and "basicAuth" not in plain


def test_config_reaches_the_manifests() -> None:
    cfg = config.from_dict(
        {
            "kubernetes": {
                "name": "rl-obs",
                "namespace": "observability",
                "labels": ["release=prom", "team=rl"],
                "pod_selector": ["app=grpo", "tier=trainer"],
                "pod_namespaces": ["training", "eval"],
                "port_name": "metrics",
                "pod_target_labels": ["team"],
                "dashboard_label": "grafana_dashboard=rl",
                "dashboard_folder": "RL training",
            }
        }
    )
    objs = _objects(kubernetes.render(cfg))
    (pm,) = _kind(objs, "PodMonitor")
    assert pm["metadata"]["name"] == "rl-obs"
    assert pm["metadata"]["namespace"] == "observability"
    assert pm["metadata"]["labels"]["team"] == "rl"
    assert pm["spec"]["selector"]["matchLabels"] == {"app": "grpo", "tier": "trainer"}
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["training", "eval"]}
    assert pm["spec"]["podTargetLabels"] == ["team"]
    assert pm["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["regex"] == "metrics(-[0-9]+)?"
    for cm in _kind(objs, "ConfigMap"):
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "rl"
        assert cm["metadata"]["annotations"] == {"grafana_folder": "RL training"}
        assert cm["metadata"]["name"].startswith("rl-obs-dashboard-")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"labels": ["release"]}, "kubernetes.labels: 'release' is not a key=value label"),
        ({"pod_selector": ["app=a b"]}, "kubernetes.pod_selector: 'app=a b'"),
        ({"dashboard_label": "=1"}, "kubernetes.dashboard_label: '=1'"),
    ],
)
def test_a_bad_label_is_a_config_error(override: dict[str, Any], message: str) -> None:
    with pytest.raises(config.ConfigError, match=re.escape(message)):
        config.from_dict({"kubernetes": override})


def test_prometheus_rule_groups_are_the_rule_files_groups(
    objects: dict[str, dict[str, Any]],
) -> None:
    (pr,) = _kind(objects, "PrometheusRule")
    assert pr["apiVersion"] == "monitoring.coreos.com/v1"
    rule_files = rules.render(DEFAULT)
    expected = [
        g
        for area in rules.AREAS
        for g in yaml.safe_load(rule_files[f"prometheus/rules/{area}.yml"])["groups"]
    ]
    assert pr["spec"]["groups"] == expected
    assert pr["spec"]["groups"] == [g.as_dict() for g in rules.groups(DEFAULT)]


def _extract_rules(objects: dict[str, dict[str, Any]], folder: Path) -> list[Path]:
    """Each group of the PrometheusRule into rules/<area>.yml, where the promtool tests load it."""
    (pr,) = _kind(objects, "PrometheusRule")
    paths = []
    for group in pr["spec"]["groups"]:
        area = group["name"].removeprefix("rlpulse-")
        path = folder / "rules" / f"{area}.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump({"groups": [group]}, sort_keys=False))
        paths.append(path)
    return paths


def test_promtool_checks_the_extracted_rules(
    tmp_path: Path, objects: dict[str, dict[str, Any]]
) -> None:
    paths = _extract_rules(objects, tmp_path)
    run = subprocess.run(
        [promtool(), "check", "rules", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    found = sum(int(n) for n in re.findall(r"SUCCESS: (\d+) rules found", run.stdout))
    assert found == sum(len(g.recordings) + len(g.alerts) for g in rules.groups(DEFAULT))
    print(f"promtool check rules: {found} rules from the PrometheusRule")


def test_the_extracted_rules_are_those_the_scenario_tests_prove(
    tmp_path: Path, objects: dict[str, dict[str, Any]]
) -> None:
    """The rules taken out of the PrometheusRule are, as Prometheus reads them, the generated
    prometheus/rules/<area>.yml that prometheus/tests/<area>.yml pass against in promtool
    (test_stack_rules): the operator evaluates the rules the scenario tests prove."""
    generated = rules.render(DEFAULT)
    paths = _extract_rules(objects, tmp_path / "prometheus")
    assert sorted(p.stem for p in paths) == sorted(rules.AREAS)
    for path in paths:
        rel = path.relative_to(tmp_path).as_posix()
        assert yaml.safe_load(path.read_text()) == yaml.safe_load(generated[rel]), rel
    assert set(ruletests.render(DEFAULT)) == {
        f"prometheus/tests/{area}.yml" for area in rules.AREAS
    }


def test_config_maps_hold_the_dashboards(objects: dict[str, dict[str, Any]]) -> None:
    grafana = {
        path.rsplit("/", 1)[1]: text
        for path, text in dashboards.render(DEFAULT).items()
        if path.startswith("grafana/dashboards/")
    }
    models = dashboards.dashboards(DEFAULT)
    held = {}
    for cm in _kind(objects, "ConfigMap"):
        assert cm["apiVersion"] == "v1"
        assert set(cm) == {"apiVersion", "kind", "metadata", "data"}
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"  # a string, as labels are
        assert cm["metadata"]["annotations"] == {"grafana_folder": "rlpulse"}
        ((key, text),) = cm["data"].items()  # one dashboard per ConfigMap (the sidecar's advice)
        assert CONFIGMAP_KEY.match(key)
        assert text == grafana[key]
        assert json.loads(text) == models[key]
        held[key] = text
    assert held.keys() == grafana.keys() == models.keys()


def test_sizes_fit_the_api_limits(
    files: dict[str, str], objects: dict[str, dict[str, Any]]
) -> None:
    """A ConfigMap holds at most 1 MiB; kubectl apply (client side) copies the object into an
    annotation, and an object's annotations hold at most 256 KiB."""
    for path, obj in objects.items():
        size = len(files[path].encode())
        data = sum(len(v.encode()) for v in obj.get("data", {}).values())
        last_applied = len(json.dumps(obj, separators=(",", ":")).encode())
        print(f"{path}: {size} bytes, data {data}, last-applied {last_applied}")
        assert size < kubernetes.CONFIGMAP_LIMIT
        assert last_applied < LAST_APPLIED_LIMIT


@pytest.fixture(scope="module")
def operator() -> Any:
    """The prometheus-operator CRD models, imported by the tests that use them: ~3 s of imports
    every test process would pay at collection otherwise."""
    from cloudcoil.models.prometheus_operator import v1

    return v1


@pytest.mark.parametrize("cfg", [DEFAULT, HTTPS], ids=["http", "https"])
def test_operator_objects_validate_against_the_crd_schemas(
    cfg: config.Config, operator: Any
) -> None:
    for obj in (kubernetes.pod_monitor(cfg), kubernetes.prometheus_rule(cfg)):
        model = getattr(operator, obj["kind"]).model_validate(obj)
        again = model.model_dump(by_alias=True, exclude_none=True, mode="json")
        assert again == obj, f"{obj['kind']}: a field the CRD does not define was dropped"


def test_the_crd_validation_has_teeth(operator: Any) -> None:
    pm = kubernetes.pod_monitor(DEFAULT)
    bad = json.loads(json.dumps(pm))
    bad["spec"]["podMetricsEndpoints"][0]["interval"] = "15 seconds"
    with pytest.raises(ValueError, match="interval"):
        operator.PodMonitor.model_validate(bad)
    typo = json.loads(json.dumps(pm))
    typo["spec"]["podMetricsEndpoints"][0]["scrapeTimout"] = "10s"
    again = operator.PodMonitor.model_validate(typo).model_dump(
        by_alias=True, exclude_none=True, mode="json"
    )
    assert again != typo


def test_cli_writes_and_checks_the_manifests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["generate", "--kubernetes", "--out", str(tmp_path)]) == 0
    written = {
        p.relative_to(tmp_path).as_posix(): p.read_text()
        for p in (tmp_path / "kubernetes").iterdir()
    }
    assert written == kubernetes.render(DEFAULT)
    assert cli.main(["generate", "--check", "--kubernetes", "--out", str(tmp_path)]) == 0
    capsys.readouterr()

    header = written["kubernetes/podmonitor.yaml"].splitlines(keepends=True)[0]  # GENERATED …
    (tmp_path / "kubernetes" / "podmonitor.yaml").write_text(header + "kind: PodMonitor\n")
    (tmp_path / "kubernetes" / "old.yaml").write_text(header + "kind: ConfigMap\n")
    assert cli.main(["generate", "--check", "--kubernetes", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "kubernetes/podmonitor.yaml" in err and "kubernetes/old.yaml" in err
    # once kubernetes/ exists, a plain generate keeps it current (and removes the stale file)
    assert cli.main(["generate", "--out", str(tmp_path)]) == 0
    assert not (tmp_path / "kubernetes" / "old.yaml").exists()
    assert cli.main(["generate", "--check", "--out", str(tmp_path)]) == 0


def test_plain_generate_writes_no_manifests(tmp_path: Path) -> None:
    assert cli.main(["generate", "--out", str(tmp_path)]) == 0
    assert not (tmp_path / "kubernetes").exists()
    assert not any(p.startswith("kubernetes/") for p in generate.render(DEFAULT))


def test_the_committed_manifests_are_up_to_date(files: dict[str, str]) -> None:
    drifted = [p for p in generate.drift(files, REPO) if p.startswith("kubernetes/")]
    assert drifted == [], "run `rlpulse generate --kubernetes` and commit the result"


def test_the_rollout_viewer_reads_the_trainers_claim(objects: dict[str, dict[str, Any]]) -> None:
    (deploy,) = _kind(objects, "Deployment")
    (service,) = _kind(objects, "Service")
    (claim,) = _kind(objects, "PersistentVolumeClaim")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "rlpulse rollouts serve --addr 0.0.0.0 --port 9096" in container["command"][-1]
    assert container["volumeMounts"][0]["mountPath"] == "/var/lib/rlpulse"
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["port"] == 9096
