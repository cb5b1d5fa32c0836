"""``rlpulse demo`` end to end in-process: it serves all three layers over HTTP through the
public API, keeps serving while the stall scenario hangs, and rejects bad options clearly."""

from __future__ import annotations

import io
import re
import threading
import time
from collections.abc import Callable

import pytest

from rlpulse import catalog, keys
from rlpulse.cli import main
from rlpulse.demo import scenarios
from rlpulse.demo.run import DemoOptions, run_demo
from rlpulse.offline.logs import read_log, resolve_format
from tests.conftest import samples, scrape


def wait_until(cond: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def series_of(text: str, metric: str) -> dict[frozenset[tuple[str, str]], float]:
    return {lbls: v for (n, lbls), v in samples(text).items() if n == metric}


def name(metric: str, suffix: str = "") -> str:
    return catalog.get(metric).name + suffix


def test_stalled_demo_serves_all_three_layers(tmp_path) -> None:
    out, stop = io.StringIO(), threading.Event()
    opts = DemoOptions(
        scenario="stall",
        steps=100,
        port=0,
        addr="127.0.0.1",
        run_id="demo-test",
        progress_every=5,
        data_dir=str(tmp_path),
    )
    worker = threading.Thread(target=run_demo, args=(opts, out, stop), daemon=True)
    worker.start()
    try:
        wait_until(lambda: "never arrives" in out.getvalue(), 60, "the stall")
        url = re.search(r"metrics at (\S+)", out.getvalue()).group(1)  # type: ignore[union-attr]
        text = scrape(url)
        time.sleep(1.0)
        again = scrape(url)
    finally:
        stop.set()
        worker.join(30)
    assert not worker.is_alive(), "stop() released the hung collective"
    hung = scenarios.HANG_AT_STEP - 1
    for body in (text, again):
        steps = series_of(body, name("rl_step"))
        assert list(steps.values()) == [hung], "steps stop advancing, the endpoint stays up"
    ident = {("run_id", "demo-test"), ("rank", "0")}
    got = samples(text)
    assert all(ident <= set(lbls) for (n, lbls) in got if n.startswith("rl_"))

    # system: throughput, phases, rollout and grader latency
    phases = {
        dict(lbls)["phase"] for lbls in series_of(text, name("rl_phase_duration_seconds", "_count"))
    }
    assert phases == {"rollout", "reward", "ref", "update", "eval"}
    n_samples = hung * 16 * 8
    assert list(series_of(text, name("rl_samples_total")).values()) == [n_samples]
    assert list(series_of(text, name("rl_rollout_duration_seconds", "_count")).values()) == [
        n_samples
    ]
    assert list(series_of(text, name("rl_grader_calls_total")).values()) == [n_samples]
    assert list(series_of(text, name("rl_grader_duration_seconds", "_count")).values()) == [
        n_samples
    ]
    assert next(iter(series_of(text, name("rl_completion_tokens_total")).values())) > n_samples * 4
    # RL: reward, KL, entropy, clipping, advantages, losses (from the TRL-style log dict)
    for metric in (
        "rl_reward_mean",
        "rl_reward_std",
        "rl_kl_reference",
        "rl_kl_coefficient",
        "rl_entropy",
        "rl_zero_std_groups_ratio",
        "rl_advantage_std",
        "rl_loss",
    ):
        assert len(series_of(text, name(metric))) == 1, metric
    bounds = {dict(lbls).get("bound") for lbls in series_of(text, name("rl_clip_fraction_ratio"))}
    assert {"low", "high"} <= bounds
    comps = {dict(lbls)["component"] for lbls in series_of(text, name("rl_reward_component_mean"))}
    assert comps == {"correctness", "format", "length"}
    # task: eval scores kept apart by split, lengths, truncation, format
    scores = {dict(lbls)["split"]: v for lbls, v in series_of(text, name("rl_eval_score")).items()}
    assert set(scores) == {"train", "eval"} and 0 <= scores["eval"] <= 1
    for metric in ("rl_truncation_ratio", "rl_format_compliance_ratio", "rl_success_ratio"):
        assert len(series_of(text, name(metric))) == 1, metric
    assert list(series_of(text, name("rl_response_length_tokens", "_count")).values()) == [
        n_samples
    ]
    # meta: run info and hyperparameters; only keys TRL's map leaves out stay unmapped
    (info,) = series_of(text, name("rl_run_info")).keys()
    assert dict(info)["framework"] == "trl" and dict(info)["benchmark"] == "toy-arith"
    hp = {dict(lbls)["name"]: v for lbls, v in series_of(text, name("rl_hyperparameter")).items()}
    assert hp["lr"] == pytest.approx(0.003) and hp["hang_at_step"] == scenarios.HANG_AT_STEP
    unmapped = {dict(lbls)["key"] for lbls in series_of(text, name("rl_unmapped_metric"))}
    assert unmapped and all(keys.resolve(k, "trl") is None for k in unmapped), unmapped
    assert not series_of(text, name("rlpulse_dropped_values_total"))


def test_demo_command_runs_and_finishes(capsys, tmp_path) -> None:
    argv = ["demo", "--steps", "12", "--port", "0", "--addr", "127.0.0.1"]
    assert main([*argv, "--progress-every", "5", "--data-dir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"metrics at http://127\.0\.0\.1:\d+/metrics", printed)
    assert "step    10  reward" in printed and "finished 12 steps" in printed


def test_demo_log_is_a_log_replay_reads(tmp_path) -> None:
    log = tmp_path / "run.jsonl"
    argv = ["demo", "--steps", "20", "--port", "0", "--addr", "127.0.0.1", "--no-rollouts"]
    assert main([*argv, "--progress-every", "0", "--log", str(log)]) == 0
    rows = list(read_log(log))
    assert resolve_format(log) == "jsonl" and [r.step for r in rows] == list(range(1, 21))
    assert all(keys.resolve(k, "trl") for k in ("reward", "kl", "entropy", "eval_reward"))
    assert {"reward", "kl", "entropy"} <= rows[0].values.keys()
    assert any("eval_reward" in r.values for r in rows)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--steps", "-1"], "--steps must be >= 0"),
        (["--step-delay", "nan"], "--step-delay must be a finite number"),
        (["--port", "70000"], "--port must be in 0..65535"),
    ],
)
def test_bad_options_name_the_option(capsys, args: list[str], message: str) -> None:
    assert main(["demo", *args]) == 2
    assert message in capsys.readouterr().err


def test_unknown_scenario_lists_the_choices(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--scenario", "nope"])
    assert "kl-blowup" in capsys.readouterr().err
