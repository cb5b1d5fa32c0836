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

from harness.corpus import CORPUS, FILES, needs_corpus
from rlpulse import cli
from rlpulse.offline.logs import Record, read_log
from rlpulse.offline.replay import ReplayResult, promtool, replay, replay_runs, report
from rlpulse.offline.replay.onsets import AlertOnset
from rlpulse.offline.replay.promtool import parse_failures, series_values
from rlpulse.offline.replay.timeline import (
    MAX_GAP_STEPS,
    Timeline,
    build,
    framework_hint,
    segments,
    series_key,
)
from rlpulse.stack import config

HEALTHY = (
    "trl/IMJONEZZ__UnslothGRPO__outputs_checkpoint-250_trainer_state.json",
    "trl/abdo-ashraf__Gemma-3-RL-Finetuning__outputs_checkpoint-250_trainer_state.json",
    "verl/volcengine__verl__examples_ppo_trainer_verl_getting_started.ipynb.outputs.log",
    "sb3/DLR-RM__rl-trained-agents__ppo_LunarLander-v2_1_0.monitor.csv",
    "other/morikatron__GAIL_PPO__sample_result_ppo_progress.csv",
    # saturated at reward 1.0 with every group constant: a trap for zero-std rules
    "tinker-cookbook/thinking-machines-lab__tinker-cookbook__tinker_cookbook__recipes__cog_rl__"
    "results__experiment_6__training_metrics.jsonl",
    # slow starter with 44% of its completions truncated at the start
    "tinker-cookbook/joanvelja__tinker-cookbook__reports__data__qwen3-30b-instruct-v3b-metrics.jsonl",
    "deepspeed-chat/microsoft__DeepSpeedExamples__applications__DeepSpeed-Chat__training__step3_"
    "rlhf_finetuning__training_log_output__actor_opt-1.3b_critic_opt-350m_globalBatchSize64.log",
    "rllib/ray-project__rl-experiments__atari-apex__apex-results__APEX_BeamRiderNoFrameskip-v4_1_"
    "env=BeamRiderNoFrameskip-v4_2018-09-29_02-01-28uVT3Mg__result.json",
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
        "RLKLReferenceSpike",
        140,
    ),
    # DQN seed #2 of Dopamine's Seaquest collapses after learning from iteration 155
    "dopamine/google__dopamine__baselines__atari__data__seaquest.json#DQN #2": (
        "RLRewardCollapse",
        165,
    ),
}


# Detection follows the logged step, so a minute or 15 s of simulated time per step raises the
# same RL alerts; 15 s is one rule evaluation per step (four times fewer than the default).
STEP_SECONDS = 15.0
FAST = ("--step-seconds", f"{STEP_SECONDS:g}")  # the CLI's flag for the same


@functools.cache
def replayed(name: str) -> ReplayResult:
    """One run of a corpus log (``file#run`` for one of a log holding several)."""
    path, _, run = name.partition("#")
    if not run:
        return replay(CORPUS / path, step_seconds=STEP_SECONDS)
    (result,) = replay_runs(CORPUS / path, runs={run}, step_seconds=STEP_SECONDS)
    return result


def fired(result: ReplayResult, alert: str, severity: str | None = None) -> list[AlertOnset]:
    return [a for a in result.alerts if a.alert == alert and severity in (None, a.severity)]


@needs_corpus
@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_corpus_runs_page_nobody(name: str) -> None:
    result = replayed(name)
    assert result.critical() == [], [(a.alert, a.onset_step) for a in result.critical()]


@needs_corpus
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


@needs_corpus
def test_no_eval_series_keeps_the_hacking_alert_quiet() -> None:
    for name in (*HEALTHY, *FAILING):
        assert not fired(replayed(name), "RLRewardHacking"), name


def _jsonl(path: Path, rows: list[dict[str, float]]) -> Path:
    path.write_text("".join(json.dumps({"step": i, **r}) + "\n" for i, r in enumerate(rows)))
    return path


