"""Log readers on the real-log corpus and on malformed, truncated and growing logs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.corpus import CORPUS, FILES, corpus_file, needs_corpus
from rlpulse.offline.logs import (
    FORMATS,
    LogFormatError,
    base,
    detect_format,
    read_log,
    resolve_format,
)
from rlpulse.offline.logs import trl as trl_module
from tests.conftest import replay_jsonl


@needs_corpus
def test_corpus_is_complete() -> None:
    files = {str(p.relative_to(CORPUS)) for p in CORPUS.glob("*/*")}
    assert files == set(FILES), (
        "corpus files changed: update harness/corpus.py and the replay tests"
    )


@needs_corpus
@pytest.mark.parametrize("name", sorted(FILES))
def test_corpus_file(name: str) -> None:
    expected = FILES[name]
    path = CORPUS / name
    assert detect_format(path) == expected.format
    records = list(read_log(path))
    assert len(records) == expected.records
    assert records[0].step == expected.first
    if expected.last is not None:
        assert records[-1].step == expected.last
    assert all(r.values for r in records)
    segments: dict[str, list[int]] = {}
    for r in records:
        segments.setdefault(r.segment, []).append(r.step)
    assert len(segments) == expected.segments
    for steps in segments.values():  # steps never go back inside one run
        assert steps == sorted(steps)


@needs_corpus
def test_trl_values_and_locations() -> None:
    name = "trl/samyakshrestha__grpo-verified-reasoner__outputs_checkpoint-1134_trainer_state.json"
    path = CORPUS / name
    records = list(read_log(path))
    doc = json.loads(path.read_text())
    for rec, entry in zip(records, doc["log_history"], strict=True):
        assert rec.values == {k: float(v) for k, v in entry.items() if k != "step"}
    lines = path.read_text().splitlines()
    assert lines[int(records[3].where.split()[1]) - 1].strip() == "{"
    assert max(r.values["kl"] for r in records) > 150  # the README's KL spikes


@needs_corpus
def test_trl_stream_survives_any_chunk_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    path = CORPUS / "trl/Rusheel86__Chaos-Economy__training_logs.json"
    whole = list(read_log(path))
    for chunk in (1, 7, 100):
        monkeypatch.setattr(trl_module, "CHUNK", chunk)
        assert list(read_log(path)) == whole


def test_trl_plain_list_and_compact(tmp_path: Path) -> None:
    plain = tmp_path / "history.json"
    plain.write_text(json.dumps([{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.25}]))
    compact = tmp_path / "state.json"
    compact.write_text(json.dumps({"global_step": 2, "log_history": [{"step": 3, "kl": 1e-3}]}))
    assert [r.values for r in read_log(plain)] == [{"loss": 0.5}, {"loss": 0.25}]
    assert detect_format(compact) == "trl"
    assert [(r.step, r.values) for r in read_log(compact)] == [(3, {"kl": 1e-3})]


@needs_corpus
def test_verl_log_values() -> None:
    name = "verl/volcengine__verl__examples_ppo_trainer_verl_getting_started.ipynb.outputs.log"
    records = list(read_log(CORPUS / name))
    assert records[0].values["critic/vf_loss"] == 10.488
    assert records[0].where == "line 429"
    evals = [r.step for r in records if "val/test_score/openai/gsm8k" in r.values]
    assert evals[:2] == [9, 19]


def test_verl_log_numpy_reprs_and_noise(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "Let's start with the first step:\n"
        "\x1b[36m(TaskRunner pid=1)\x1b[0m step:3 - actor/entropy:np.float64(0.5) - "
        "response_length/mean:120 - critic/score/mean:nan\n"
    )
    (rec,) = read_log(log)
    assert rec.step == 3 and rec.values["actor/entropy"] == 0.5
    assert math.isnan(rec.values["critic/score/mean"])


def test_verl_jsonl(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"
    rows = [{"step": s, "data": {"actor/entropy": 1.0 / (s + 1), "note": "x"}} for s in range(3)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert detect_format(log) == "verl-jsonl"
    assert [(r.step, r.values) for r in read_log(log)] == [
        (s, {"actor/entropy": 1.0 / (s + 1)}) for s in range(3)
    ]


def test_jsonl_nested_steps_and_timestamps(tmp_path: Path) -> None:
    log = tmp_path / "m.jsonl"
    log.write_text(
        '{"global_step": 4, "timestamp": 100.5, "train": {"loss": 1.5}}\n\n'
        '{"timestamp": "2026-01-01T00:00:00+00:00", "train": {"loss": 1.0}}\n'
    )
    a, b = read_log(log)
    assert (a.step, a.timestamp, a.values) == (4, 100.5, {"train/loss": 1.5})
    assert (b.step, b.timestamp, b.where) == (5, 1767225600.0, "line 3")


@needs_corpus
def test_sb3_monitor_and_progress(tmp_path: Path) -> None:
    monitor = list(
        read_log(CORPUS / "sb3/DLR-RM__rl-trained-agents__ppo_LunarLander-v2_1_0.monitor.csv")
    )
    assert monitor[0].kind == "episode"
    assert monitor[0].values == {"r": -229.487342, "l": 77.0}
    assert monitor[0].timestamp == pytest.approx(1614710765.4774427 + 0.370271)
    assert monitor[1].step == 77 + 101
    progress = tmp_path / "progress.csv"
    progress.write_text(
        "rollout/ep_rew_mean,time/total_timesteps,time/time_elapsed,train/approx_kl\n"
        "10.5,2048,3,\n"
        "20.0,4096,6,0.01\n"
    )
    a, b = read_log(progress)
    assert (a.step, a.timestamp, a.values.get("train/approx_kl")) == (2048, 3.0, None)
    assert (b.step, b.values["train/approx_kl"]) == (4096, 0.01)


@pytest.mark.parametrize(
    ("name", "text", "where", "fmt"),
    [
        ("bad.jsonl", '{"step": 1, "kl": 0.1}\n{"step": 2, "kl": \n', "line 2", None),
        ("cut.jsonl", '{"step": 1, "kl": 0.1}\n{"step": 2, "k', "line 2", None),
        ("list.jsonl", '{"step": 1}\n[1, 2]\n', "line 2", None),
        ("step.jsonl", '{"step": "two"}\n', "line 1", None),
        (
            "v.jsonl",
            '{"step": 1, "data": {"a": 1}}\n{"step": 2, "metrics": {}}\n',
            "line 2",
            "verl-jsonl",
        ),
        (
            "state.json",
            '{\n  "log_history": [\n    {"step": 1, "loss": 0.5},\n    {"step": 2, "lo',
            "line 4",
            None,
        ),
        (
            "state2.json",
            '{\n  "log_history": [\n    {"step": 1}\n    {"step": 2}\n  ]\n}\n',
            "line 4",
            None,
        ),
        ("nohist.json", '{"global_step": 3}\n', "line 1", "trl"),
        ("nostep.json", '[{"loss": 1.0}]', "line 1", None),
        ("v.log", "x\nstep:1 - actor/kl:0.1 - actor/ent\n", "line 2", None),
        ("p.csv", "a,b\n1,2\n3\n", "line 3", None),
        ("m.csv", '#{"t_start": 1.0}\nr,l,t\n1.0,10,0.5\n2.0,1\n', "line 4", None),
        ("m2.csv", "#not json\nr,l,t\n", "line 1", "sb3-csv"),
    ],
)
def test_malformed_logs_name_file_and_line(
    tmp_path: Path, name: str, text: str, where: str, fmt: str | None
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(LogFormatError) as err:
        list(read_log(path, fmt or "auto"))
    assert err.value.where == where
    assert str(err.value).startswith(f"{path}: {where}: ")


def test_unknown_formats_are_named(tmp_path: Path) -> None:
    blob = tmp_path / "notes.txt"
    blob.write_text("just some notes\n")
    with pytest.raises(LogFormatError, match="cannot tell the log format") as err:
        read_log(blob)
    assert all(name in str(err.value) for name in FORMATS)  # it lists what --format takes
    with pytest.raises(ValueError, match="unknown log format 'wandb'"):
        resolve_format(blob, "wandb")
    with pytest.raises(FileNotFoundError):
        read_log(tmp_path / "missing.json")


# ---- second-batch formats -----------------------------------------------------------------------
@needs_corpus
def test_tinker_eval_rows_repeat_a_step() -> None:
    records = list(
        read_log(
            corpus_file("tinker-cookbook/joanvelja__tinker-cookbook__reports__data__gptoss-20b-v3b")
        )
    )
    evals = [r for r in records if "test/test/env/all/correct" in r.values]
    assert [r.step for r in evals] == [10, 20, 30, 40, 50, 60, 70]
    train = {r.step: r for r in records if "env/all/correct" in r.values}
    assert all(e.step in train for e in evals)  # an eval row shares its step with a train row
    assert max(r.values["unclipped_grad_l2:mean"] for r in train.values()) > 1e5


@needs_corpus
def test_digest_reads_each_environment_as_a_segment() -> None:
    records = list(read_log(corpus_file("tinker-cookbook/astOwOlfo")))
    by_env: dict[str, list[float]] = {}
    for r in records:
        by_env.setdefault(r.segment, []).append(r.values["hacking_ratio"])
    assert list(by_env) == [
        "AEEnv",
        "BashCodeforcesEnv",
        "OmitDescriptionEnv",
        "SWEFixerEnv",
        "SyntheticEnv",
    ]
    assert all(len(v) == 24 for v in by_env.values())
    assert by_env["AEEnv"][0] == pytest.approx(5 / 64) and by_env["AEEnv"][-1] > 0.9
    first = records[0]
    assert first.values["average_reward"] == pytest.approx(0.0221354, abs=1e-6)
    assert first.values["honest_success_ratio"] == pytest.approx(4 / 64)


@needs_corpus
def test_deepspeed_chat_steps_rewards_and_overflows() -> None:
    records = list(read_log(corpus_file("deepspeed-chat/")))
    first = records[0]
    assert first.values["act_loss"] == 0.2099609375
    assert first.values["average_reward_score"] == -0.67919921875
    assert first.values["e2e_latency"] == 7.99 and first.values["overflow_skipped_steps"] == 2
    assert all("average_reward_score" in r.values for r in records)
    # DeepSpeed prints a step's overflows while training it, before the step line
    assert sum(r.values["overflow_skipped_steps"] for r in records) == 14
    assert max(r.step for r in records if r.values["overflow_skipped_steps"]) == 212


@needs_corpus
def test_dopamine_runs_split_where_iteration_restarts() -> None:
    records = list(read_log(corpus_file("dopamine/")))
    runs: dict[str, list[int]] = {}
    for r in records:
        runs.setdefault(r.segment, []).append(r.step)
    assert len(runs) == 30 and all(steps == list(range(199)) for steps in runs.values())
    assert {name.rsplit(" #", 1)[1] for name in runs} == {"1", "2", "3", "4", "5"}
    dqn2 = [r.values["Train/AverageReturns"] for r in records if r.segment == "DQN #2"]
    assert max(dqn2) == pytest.approx(1683, abs=1) and dqn2[-1] < 100


@needs_corpus
def test_rllib_result_json_nan_and_nesting() -> None:
    records = list(read_log(corpus_file("rllib/ray-project__rl-experiments__atari-apex")))
    # Tune's NaN for "no episode ended in this iteration" is no value, not a NaN reward
    no_value = [r.step for r in records if "episode_reward_mean" not in r.values]
    assert no_value == [1, 136, 215, 219]
    assert all(r.values["episodes"] == 0 for r in records if r.step in no_value)
    assert not any(math.isnan(v) for r in records for k, v in r.values.items() if "episode_" in k)
    assert records[1].timestamp == 1538186557 and "info/num_steps_trained" in records[1].values
    assert not any(k.startswith("config/") for r in records for k in r.values)


@needs_corpus
def test_rllib_progress_csv_reads_the_learner_dict() -> None:
    records = list(read_log(corpus_file("rllib/ray-project__rl-experiments__atari-impala")))
    stats = records[0].values
    assert stats["info/learner/grad_gnorm"] == pytest.approx(40.0, abs=1e-3)
    assert records[-1].values["episode_reward_mean"] > 500
    assert all("info/learner/vf_loss" in r.values for r in records)


@needs_corpus
def test_sb3_eval_history() -> None:
    records = list(read_log(corpus_file("sb3/SpencerCPurdy")))
    assert records[0].values == {
        "eval/mean_reward": pytest.approx(-83.349, abs=1e-3),
        "eval/std_reward": pytest.approx(34.112, abs=1e-3),
    }
    assert sum(r.values["eval/mean_reward"] == 0 for r in records) == 48


def test_an_rllib_episode_nan_is_no_value_unless_episodes_ended(tmp_path: Path) -> None:
    """Issue 24: Tune writes "no episode ended" as NaN; a NaN of an iteration whose count says
    episodes ended is a NaN reward (a broken environment), read as such."""
    log = tmp_path / "result.json"
    rows = [
        '{"training_iteration": 1, "episodes_this_iter": 0, "episode_reward_mean": NaN}',
        '{"training_iteration": 2, "episodes_this_iter": 3, "episode_reward_mean": 4.5}',
        '{"training_iteration": 3, "env_runners": {"num_episodes": 0, '
        '"episode_return_mean": NaN}, "info": {"loss": NaN}}',
        '{"training_iteration": 4, "episodes_this_iter": 2, "episode_reward_mean": NaN}',
        '{"training_iteration": 5, "episode_len_mean": NaN}',
    ]
    log.write_text("\n".join(rows) + "\n")
    records = list(read_log(log))
    assert "episode_reward_mean" not in records[0].values and records[1].values[
        "episode_reward_mean"
    ] == pytest.approx(4.5)
    assert "env_runners/episode_return_mean" not in records[2].values
    assert math.isnan(records[2].values["info/loss"])  # only episode statistics are excused
    assert math.isnan(records[3].values["episode_reward_mean"])
    assert "episode_len_mean" not in records[4].values  # no count: Tune's "no value"


def test_rllib_csv_cells_are_literals_never_code(tmp_path: Path) -> None:
    log = tmp_path / "progress.csv"
    log.write_text(
        "training_iteration,timestamp,info,episode_reward_mean\n"
        "1,100,\"{'learner': {'vf_loss': nan, 'entropy': -1.5}}\",nan\n"
        "2,160,\"{'x': __import__('os').system('true')}\",3\n"
    )
    records = read_log(log)
    first = next(records)
    assert math.isnan(first.values["info/learner/vf_loss"]) and first.timestamp == 100
    assert first.values["info/learner/entropy"] == -1.5
    with pytest.raises(LogFormatError, match="line 3: column 'info': not a dict literal"):
        next(records)


def test_verl_jsonl_null_is_non_finite(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 1, "data": {"actor/pg_loss": null, "critic/vf_loss": 0.5}}\n')
    (rec,) = read_log(log)
    assert math.isnan(rec.values["actor/pg_loss"]) and rec.values["critic/vf_loss"] == 0.5


def test_trl_trainer_state_null_is_non_finite(tmp_path: Path) -> None:
    """TRL writes a metric that was NaN all window long (a failed reward function) as null."""
    state = tmp_path / "trainer_state.json"
    state.write_text('{"log_history": [{"step": 5, "reward": null, "loss": 0.25}]}')
    (rec,) = read_log(state)
    assert math.isnan(rec.values["reward"]) and rec.values["loss"] == 0.25


def test_sb3_progress_step_is_the_update_counter(tmp_path: Path) -> None:
    log = tmp_path / "progress.csv"
    log.write_text(
        "time/total_timesteps,train/n_updates,rollout/ep_rew_mean\n"
        "2048,,10\n4096,10,12\n6144,20,15\n"
    )
    assert [r.step for r in read_log(log)] == [0, 10, 20]


def test_an_sb3_run_folder_places_each_episode_where_the_callback_saw_it(tmp_path: Path) -> None:
    """progress.csv with two envs' Monitor files: each episode comes before the first row whose
    total timesteps reach it (its env's steps x 2 envs), at the update counter of the row before,
    as the live callback observes episodes between two dumps."""
    (tmp_path / "progress.csv").write_text(
        "time/total_timesteps,train/n_updates,rollout/ep_rew_mean\n200,,10\n400,10,12\n600,20,15\n"
    )
    head = '#{"t_start": 1.0, "env_id": "CartPole-v1"}\nr,l,t\n'
    (tmp_path / "0.monitor.csv").write_text(head + "10,90,0.1\n12,120,0.2\n")
    (tmp_path / "1.monitor.csv").write_text(head + "9,150,0.15\n30,160,0.3\n")
    records = list(read_log(tmp_path))
    got = [(r.kind, r.step, r.values.get("r")) for r in records]
    assert got == [
        ("episode", 0, 10.0),  # env 0 at 90 steps: 180 <= 200
        ("metrics", 0, None),
        ("episode", 0, 9.0),  # env 1 at 150: 300 <= 400
        ("metrics", 10, None),
        ("episode", 10, 12.0),  # env 0 at 210: 420 <= 600
        ("metrics", 20, None),
        ("episode", 20, 30.0),  # env 1 at 310: 620, after the last row
    ]
    assert detect_format(tmp_path) == "sb3-run"
    (tmp_path / "0.monitor.csv").unlink()
    (tmp_path / "1.monitor.csv").unlink()
    assert [r.kind for r in read_log(tmp_path)] == ["metrics"] * 3


def test_an_sb3_run_folder_keeps_its_episodes_on_the_rows_clock(tmp_path: Path) -> None:
    """A row's time is seconds since training began, an episode's the Unix time it ended: the
    episodes are read against the earliest Monitor's start. A first episode longer than the
    first rollout (CliffWalking's random walk, 37,867 steps) came after a row of time 0 at a
    Unix time, and the paced replay read the jump as a stall that paged."""
    (tmp_path / "progress.csv").write_text(
        "time/total_timesteps,time/time_elapsed,train/n_updates\n200,1,\n400,2,10\n600,3,20\n"
    )
    head = '#{"t_start": 1796511200.5, "env_id": "CliffWalking-v1"}\nr,l,t\n'
    (tmp_path / "monitor.csv").write_text(head + "-500,350,1.5\n-300,300,3.4\n")
    got = [(r.kind, r.timestamp) for r in read_log(tmp_path)]
    assert [kind for kind, _ in got] == ["metrics", "episode", "metrics", "metrics", "episode"]
    assert [t for _, t in got] == pytest.approx([1.0, 1.5, 2.0, 3.0, 3.4])


def test_an_sb3_run_folder_needs_the_timesteps_to_place_episodes(tmp_path: Path) -> None:
    (tmp_path / "progress.csv").write_text("train/n_updates,rollout/ep_rew_mean\n1,10\n")
    (tmp_path / "monitor.csv").write_text('#{"t_start": 1.0}\nr,l,t\n10,90,0.1\n')
    with pytest.raises(LogFormatError, match="time/total_timesteps"):
        list(read_log(tmp_path))


# ---- hostile input: one LogFormatError naming the file and position, bounded time and memory ---
def _deep(n: int) -> str:
    return '{"a": ' * n + "1" + "}" * n


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("deep.jsonl", '{"step": 1}\n' + _deep(100_000) + "\n", "line 2"),
        ("deeper.jsonl", '{"step": 1, "m": ' + _deep(40) + "}\n", "line 1"),
        ("deep.json", '{"log_history": [' + _deep(100_000) + "]}", "line 1"),
        (
            "deep.csv",
            'training_iteration,info\n1,"' + "{'a': " * 200 + "1" + "}" * 200 + '"\n',
            "line 2",
        ),
        ("field.csv", 'a,b\n1,2\n1,"' + "x" * 200_000 + '"\n', "line 3"),
        ("dopamine.json", '[{"Iteration": 0, "Value": 1, "Agent": "DQN"}, {"Value": 2}]', "line 1"),
        ("digest.txt", 'ENV TYPE: A (1/1)\n[\n  {"epoch": 0,\n', "line 2"),
    ],
)
def test_hostile_logs_are_one_clear_error(tmp_path: Path, name: str, text: str, where: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(LogFormatError) as err:
        list(read_log(path))
    assert err.value.where == where and str(err.value).startswith(f"{path}: {where}: ")


def test_huge_numbers_are_read_not_crashed_on(tmp_path: Path) -> None:
    log = tmp_path / "big.jsonl"
    log.write_text('{"step": 1e300, "loss": ' + "9" * 401 + ', "kl": -' + "9" * 401 + "}\n")
    (rec,) = read_log(log)
    assert rec.step == int(1e300)
    assert rec.values == {"loss": math.inf, "kl": -math.inf}


def test_a_huge_line_is_refused_without_reading_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base, "MAX_LINE", 1000)
    monkeypatch.setattr(trl_module, "MAX_VALUE", 1000)
    monkeypatch.setattr(trl_module, "CHUNK", 100)
    for name, text in (
        ("one.jsonl", '{"step": 1, "x": "' + "a" * 5000 + '"}\n'),
        ("one.log", "step:1 - a:" + "1" * 5000 + "\n"),
        ("one.csv", "a,b\n1," + "2" * 5000 + "\n"),
        ("one.json", '{"log_history": [{"step": 1, "x": "' + "a" * 5000 + '"}]}'),
    ):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(LogFormatError, match="longer than 1000 characters"):
            list(read_log(path, "auto" if not name.endswith(".log") else "verl-log"))


def test_dopamine_is_told_by_its_keys_in_any_order(tmp_path: Path) -> None:
    log = tmp_path / "pong.json"
    log.write_text(
        json.dumps(
            [{"Agent": "DQN", "Value": v, "Iteration": i % 3} for i, v in enumerate(range(6))]
        )
    )
    assert detect_format(log) == "dopamine"
    assert [(r.segment, r.step) for r in read_log(log)][2:4] == [("DQN #1", 2), ("DQN #2", 0)]


def test_a_null_is_non_finite_in_every_json_reader(tmp_path: Path) -> None:
    """Issue 24.6: most JSON writers write NaN as null; one rule in every reader: a null is a
    non-finite value, unless its key held text before (then it is only "no value")."""
    log = tmp_path / "run.jsonl"
    rows = [{"step": 1, "loss": 0.5, "grad_norm": 1.0, "note": "warmup"}]
    rows += [{"step": 2, "loss": None, "grad_norm": None, "note": None}]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    second = list(read_log(log))[1].values
    assert math.isnan(second["loss"]) and math.isnan(second["grad_norm"])
    assert "note" not in second
    nested = tmp_path / "nested.jsonl"
    nested.write_text('{"step": 1, "train": {"loss": null}}\n')
    assert math.isnan(next(read_log(nested)).values["train/loss"])
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"log_history": rows}))
    assert math.isnan(list(read_log(state))[1].values["loss"])
    cols = tmp_path / "cols.json"
    cols.write_text('{"loss": [0.5, null, 0.4]}')
    assert math.isnan(list(read_log(cols))[1].values["loss"])


def test_a_null_loss_in_a_trl_keyed_jsonl_pages_like_nan(tmp_path: Path) -> None:
    """A JSONL with null for the loss and grad norm replays as non-finite (RLNonFiniteLoss)."""
    rows = [{"step": s, "loss": 0.5, "grad_norm": 1.0, "reward": 0.3} for s in range(10)]
    rows += [{"step": s, "loss": None, "grad_norm": None, "reward": 0.3} for s in range(10, 15)]
    tl = replay_jsonl(tmp_path / "run.jsonl", rows)
    counts = [v for k in tl.keys_of("rl_nonfinite_values_total") for v in tl.values(k)]
    assert max(v for v in counts if v is not None) >= 5


def test_column_oriented_json_is_read_as_series(tmp_path: Path) -> None:
    """Issue 24.10: {"episode_rewards": [...500], "eval_scores": [...10]}: arrays of one length
    are one table (a row per index), another length is another series (its own segment)."""
    doc = {
        "episode_rewards": [float(i % 7) for i in range(500)],
        "episode_lengths": [9] * 500,
        "eval_scores": [0.1 * i for i in range(10)],
        "seed": 3,
    }
    pretty = tmp_path / "results.json"
    pretty.write_text(json.dumps(doc, indent=2))
    one_line = tmp_path / "results-line.json"
    one_line.write_text(json.dumps(doc))
    for path in (pretty, one_line):
        assert detect_format(path) == "json-columns"
        recs = list(read_log(path))
        train = [r for r in recs if r.segment == "episode_rewards+episode_lengths"]
        evals = [r for r in recs if r.segment == "eval_scores"]
        assert len(train) == 500 and len(evals) == 10
        assert train[3].step == 3 and train[3].values == {
            "episode_rewards": 3.0,
            "episode_lengths": 9.0,
        }
        assert evals[-1].values["eval_scores"] == pytest.approx(0.9)
    state = tmp_path / "not_a_state.json"
    state.write_text(json.dumps({"global_step": 3, "best_metric": None}, indent=2))
    with pytest.raises(LogFormatError, match="json-columns"):
        list(read_log(state, "trl"))
