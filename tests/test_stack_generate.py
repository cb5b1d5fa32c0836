"""``rlpulse generate``: output layout, ``--check`` drift detection, YAML config and its errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from rlpulse import cli
from rlpulse.stack import config, configdoc, generate

REPO = Path(__file__).resolve().parents[1]


def _generate(*args: str) -> int:
    return cli.main(["generate", *args])


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    return generate.render(config.Config())


def test_writes_the_repository_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _generate("--out", str(tmp_path)) == 0
    for rel in (
        "prometheus/prometheus.yml",
        "prometheus/rules/rl.yml",
        "prometheus/rules/task.yml",
        "prometheus/rules/system.yml",
        "prometheus/tests/rl.yml",
        "alertmanager/alertmanager.yml",
        "alertmanager/templates/rlpulse.tmpl",
        "docs/runbooks.md",
        "docs/configuration.md",
        "docker-compose.yml",
    ):
        assert (tmp_path / rel).is_file(), rel
    assert list((tmp_path / "grafana" / "dashboards").glob("*.json"))
    assert _generate("--out", str(tmp_path), "--check") == 0
    assert "up to date" in capsys.readouterr().out


def test_the_committed_files_are_up_to_date(files: dict[str, str]) -> None:
    assert generate.drift(files, REPO) == [], "run `rlpulse generate` and commit the result"


def test_check_names_changed_missing_and_stale_files(
    tmp_path: Path, files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    generate.write(files, tmp_path)
    rules = tmp_path / "prometheus" / "rules" / "rl.yml"
    rules.write_text(rules.read_text().replace("< 0.2", "< 0.3"))
    (tmp_path / "alertmanager" / "alertmanager.yml").unlink()
    (tmp_path / "prometheus" / "rules" / "old.yml").write_text("groups: []\n")
    capsys.readouterr()
    assert _generate("--out", str(tmp_path), "--check") == 1
    err = capsys.readouterr().err
    for rel in (
        "prometheus/rules/rl.yml",
        "alertmanager/alertmanager.yml",
        "prometheus/rules/old.yml",
    ):
        assert rel in err
    assert "docs/runbooks.md" not in err
    assert _generate("--out", str(tmp_path)) == 0
    assert not (tmp_path / "prometheus" / "rules" / "old.yml").exists()
    assert generate.drift(files, tmp_path) == []


def test_a_second_write_changes_nothing(tmp_path: Path, files: dict[str, str]) -> None:
    assert generate.write(files, tmp_path)
    assert generate.write(files, tmp_path) == []


def test_yaml_overrides_reach_the_rules(tmp_path: Path) -> None:
    cfg_file = tmp_path / "rlpulse.yaml"
    cfg_file.write_text(
        "alerts:\n  entropy_collapse:\n    critical: 0.15\n    for: 7m\n"
        "receivers:\n  warning: webhook\n  webhook:\n    url: http://127.0.0.1:9/hook\n"
    )
    out = tmp_path / "out"
    assert _generate("--config", str(cfg_file), "--out", str(out)) == 0
    rl = yaml.safe_load((out / "prometheus/rules/rl.yml").read_text())
    assert any(
        "< 0.15 or" in r["expr"] and r["for"] == "7m"
        for r in rl["groups"][0]["rules"]
        if r.get("alert") == "RLEntropyCollapse"
    )
    am = yaml.safe_load((out / "alertmanager/alertmanager.yml").read_text())
    hook = next(r for r in am["receivers"] if r["name"] == "webhook")
    assert hook["webhook_configs"][0]["url"] == "http://127.0.0.1:9/hook"
    # the promtool scenarios are written for the default thresholds: left out here
    assert not (out / "prometheus" / "tests").exists()
    assert _generate("--config", str(cfg_file), "--out", str(out), "--check") == 0


BAD = [
    (
        "alerts:\n  entropy_collapse:\n    critical: abc\n",
        "alerts.entropy_collapse.critical: expected a number, got 'abc'",
    ),
    ("alerts:\n  entropy_colapse: {}\n", "alerts.entropy_colapse: unknown key (expected one of:"),
    (
        "alerts:\n  entropy_collapse:\n    for: 10 minutes\n",
        "alerts.entropy_collapse.for: expected a duration",
    ),
    (
        "receivers:\n  warning: email\n",
        "receivers.warning: expected one of ['slack', 'webhook'], got 'email'",
    ),
    (
        "alerts:\n  nonfinite_loss:\n    metrics: [rl_loss, rl_lss]\n",
        "alerts.nonfinite_loss.metrics[1]: 'rl_lss' is not an allowed value",
    ),
    (
        "scrape:\n  static_targets: 127.0.0.1:9400\n",
        "scrape.static_targets: expected a list, got '127.0.0.1:9400'",
    ),
    (
        "alerts:\n  gpu_idle:\n    enabled: 'yes'\n",
        "alerts.gpu_idle.enabled: expected true or false, got 'yes'",
    ),
    ("windows: 5m\n", "windows: expected a mapping of keys, got '5m'"),
    (
        "alerts:\n  entropy_collapse:\n    critical: .nan\n",
        "alerts.entropy_collapse.critical: expected a finite number, got nan",
    ),
    ("scrape:\n  username: prom\n", "scrape: username and password_file go together"),
    ("scrape:\n  ca_file: ca.crt\n", "scrape: ca_file, server_name, cert_file need scheme https"),
    ("- 1\n- 2\n", "top level: expected a mapping of keys"),
    ("alerts: {ratio: [\n", "not valid YAML"),
    (
        "scrape:\n  interval: 15s\n  timeout: 20s\n",
        "scrape.timeout: 20s is longer than scrape.interval 15s",
    ),
    ("windows:\n  rate: 20s\n", "windows.rate: 20s holds fewer than two scrapes"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_a_bad_key_or_value_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "rlpulse.yaml"
    path.write_text(text)
    with pytest.raises(config.ConfigError) as err:
        config.load(path)
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)


def test_the_cli_reports_a_bad_config_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rlpulse.yaml"
    path.write_text(BAD[0][0])
    assert _generate("--config", str(path), "--out", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert f"{path}: alerts.entropy_collapse.critical: expected a number, got 'abc'" in err
    assert not (tmp_path / "out").exists()


def test_an_empty_file_is_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "rlpulse.yaml"
    path.write_text("# nothing\n")
    assert config.load(path) == config.Config()


def _durations(obj: object, prefix: str = "") -> dict[str, str]:
    out = {}
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out.update(_durations(value, f"{prefix}{f.name}."))
        elif isinstance(value, str) and config._DURATION_RE.match(value):
            out[f"{prefix}{f.name}"] = value
    return out


def test_fast_preset_compresses_every_duration() -> None:
    slow, fast = _durations(config.Config()), _durations(config.fast())
    assert slow.keys() == fast.keys() and len(slow) > 40
    for key, value in slow.items():
        s, f = config.seconds(value), config.seconds(fast[key])
        if key.startswith(("scrape.", "federation.")):  # scrape intervals stay >= 1s
            assert f == max(1.0, s / config.FAST_FACTOR), key
        else:
            assert f == pytest.approx(s / config.FAST_FACTOR), key
    assert fast["windows.baseline"] == "6m"
    assert fast["alerts.entropy_collapse.keep_firing_for"] == "10s"


def test_generate_fast(tmp_path: Path) -> None:
    assert _generate("--fast", "--out", str(tmp_path)) == 0
    prom = yaml.safe_load((tmp_path / "prometheus/prometheus.yml").read_text())
    assert prom["global"]["evaluation_interval"] == "1s"
    assert "[6m:1s]" in (tmp_path / "prometheus/rules/system.yml").read_text()


@pytest.mark.parametrize(("secs", "text"), [(90, "1m30s"), (3600, "1h"), (0.5, "500ms"), (0, "0s")])
def test_duration_round_trip(secs: float, text: str) -> None:
    assert config.duration(secs) == text
    assert config.seconds(text) == secs


def test_configuration_doc_lists_every_key() -> None:
    text = configdoc.render()["docs/configuration.md"]

    def keys(obj: object, prefix: str = "") -> list[str]:
        out = []
        for f in dataclasses.fields(obj):  # type: ignore[arg-type]
            value = getattr(obj, f.name)
            key = f"{prefix}{config.yaml_key(f)}"
            out += keys(value, f"{key}.") if dataclasses.is_dataclass(value) else [key]
        return out

    every = keys(config.Config())
    assert len(every) > 80
    for key in every:
        assert f"| `{key}` |" in text, key
    assert "| `alerts.entropy_collapse.critical` | `0.2` |" in text