def test_entropy_collapse_onset_step_and_value(tmp_path: Path) -> None:
    rows = [{"entropy": 1.0 if s < 30 else 0.001, "reward": 0.5} for s in range(70)]
    result = replay(_jsonl(tmp_path / "collapse.jsonl", rows), framework="trl")
    (hit,) = fired(result, "RLEntropyCollapse", "critical")
    # the median of the last 5 entropies falls below 0.2 of its peak at the third low value;
    # the rule fires at the next evaluation, whatever the wall time between steps
    assert 30 < hit.onset_step <= 33
    assert hit.value is not None and hit.value < 0.2
    assert hit.intervals[-1].end_step == 69


@pytest.mark.parametrize("step_seconds", [0.05, 1200.0])
def test_detection_follows_the_step_not_the_clock(tmp_path: Path, step_seconds: float) -> None:
    """The same collapse logged every 50 ms or every 20 minutes is caught: on slow steps at the
    third low value, on fast ones at the first evaluation after it (the whole 16-step run is
    0.8 s long, shorter than a scrape interval: the signal is held until a scrape reads it).
    Ten steps make the peak (promtool evaluates the slow run's 5 h every 15 s)."""
    rows = [{"entropy": 1.0 if s < 10 else 0.001, "reward": 0.5} for s in range(16)]
    log = _jsonl(tmp_path / "collapse.jsonl", rows)
    result = replay(log, framework="trl", step_seconds=step_seconds)
    (hit,) = fired(result, "RLEntropyCollapse", "critical")
    if step_seconds > 60:
        assert 10 < hit.onset_step <= 13
    else:
        assert hit.onset_seconds <= 15 + 13 * step_seconds + 2 * result.eval_interval
    # the page names the step of the first low value as the onset, whatever the clock
    assert hit.since_step == 10
    assert hit.as_dict(result.eval_interval)["since_step"] == 10
    assert not fired(result, "RLTrainingStalled")


def test_an_sb3_run_folder_pages_a_dead_reward_its_running_mean_hides(tmp_path: Path) -> None:
    """Issue 24.7 in replay: from episode 200 every episode returns 0. The 100-episode mean in
    progress.csv only drifts down; the Monitor file beside it, read as the live callback reads
    episodes, shows a reward that varied and now never moves."""
    import random

    rng = random.Random(3)
    balanced = [rng.uniform(20, 60) + i / 2 for i in range(240)]  # what the policy earns
    returns = balanced[:200] + [0.0] * 40  # (the reward wrapper answers 0 from episode 200)
    lengths = [int(r) + 10 for r in balanced]  # the policy balances on
    episodes = "".join(
        f"{r:.1f},{n},{i:.1f}\n" for i, (r, n) in enumerate(zip(returns, lengths, strict=True))
    )
    (tmp_path / "monitor.csv").write_text('#{"t_start": 0.0}\nr,l,t\n' + episodes)
    rows, done = [], 0
    for i in range(0, len(returns), 4):  # DQN-style: a dump every 4 episodes
        done += sum(lengths[i : i + 4])
        window = returns[max(0, i + 4 - 100) : i + 4]
        rows.append(f"{done},{i * 8},{sum(window) / len(window):.2f},{done // 60}")
    (tmp_path / "progress.csv").write_text(
        "time/total_timesteps,train/n_updates,rollout/ep_rew_mean,time/time_elapsed\n"
        + "\n".join(rows)
        + "\n"
    )
    result = replay(tmp_path, step_seconds=60)
    assert result.format == "sb3-run"
    (lost,) = fired(result, "RLRewardSignalLost", "critical")
    assert lost.labels["series"] == "episodes" and lost.onset_step is not None
    assert lost.onset_step >= 200 * 8
    # episodes as long as before fell back below the run's first ones: a collapse too (24.8)
    (fell,) = [
        a for a in fired(result, "RLRewardCollapse", "critical") if a.labels["series"] == "episodes"
    ]
    assert fell.onset_step is not None and 200 * 8 <= fell.onset_step <= lost.onset_step
    # the rows count the env steps (time/total_timesteps), the episodes do not add theirs
    assert not fired(result, "RLExporterDroppedValues")
    (steps,) = [k for k in result.timeline.series if k.startswith("rl_env_steps_total{")]
    assert result.timeline.values(steps)[-1] == done


