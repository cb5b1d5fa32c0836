"""``rlpulse rollouts list|show``: filters, formats, errors, and hostile model output shown
escaped (no terminal control sequence or HTML survives)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from rlpulse.cli import main
from rlpulse.rollouts import Recorder, SamplingConfig

HOSTILE = (
    "\x1b[2J\x1b[H\x1b]0;owned\x07fake prompt$ \r"
    "<script>alert(1)</script>&amp; \u202egnp.exe\u200b \x9b31m \U000e0041 \ud800 ok"
)
CONTROL = ["\x1b", "\x07", "\r", "\u202e", "\u200b", "\x9b", "\U000e0041", "\ud800"]


@pytest.fixture
def data_dir(tmp_path):
    rec = Recorder("cli-run", data_dir=tmp_path, sampling=SamplingConfig(per_step=100, seed=0))
    n = 10
    correct = np.array([1, 0, 1, 0, 1, 0, 1, 0, 0, 1], dtype=float)
    fmt = np.array([1, 1, 0, 1, 0, 1, 1, 0.2, 1, 0.5])
    rec.record(
        step=[1] * 5 + [2] * 5,
        rollout_ids=[f"id{i}" for i in range(n)],
        group_ids=[f"g{i // 2}" for i in range(n)],
        prompts=[f"What is {i}+{i}?" for i in range(n)],
        responses=[HOSTILE if i == 3 else f"It is {2 * i}." for i in range(n)],
        rewards=correct + fmt,
        components={"correct": correct, "format": fmt},
        lengths=np.arange(n) * 10,
        truncated=[i == 7 for i in range(n)],
        verdicts=["correct" if c else "wrong" for c in correct],
        errors=["grader crashed: \x1b[31mboom" if i == 8 else None for i in range(n)],
        tool_calls=[[{"tool": "calc", "ok": i % 2 == 0, "out": HOSTILE}] for i in range(n)],
        metadata={"env": "math"},
    )
    rec.close()
    return tmp_path


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["rollouts", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def records(capsys, data_dir, *args: str) -> list[dict]:
    code, out, err = run(
        capsys, *args, "--run", "cli-run", "--data-dir", str(data_dir), "--format", "json"
    )
    assert code == 0, err
    return json.loads(out)


def ids(recs: list[dict]) -> list[str]:
    return [r["rollout_id"] for r in recs]


def test_list_filters(capsys, data_dir):
    assert len(records(capsys, data_dir, "list")) == 10
    assert ids(records(capsys, data_dir, "list", "--step", "2")) == [f"id{i}" for i in range(5, 10)]
    assert ids(records(capsys, data_dir, "list", "--worst", "2")) == [
        "id7",
        "id5",
    ]  # 0.2, then 1.0 (ties: the newest step, then first stored)
    assert ids(records(capsys, data_dir, "list", "--best", "3")) == ["id6", "id0", "id9"]
    assert ids(records(capsys, data_dir, "list", "--truncated")) == ["id7"]
    assert ids(records(capsys, data_dir, "list", "--errors")) == ["id8"]
    assert ids(
        records(capsys, data_dir, "list", "--component", "format>0.9", "--component", "correct<0.5")
    ) == [
        "id1",
        "id3",
        "id5",
        "id8",
    ]  # format paid on a wrong answer
    assert ids(records(capsys, data_dir, "list", "--step", "2", "--component", "format>=0.5")) == [
        "id5",
        "id6",
        "id8",
        "id9",
    ]
    assert ids(records(capsys, data_dir, "list", "--limit", "3")) == ["id0", "id1", "id2"]


def test_a_step_range_as_a_dashboard_link_carries_it(capsys, data_dir):
    steps = ("--step-min", "1", "--step-max", "1")
    assert ids(records(capsys, data_dir, "show", *steps)) == [f"id{i}" for i in range(5)]
    assert ids(records(capsys, data_dir, "show", "--step-min", "2", "--worst", "1")) == ["id7"]
    assert len(records(capsys, data_dir, "list", "--since", "1", "--until", "1e11")) == 10
    code, _, err = run(
        capsys,
        "show",
        "--run",
        "cli-run",
        "--data-dir",
        str(data_dir),
        "--step-min",
        "3",
        "--step-max",
        "2",
    )
    assert code == 2 and "step_min 3 is past the end" in err


def test_show_by_id_and_by_filter(capsys, data_dir):
    [rec] = records(capsys, data_dir, "show", "id3")
    assert rec["response"] == HOSTILE.replace("\ud800", "\ufffd" * 3)  # lone surrogate: U+FFFD
    assert rec["components"] == {"correct": 0.0, "format": 1.0}
    assert rec["tool_calls"][0]["tool"] == "calc" and rec["metadata"] == {"env": "math"}
    code, out, _ = run(
        capsys, "show", "--run", "cli-run", "--data-dir", str(data_dir), "--worst", "1"
    )
    assert code == 0 and "rollout: id7" in out and "--- response ---" in out
    assert "truncated: True" in out


def test_hostile_text_is_escaped_in_table_and_show(capsys, data_dir):
    for verb in ("list", "show"):
        code, out, _ = run(capsys, verb, "--run", "cli-run", "--data-dir", str(data_dir))
        assert code == 0
        for ch in CONTROL:
            assert ch not in out, (verb, repr(ch))
        assert "\\x1b[2J\\x1b[H\\x1b]0;owned\\x07fake prompt$ \\r" in out
    assert "\\u202egnp.exe\\u200b \\x9b31m \\U000e0041 \ufffd\ufffd\ufffd ok" in out  # whole text
    code, out, _ = run(capsys, "show", "id8", "--run", "cli-run", "--data-dir", str(data_dir))
    assert "grader error: grader crashed: \\x1b[31mboom" in out


def test_json_output_is_ascii_and_html_safe(capsys, data_dir):
    code, out, _ = run(
        capsys, "show", "id3", "--run", "cli-run", "--data-dir", str(data_dir), "--format", "json"
    )
    assert code == 0
    assert out.isascii() and "<" not in out and ">" not in out and "&" not in out
    assert json.loads(out)[0]["response"].startswith("\x1b[2J\x1b[H")  # intact after decoding


def test_errors_name_what_is_wrong(capsys, data_dir):
    code, _, err = run(capsys, "list", "--run", "nope", "--data-dir", str(data_dir))
    assert code == 2 and "'nope'" in err and "'cli-run'" in err
    code, _, err = run(
        capsys, "list", "--run", "cli-run", "--data-dir", str(data_dir), "--component", "format~1"
    )
    assert code == 2 and "format~1" in err
    code, _, err = run(
        capsys, "list", "--run", "cli-run", "--data-dir", str(data_dir), "--worst", "-1"
    )
    assert code == 2 and "--worst" in err
    with pytest.raises(SystemExit):
        main(["rollouts", "list", "--run", "cli-run", "--worst", "1", "--best", "1"])
    assert "not allowed with" in capsys.readouterr().err


def test_console_script_reads_the_default_data_dir(data_dir):
    """The installed entry point, with the data dir from RLPULSE_DATA_DIR, as after a demo."""
    env = {**os.environ, "RLPULSE_DATA_DIR": str(data_dir)}
    out = subprocess.run(
        [sys.executable, "-m", "rlpulse.cli", "rollouts", "list", "--run", "cli-run", "--errors"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "id8" in out.stdout and "ERROR: grader crashed: \\x1b" in out.stdout
    assert "\x1b" not in out.stdout
