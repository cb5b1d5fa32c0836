"""Log readers on the real-log corpus and on malformed, truncated and growing logs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlpulse.logs import FORMATS, LogFormatError, detect_format, read_log, resolve_format
from rlpulse.logs import trl as trl_module

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "real-logs"

# file -> (format, rows, first step, last step): rows and steps as the corpus README states them
EXPECTED = {
    "trl/IMJONEZZ__UnslothGRPO__outputs_checkpoint-250_trainer_state.json": ("trl", 250, 1, 250),
    "trl/abdo-ashraf__Gemma-3-RL-Finetuning__outputs_checkpoint-250_trainer_state.json": (
        "trl",
        25,
        10,
        250,
    ),
    "trl/samyakshrestha__grpo-verified-reasoner__outputs_checkpoint-1134_trainer_state.json": (
        "trl",
        226,
        5,
        1130,
    ),
    "trl/Rusheel86__Chaos-Economy__training_logs.json": ("trl", 50, 5, 250),
    "verl/volcengine__verl__examples_ppo_trainer_verl_getting_started.ipynb.outputs.log": (
        "verl-log",
        61,
        0,
        60,
    ),
    "other/arvindcr4__tinker-rl-lab__experiments_results_arithmetic_metrics.jsonl": (
        "jsonl",
        100,
        0,
        99,
    ),
    "sb3/DLR-RM__rl-trained-agents__ppo_LunarLander-v2_1_0.monitor.csv": ("sb3-csv", 162, 77, None),
    "other/morikatron__GAIL_PPO__sample_result_ppo_progress.csv": ("sb3-csv", 100, 0, 99),
}


def test_corpus_is_complete() -> None:
    files = {str(p.relative_to(CORPUS)) for p in CORPUS.glob("*/*")}
    assert files == set(EXPECTED), "corpus files changed: update EXPECTED and the replay tests"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_file(name: str) -> None:
    fmt, rows, first, last = EXPECTED[name]
    path = CORPUS / name
    assert detect_format(path) == fmt
    records = list(read_log(path))
    assert len(records) == rows
    assert records[0].step == first
    if last is not None:
        assert records[-1].step == last
    assert all(r.values for r in records)
    assert [r.step for r in records] == sorted(r.step for r in records)


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
    with pytest.raises(LogFormatError, match="cannot tell the log format"):
        read_log(blob)
    with pytest.raises(ValueError, match="unknown log format 'wandb'"):
        resolve_format(blob, "wandb")
    with pytest.raises(FileNotFoundError):
        read_log(tmp_path / "missing.json")
    assert set(FORMATS) == {"trl", "verl-log", "verl-jsonl", "sb3-csv", "tensorboard", "jsonl"}