def test_the_rows_clock_reads_every_logged_step_whatever_the_run_s_pace(tmp_path: Path) -> None:
    """A fast run logs many rows between two scrapes: on its own clock an alert fires at the
    next scrape, rows after the damage; ``--clock rows`` gives each logged step its own scrape
    (the lead in logged steps), and the page names the same onset step on either clock."""
    rows = [
        {"entropy": 1.0 if s < 100 else 0.001, "reward": 0.5, "timestamp": 1e9 + s / 10}
        for s in range(200)
    ]
    log = _jsonl(tmp_path / "fast.jsonl", rows)
    paced, by_rows = replay(log, framework="trl"), replay(log, framework="trl", rows=True)
    (slow,) = fired(paced, "RLEntropyCollapse", "critical")
    (fast,) = fired(by_rows, "RLEntropyCollapse", "critical")
    assert slow.onset_step is not None and slow.onset_step > 110
    assert fast.onset_step is not None and 100 <= fast.onset_step <= 103
    assert slow.since_step == fast.since_step == 100
    assert by_rows.timeline.scrapes >= 200


def test_nan_loss_fires_at_once(tmp_path: Path) -> None:
    rows = [{"loss": 0.5, "reward": 0.1} for _ in range(10)] + [{"loss": math.nan}] * 3
    result = replay(_jsonl(tmp_path / "nan.jsonl", rows), framework="trl")
    hits = fired(result, "RLNonFiniteLoss", "critical")
    assert hits and min(a.onset_step for a in hits) == 10


@needs_corpus
def test_config_overrides_change_the_rules(tmp_path: Path) -> None:
    cfg = tmp_path / "rlpulse.yaml"
    cfg.write_text("alerts:\n  truncation_high:\n    enabled: false\n")
    log = CORPUS / next(iter(FAILING))
    out = tmp_path / "out.json"
    code = _cli(["replay", str(log), "--json", "--config", str(cfg), *FAST], out)
    assert code == 0
    (entry,) = json.loads(out.read_text())
    assert "RLTruncationHigh" not in {a["alert"] for a in entry["alerts"]}


def _cli(argv: list[str], out: Path) -> int:
    import contextlib

    with open(out, "w") as fh, contextlib.redirect_stdout(fh):
        return cli.main(argv)


@needs_corpus
def test_cli_json_and_reports(tmp_path: Path) -> None:
    log = CORPUS / "other/arvindcr4__tinker-rl-lab__experiments_results_arithmetic_metrics.jsonl"
    out = tmp_path / "out.json"
    assert _cli(["replay", str(log), "--json", "--report", str(tmp_path / "r.md"), *FAST], out) == 0
    (entry,) = json.loads(out.read_text())
    assert entry["run_id"] == log.stem and entry["records"] == 100
    collapse = [a for a in entry["alerts"] if a["alert"] == "RLEntropyCollapse"]
    assert collapse and set(collapse[0]) >= {"alert", "severity", "onset_step", "value"}
    md = (tmp_path / "r.md").read_text()
    png = tmp_path / f"r-{log.stem}.png"
    assert f"]({png.name})" in md and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| RLEntropyCollapse | critical |" in md
    assert _cli(["replay", str(log), "--report", str(tmp_path / "r.html"), *FAST], out) == 0
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


