"""Evaluate the generated alert rules over a replayed run with Prometheus' own rule engine.

The run's series become the ``input_series`` of a ``promtool test rules`` file, next to the rule
files ``rlpulse generate`` writes (``rlpulse.stack.rules.render``). promtool's engine evaluates
every group at each evaluation interval over the whole run, ``for`` windows included; the file
asks, at every evaluation time and for every alert name, that no alert fires, so each firing alert
comes back as a failure listing its labels and annotations. The only change to the rules is one
extra annotation, ``rlpulse_replay_value: {{ $value }}``, so the value at onset is reported too;
expressions, ``for`` durations and labels are untouched.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rlpulse.offline.replay.timeline import Timeline, label_pairs
from rlpulse.runtime import tempdirs
from rlpulse.stack import rules as rulesmod
from rlpulse.stack.config import Config, duration, seconds

VALUE_ANNOTATION = "rlpulse_replay_value"
TIMEOUT_SECONDS = 1800


class PromtoolError(RuntimeError):
    """promtool is missing or failed for a reason other than firing alerts."""


@dataclass(frozen=True)
class Firing:
    """One alert (name + label set) firing at one evaluation time."""

    alert: str
    labels: tuple[tuple[str, str], ...]
    annotations: tuple[tuple[str, str], ...]
    seconds: float

    @property
    def value(self) -> float | None:
        raw = dict(self.annotations).get(VALUE_ANNOTATION)
        try:
            return float(raw) if raw is not None else None
        except ValueError:
            return None


def rule_files(cfg: Config) -> dict[str, dict[str, Any]]:
    """The generated rule files (path -> parsed YAML), each alert with the value annotation."""
    out = {}
    for path, text in rulesmod.render(cfg).items():
        doc = yaml.safe_load(text)
        for group in doc.get("groups", []):
            for rule in group.get("rules", []):
                if "alert" in rule:
                    rule.setdefault("annotations", {})[VALUE_ANNOTATION] = "{{ $value }}"
        out[path] = doc
    return out


_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_ALWAYS = ("absent", "vector(", "__name__")  # expressions that can yield series without inputs


def prune(files: dict[str, dict[str, Any]], present: set[str]) -> dict[str, dict[str, Any]]:
    """The rule files without the rules that provably yield nothing on this run: a rule none of
    whose series names (directly or through recording rules) is among ``present`` evaluates to
    an empty vector at every step, so leaving it out changes no result and saves evaluations."""
    records = {
        rule["record"]: rule["expr"]
        for doc in files.values()
        for group in doc.get("groups", [])
        for rule in group.get("rules", [])
        if "record" in rule
    }
    live: dict[str, bool] = {}

    def alive(expr: str, seen: frozenset[str] = frozenset()) -> bool:
        if any(token in expr for token in _ALWAYS):
            return True
        for name in set(_IDENT.findall(expr)):
            if name in present:
                return True
            if name in records and name not in seen:
                if name not in live:
                    live[name] = alive(records[name], seen | {name})
                if live[name]:
                    return True
        return False

    out = {}
    for path, doc in files.items():
        groups = []
        for group in doc.get("groups", []):
            kept = [r for r in group.get("rules", []) if alive(str(r["expr"]))]
            if kept:
                groups.append({**group, "rules": kept})
        if groups:
            out[path] = {**doc, "groups": groups}
    return out


def alert_names(files: dict[str, dict[str, Any]]) -> list[str]:
    """Every alert name in the rule files, in file order, once."""
    names: dict[str, None] = {}
    for doc in files.values():
        for group in doc.get("groups", []):
            for rule in group.get("rules", []):
                if "alert" in rule:
                    names[rule["alert"]] = None
    return list(names)


def _token(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    return repr(value)


def series_values(runs: list[tuple[int, float]], total: int) -> str:
    """promtool's expanding notation for run-length encoded samples (``_`` before the first)."""
    parts = [f"_x{runs[0][0]}"] if runs and runs[0][0] else []
    for n, (start, value) in enumerate(runs):
        length = (runs[n + 1][0] if n + 1 < len(runs) else total) - start
        token = _token(value)
        if math.isfinite(value):
            parts.append(token if length == 1 else f"{token}+0x{length - 1}")
        else:
            parts.extend([token] * length)
    return " ".join(parts)


