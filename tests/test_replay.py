"""``rlpulse replay`` over the real-log corpus and over small logs with a known failure.

Every replay goes through the generated rules and promtool's own engine; the corpus
expectations are the corpus README's judgements of each run."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from rlpulse import cli
from rlpulse.logs import Record
from rlpulse.replay import ReplayResult, replay
from rlpulse.replay.onsets import AlertOnset
from rlpulse.replay.promtool import parse_failures, series_values
from rlpulse.replay.timeline import build

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "real-logs"

HEALTHY = (
    "trl/IMJONEZZ__UnslothGRPO__outputs_checkpoint-250_trainer_state.json",
    "trl/abdo-ashraf__Gemma-3-RL-Finetuning__outputs_checkpoint-250_trainer_state.json",
    "verl/volcengine__verl__examples_ppo_trainer_verl_getting_started.ipynb.outputs.log",
    "sb3/DLR-RM__rl-trained-agents__ppo_LunarLander-v2_1_0.monitor.csv",
    "other/morikatron__GAIL_PPO__sample_result_ppo_progress.csv",
)
# failing run -> (the alert its failure must raise, latest acceptable onset step)
FAILING = {
    # clipped_ratio is 0.6 from the first rows and ~1.0 from mid-run
    "trl/Rusheel86__Chaos-Economy__training_logs.json": ("RLTruncationHigh", 60),
    # entropy 0.77 -> 0.002 within the first ~10 steps
    "other/arvindcr4__tinker-rl-lab__experiments_results_arithmetic_metrics.jsonl": (
        "RLEntropyCollapse",
        30,
    ),
    # KL spikes (12 at step 5, 197 at 130, 179 at 1025): the spike rule fires on them
    "trl/samyakshrestha__grpo-verified-reasoner__outputs_checkpoint-1134_trainer_state.json": (
        "RLKLReferenceRising",
        140,
    ),
}


@functools.cache
def replayed(name: str) -> ReplayResult:
    return replay(CORPUS / name)


def fired(result: ReplayResult, alert: str, severity: str | None = None) -> list[AlertOnset]:
    return [a for a in result.alerts if a.alert == alert and severity in (None, a.severity)]


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_corpus_runs_page_nobody(name: str) -> None:
    result = replayed(name)
    assert result.critical() == [], [(a.alert, a.onset_step) for a in result.critical()]


@pytest.mark.parametrize("name", sorted(FAILING))
def test_failing_corpus_runs_raise_their_alert(
    name: str, record_property: Callable[[str, object], None]
) -> None:
    alert, latest = FAILING[name]
    hits = fired(replayed(name), alert)
    assert hits, f"{alert} did not fire on {name}"
    onset = min(a.onset_step for a in hits if a.onset_step is not None)
    record_property("onset_step", onset)
    print(f"{name}: {alert} from step {onset}")
    assert onset <= latest
    assert all(a.value is not None and math.isfinite(a.value) for a in hits)


def test_no_eval_series_keeps_the_hacking_alert_quiet() -> None:
    for name in (*HEALTHY, *FAILING):
        assert not fired(replayed(name), "RLRewardHacking"), name


def _jsonl(path: Path, rows: list[dict[str, float]]) -> Path:
    path.write_text("".join(json.dumps({"step": i, **r}) + "\n" for i, r in enumerate(rows)))
    return path


def test_entropy_collapse_onset_step_and_value(tmp_path: Path) -> None:
    rows = [{"entropy": 1.0 if s < 30 else 0.001, "reward": 0.5} for s in range(70)]
    result = replay(_jsonl(tmp_path / "collapse.jsonl", rows), framework="trl")
    (hit,) = fired(result, "RLEntropyCollapse")
    assert hit.severity == "critical"
    # the 10m mean falls below 0.2 of the peak 9 steps after the drop; then `for: 10m`
    assert 30 < hit.onset_step <= 30 + 9 + 10 + 1
    assert hit.value is not None and hit.value < 0.2
    assert hit.intervals[-1].end_step == 69


def test_nan_loss_fires_at_once(tmp_path: Path) -> None:
    rows = [{"loss": 0.5, "reward": 0.1} for _ in range(10)] + [{"loss": math.nan}] * 3
    result = replay(_jsonl(tmp_path / "nan.jsonl", rows), framework="trl")
    hits = fired(result, "RLNonFiniteLoss", "critical")
    assert hits and min(a.onset_step for a in hits) == 10


def test_config_overrides_change_the_rules(tmp_path: Path) -> None:
    cfg = tmp_path / "rlpulse.yaml"
    cfg.write_text("alerts:\n  truncation_high:\n    enabled: false\n")
    log = CORPUS / next(iter(FAILING))
    out = tmp_path / "out.json"
    code = _cli(["replay", str(log), "--json", "--config", str(cfg)], out)
    assert code == 0
    (entry,) = json.loads(out.read_text())
    assert "RLTruncationHigh" not in {a["alert"] for a in entry["alerts"]}


def _cli(argv: list[str], out: Path) -> int:
    import contextlib

    with open(out, "w") as fh, contextlib.redirect_stdout(fh):
        return cli.main(argv)


def test_cli_json_and_reports(tmp_path: Path) -> None:
    log = CORPUS / "other/arvindcr4__tinker-rl-lab__experiments_results_arithmetic_metrics.jsonl"
    out = tmp_path / "out.json"
    assert _cli(["replay", str(log), "--json", "--report", str(tmp_path / "r.md")], out) == 0
    (entry,) = json.loads(out.read_text())
    assert entry["run_id"] == log.stem and entry["records"] == 100
    collapse = [a for a in entry["alerts"] if a["alert"] == "RLEntropyCollapse"]
    assert collapse and set(collapse[0]) >= {"alert", "severity", "onset_step", "value"}
    md = (tmp_path / "r.md").read_text()
    png = tmp_path / f"r-{log.stem}.png"
    assert f"]({png.name})" in md and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| RLEntropyCollapse | critical |" in md
    assert _cli(["replay", str(log), "--report", str(tmp_path / "r.html")], out) == 0
    page = (tmp_path / "r.html").read_text()
    assert "data:image/png;base64," in page and "RLEntropyCollapse" in page
    assert "RLEntropyCollapse" in out.read_text()  # the text summary


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--report", "r.pdf"], "use a .md or .html"),
        (["--step-seconds", "0"], "--step-seconds must be positive"),
        (["--format", "jsonl", "--framework", "nope"], "unknown framework 'nope'"),
    ],
)
def test_cli_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    log = _jsonl(tmp_path / "x.jsonl", [{"reward": 1.0}])
    assert cli.main(["replay", str(log), *argv]) == 2
    assert message in capsys.readouterr().err


def test_cli_malformed_log_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "bad.jsonl"
    log.write_text('{"step": 1, "kl": 0.1}\n{"step": 2, "kl"\n')
    assert cli.main(["replay", str(log)]) == 2
    assert f"{log}: line 2: " in capsys.readouterr().err


def test_timeline_clock_and_scrapes() -> None:
    recs = [Record(10, None, {"reward": 1.0}), Record(20, None, {"reward": 2.0})]
    tl = build(recs, run_id="r", framework="trl", job="rlpulse", scrape_interval=15, step_seconds=3)
    # exporter up one scrape before the first record; 10 steps x 3 s later the second
    assert tl.record_times == [15.0, 45.0]
    assert (tl.step_at(0), tl.step_at(15), tl.step_at(44), tl.step_at(45)) == (None, 10, 10, 20)
    (key,) = tl.keys_of("rl_reward_mean")
    assert 'job="rlpulse"' in key and 'run_id="r"' in key and 'rank="0"' in key
    assert tl.values(key) == [None, 1.0, 1.0, 2.0]
    (up,) = tl.keys_of("up")
    assert tl.values(up) == [1.0] * 4
    stamp = tl.values(tl.keys_of("rl_last_step_timestamp_seconds")[0])
    assert stamp == [0.0, 15.0, 15.0, 45.0]


def test_timeline_uses_real_timestamps() -> None:
    recs = [Record(1, 1000.0, {"reward": 1.0}), Record(2, 1100.0, {"reward": 0.0})]
    tl = build(recs, run_id="r", framework=None, job="j", scrape_interval=10, step_seconds=999)
    assert tl.record_times == [10.0, 110.0]


def test_series_notation() -> None:
    assert series_values([(2, 1.0), (4, math.nan), (6, -0.5)], 8) == "_x2 1.0+0x1 NaN NaN -0.5+0x1"
    assert series_values([(0, math.inf)], 1) == "Inf"


def test_parse_promtool_failures() -> None:
    output = "\n".join(  # promtool's own layout, trailing blanks included
        [
            "Unit Testing:  t.yml",
            "  FAILED:",
            "    alertname: RLX, time: 1h2m15s, ",
            "        exp:[], ",
            "        got:[",
            "            0:",
            '              Labels:{alertname="RLX", run_id="a \\"b\\"", severity="critical"}',
            '              Annotations:{rlpulse_replay_value="0.5", summary="x"},',
            "            1:",
            '              Labels:{alertname="RLX", run_id="a", severity="warning"}',
            '              Annotations:{rlpulse_replay_value="NaN"}',
            "            ]",
        ]
    )
    a, b = parse_failures(output)
    assert (a.alert, a.seconds, dict(a.labels)["run_id"], a.value) == ("RLX", 3735.0, 'a "b"', 0.5)
    assert dict(b.labels)["severity"] == "warning" and b.value is not None and math.isnan(b.value)


def test_tensorboard_run_directory_with_real_time(tmp_path: Path) -> None:
    """A CleanRL-style run written by a real SummaryWriter, replayed on its own wall clock."""
    from tensorboardX import SummaryWriter

    run = tmp_path / "CartPole__ppo__1"
    writer = SummaryWriter(str(run))
    for step in range(40):
        entropy = 0.69 if step < 10 else 0.0005
        writer.add_scalar("losses/entropy", entropy, step, walltime=5000.0 + 60 * step)
        writer.add_scalar("charts/episodic_return", 20.0 + step, step, walltime=5000.0 + 60 * step)
    writer.close()
    result = replay(run, step_seconds=1)  # timestamps win over --step-seconds
    assert result.format == "tensorboard" and result.run_id == "CartPole__ppo__1"
    assert result.timeline.record_times[-1] == 15 + 39 * 60
    (hit,) = fired(result, "RLEntropyCollapse")
    assert 10 < hit.onset_step < 35