def test_a_series_is_found_by_labels_whose_values_hold_commas() -> None:
    """An eval series is labelled ``series="reward,eval"``: the page's since step of an
    RLEvalDrop is read from the series that carries exactly that value."""
    tl = Timeline("r", 15.0, scrapes=3)
    onset = "rl_failure_onset_step"
    for series, step in (("reward,eval", 40.0), ("reward", 7.0)):
        tl.series[series_key(onset, {"alertname": "RLEvalDrop", "series": series})] = [(1, step)]
    want = {"alertname": "RLEvalDrop", "series": "reward,eval"}
    assert tl.value_at(onset, want, 30.0) == 40.0
    assert tl.value_at(onset, {**want, "series": "reward"}, 30.0) == 7.0
    assert tl.value_at(onset, want, 0.0) is None  # not scraped yet


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
        ret = 20.0 + min(step, 10)  # (a return still rising as entropy goes is learning)
        writer.add_scalar("charts/episodic_return", ret, step, walltime=5000.0 + 60 * step)
    writer.close()
    result = replay(run, step_seconds=1)  # timestamps win over --step-seconds
    assert result.format == "tensorboard" and result.run_id == "CartPole__ppo__1"
    assert result.timeline.record_times[-1] == 15 + 39 * 60
    (hit,) = fired(result, "RLEntropyCollapse", "critical")
    assert 10 < hit.onset_step < 35


# ---- every corpus file becomes scraped series (no promtool: cheap), run by run ------------------
@functools.cache  # the Dopamine and Ape-X logs are read by two tests each
def _timelines(path: Path, **options: object) -> tuple[tuple[str, object], ...]:
    fmt = FILES[str(path.relative_to(CORPUS))].format
    framework = framework_hint(path, fmt)
    return tuple(
        (
            name,
            build(
                records,
                run_id=name or "r",
                framework=framework,
                job="rlpulse",
                scrape_interval=15,
                step_seconds=60,
                **options,  # type: ignore[arg-type]
            ),
        )
        for name, records in segments(read_log(path, fmt))
    )


# corpus file prefix -> a metric its replay must carry (what its judgement rests on)
CARRIES = {
    "tinker-cookbook/astOwOlfo": "rl_eval_score",  # honest_success_ratio, the objective
    "tinker-cookbook/thinking-machines-lab": "rl_success_ratio",
    "tinker-cookbook/joanvelja": "rl_eval_score",
    "deepspeed-chat/": "rl_policy_loss",
    "dopamine/": "rl_episode_return",
    "rllib/ray-project__rl-experiments__atari-apex": "rl_episode_return",
    "rllib/ray-project__rl-experiments__atari-impala": "rl_grad_norm",
    "sb3/SpencerCPurdy": "rl_eval_score",
}


@needs_corpus
@pytest.mark.parametrize("name", sorted(FILES))
def test_every_corpus_file_replays_run_by_run(name: str) -> None:
    expected = FILES[name]
    runs = _timelines(CORPUS / name)
    assert len(runs) == expected.segments
    assert sum(len(tl.record_steps) for _, tl in runs) == expected.records
    for _, tl in runs:
        # bounded: at most MAX_GAP_STEPS x 60 s per record, 15 s scrapes, one more at the start
        assert tl.scrapes <= 1 + len(tl.record_steps) * MAX_GAP_STEPS * 4 + 1
        assert not tl.keys_of("rlpulse_dropped_values_total"), name
    carried = next((m for p, m in CARRIES.items() if name.startswith(p)), None)
    if carried:
        assert all(tl.keys_of(carried) for _, tl in runs), carried


@needs_corpus
def test_rllib_no_episode_nan_rows_are_no_value() -> None:
    """Iterations 1, 136, 215 and 219 of the Ape-X run finished no episode: Tune wrote their
    mean return as NaN, which is no value (never a non-finite reward: that pages)."""
    name = next(n for n in FILES if n.startswith("rllib/ray-project__rl-experiments__atari-apex"))
    ((_, tl),) = _timelines(CORPUS / name)
    counted = [k for k in tl.keys_of("rl_nonfinite_values_total") if "rl_episode_return" in k]
    assert all(tl.values(k)[-1] == 0 for k in counted)
    (ret,) = tl.keys_of("rl_episode_return")
    assert all(v == v for v in tl.values(ret))  # never NaN: the last value is held