def test_file(
    tl: Timeline, cfg: Config, rule_paths: list[str], alerts: list[str]
) -> dict[str, Any]:
    """The promtool unit-test document for one replayed run."""
    step = seconds(cfg.scrape.evaluation_interval)
    evals = int(tl.duration // step) + 1
    return {
        "rule_files": rule_paths,
        "evaluation_interval": cfg.scrape.evaluation_interval,
        "tests": [
            {
                "interval": duration(tl.interval),
                "input_series": [
                    {"series": key, "values": series_values(runs, tl.scrapes)}
                    for key, runs in tl.series.items()
                ],
                "alert_rule_test": [
                    {"eval_time": duration(i * step), "alertname": name, "exp_alerts": []}
                    for i in range(evals)
                    for name in alerts
                ],
            }
        ],
    }


_BLOCK = re.compile(r"^\s*alertname: (\S+), time: (\S+),\s*$")
_LABELS = re.compile(r"^\s*Labels:(\{.*\}),?\s*$")
_ANNOTATIONS = re.compile(r"^\s*Annotations:(\{.*\}),?\s*$")
# promtool prints eval times as Prometheus durations: days, weeks and years past a day
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|y|w|d|h|m|s)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_UNIT["y"] = 365 * _UNIT["d"]


def _go_duration(text: str) -> float:
    return sum(float(n) * _UNIT[u] for n, u in _DURATION.findall(text))


def parse_failures(output: str) -> Iterator[Firing]:
    """The firing alerts in promtool's report of failed ``exp_alerts: []`` checks."""
    alert, at, labels = "", 0.0, None
    for line in output.splitlines():
        if m := _BLOCK.match(line):
            alert, at, labels = m.group(1), _go_duration(m.group(2)), None
        elif m := _LABELS.match(line):
            labels = label_pairs(m.group(1))
        elif (m := _ANNOTATIONS.match(line)) and labels is not None:
            yield Firing(alert, labels, label_pairs(m.group(1)), at)
            labels = None


def evaluate(tl: Timeline, cfg: Config, promtool: str | None = None) -> list[Firing]:
    """Every (alert, labels, evaluation time) at which a generated alert fires on ``tl``."""
    exe = promtool or shutil.which("promtool")
    if not exe:
        raise PromtoolError(
            "promtool not found: install Prometheus' promtool (apt-get install prometheus)"
        )
    files = prune(rule_files(cfg), {key.split("{", 1)[0] for key in tl.series})
    alerts = alert_names(files)
    if not alerts:
        return []
    with tempdirs.temporary_dir("replay") as tmp:  # a killed replay's is swept by the next
        paths = []
        for rel, doc in files.items():
            path = Path(tmp) / Path(rel).name
            path.write_text(yaml.safe_dump(doc, sort_keys=False, width=10_000))
            paths.append(str(path))
        test = Path(tmp) / "replay_test.yml"
        test.write_text(json.dumps(test_file(tl, cfg, paths, alerts)))  # JSON is YAML
        proc = subprocess.run(
            [exe, "test", "rules", str(test)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
    output = proc.stdout + proc.stderr
    firings = list(parse_failures(output))
    if proc.returncode != 0 and not firings:
        raise PromtoolError(
            f"promtool test rules failed (exit {proc.returncode}): {output[-2000:]}"
        )
    if "err:" in output or "error" in output.lower().split("failed:")[0]:
        raise PromtoolError(f"promtool reported an evaluation error: {output[-2000:]}")
    return firings