@needs_corpus
def test_dopamine_runs_are_replayed_apart(tmp_path: Path) -> None:
    name = next(n for n in FILES if n.startswith("dopamine/"))
    runs = dict(_timelines(CORPUS / name))
    assert "DQN #2" in runs and "Rainbow #5" in runs
    tl = runs["DQN #2"]
    assert tl.record_steps == list(range(199))  # its own clock, from its own first iteration
    (key,) = tl.keys_of("rl_episode_return")
    assert 'run_id="DQN #2"' in key


# ---- replay robustness ------------------------------------------------------------------------
def test_restarted_step_counter_is_a_second_run(tmp_path: Path) -> None:
    rows = [{"step": s, "reward": 0.5} for s in (*range(5), *range(3))]
    log = tmp_path / "resumed.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = replay_runs(log, framework="trl")
    assert [r.run_id for r in results] == ["resumed", "resumed/#2"]
    assert [len(r.timeline.record_steps) for r in results] == [5, 3]
    text = report.text(results)
    assert f"{log} (jsonl" in text and f"{log} run resumed/#2 (jsonl" in text
    with pytest.raises(ValueError, match="holds 2 runs"):
        replay(log)


def test_huge_step_jumps_stay_bounded() -> None:
    recs = [Record(0, None, {"reward": 1.0}), Record(int(1e300), None, {"reward": 2.0})]
    recs += [Record(int(1e300) + 10**6 * i, None, {"reward": 3.0}) for i in range(1, 50)]
    tl = build(recs, run_id="r", framework="trl", job="j", scrape_interval=15, step_seconds=60)
    assert tl.record_times[1] - tl.record_times[0] == MAX_GAP_STEPS * 60
    assert tl.scrapes == 2 + 50 * MAX_GAP_STEPS * 4  # 51 records: the first at 15 s
    assert sum(len(runs) for runs in tl.series.values()) < 2000  # unchanged scrapes cost nothing


def test_long_pauses_in_logged_time_stay_bounded() -> None:
    day = 86_400.0
    recs = [Record(i, 1e9 + i * 30 * day, {"reward": 1.0}) for i in range(4)]
    tl = build(recs, run_id="r", framework="trl", job="j", scrape_interval=15, step_seconds=60)
    assert tl.record_times == [15.0, 15.0 + 6 * 3600, 15.0 + 12 * 3600, 15.0 + 18 * 3600]


def test_promtool_file_durations_at_any_size() -> None:
    recs = [Record(0, None, {"reward": 1.0}), Record(1, None, {"reward": 0.5})]
    tl = build(recs, run_id="r", framework="trl", job="j", scrape_interval=15, step_seconds=1e6)
    doc = promtool.test_file(tl, config.Config(), [], ["RLX"])
    times = [t["eval_time"] for t in doc["tests"][0]["alert_rule_test"]]
    assert times[:2] == ["0s", "15s"] and times[-1] == "11d13h47m"  # 1,000,020 s
    assert doc["tests"][0]["interval"] == "15s" and not any("e+" in t for t in times)


def test_a_run_past_a_million_seconds_replays(tmp_path: Path) -> None:
    cfg = config.from_dict(
        {
            "scrape": {"interval": "1h", "evaluation_interval": "1h", "timeout": "10s"},
            "windows": {"rate": "2h", "recent": "2h"},
        }
    )
    log = _jsonl(tmp_path / "long.jsonl", [{"loss": 0.5, "reward": 0.1}] * 30)
    result = replay(log, cfg=cfg, step_seconds=40_000, framework="trl")
    assert result.timeline.duration > 1e6 and result.timeline.record_steps[-1] == 29


def test_sb3_update_counter_and_step_agree(tmp_path: Path) -> None:
    log = tmp_path / "progress.csv"
    rows = [f"{2048 * (i + 1)},{10 * i if i else ''},{i}.0,0.01" for i in range(20)]
    log.write_text(
        "time/total_timesteps,train/n_updates,rollout/ep_rew_mean,train/approx_kl\n"
        + "\n".join(rows)
        + "\n"
    )
    tl = build(
        read_log(log), run_id="r", framework="sb3", job="j", scrape_interval=15, step_seconds=60
    )
    assert not tl.keys_of("rlpulse_dropped_values_total")
    (steps,) = tl.keys_of("rl_train_steps_total")
    assert tl.values(steps)[-1] == 190
    (env,) = tl.keys_of("rl_env_steps_total")
    assert tl.values(env)[-1] == 2048 * 20


def test_verl_null_losses_count_as_non_finite() -> None:
    recs = [Record(s, None, {"actor/pg_loss": 0.1}) for s in range(3)]
    recs.append(Record(3, None, {"actor/pg_loss": math.nan}))  # what verl-jsonl reads for null
    tl = build(recs, run_id="r", framework="verl", job="j", scrape_interval=15, step_seconds=60)
    (key,) = tl.keys_of("rl_nonfinite_values_total")
    assert 'metric="rl_policy_loss"' in key and tl.values(key)[-1] == 1


def test_cli_key_map_declares_the_objective(tmp_path: Path) -> None:
    log = _jsonl(
        tmp_path / "hack.jsonl",
        [{"reward/mean": 0.2 + 0.01 * s, "reward/true_correct": 0.01} for s in range(20)],
    )
    keymap = tmp_path / "keys.yaml"
    keymap.write_text("reward/true_correct: objective\n")
    out = tmp_path / "out.json"
    assert _cli(["replay", str(log), "--json", "--key-map", str(keymap)], out) == 0
    (runs,) = [replay_runs(log, key_map=keymap)]
    (key,) = runs[0].timeline.keys_of("rl_eval_score")
    assert 'split="objective"' in key and 'benchmark="reward/true_correct"' in key
    bad = tmp_path / "bad.yaml"
    bad.write_text("reward/true_correct: rl_nope\n")
    assert cli.main(["replay", str(log), "--key-map", str(bad)]) == 2


def test_sb3_tensorboard_steps_and_update_counter_do_not_collide() -> None:
    """SB3's TensorBoard step is num_timesteps; train/n_updates is smaller and must not feed
    rl_train_steps_total against it (every row was a negative increment)."""
    recs = [
        Record(2048 * (i + 1), 100.0 + i, {"train/n_updates": 10.0 * i, "train/value_loss": 1.0})
        for i in range(10)
    ]
    tl = build(recs, run_id="r", framework="sb3", job="j", scrape_interval=15, step_seconds=60)
    assert not tl.keys_of("rlpulse_dropped_values_total")
    (steps,) = tl.keys_of("rl_train_steps_total")
    assert tl.values(steps)[-1] == 2048 * 10


def test_one_run_of_a_log_of_several(tmp_path: Path) -> None:
    rows = [{"step": s, "reward": 0.5} for s in (*range(5), *range(3), *range(4))]
    log = tmp_path / "restarts.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (only,) = replay_runs(log, framework="trl", runs={"#3"})
    assert only.run_id == "restarts/#3" and len(only.timeline.record_steps) == 4
    with pytest.raises(ValueError, match=r"no run named \['DQN #9'\]; its runs: '', '#2', '#3'"):
        replay_runs(log, runs={"DQN #9"})
    out = tmp_path / "out.json"
    assert _cli(["replay", str(log), "--json", "--run", "#2", "--run", "#3"], out) == 0
    assert [e["run_id"] for e in json.loads(out.read_text())] == ["restarts/#2", "restarts/#3"]
