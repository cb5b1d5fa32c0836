"""Break-test regressions (issue 16, items 10 and 14): any run id gets a store, any data dir
works for the CLI, the rollout API answers 400 to parameters out of range, and a batch is
either offered or counted."""

from __future__ import annotations

import json
from email.message import Message
from pathlib import Path

import pytest

from rlpulse.cli import main
from rlpulse.rollouts import Recorder, list_runs, run_file
from rlpulse.rollouts.server import routes
from rlpulse.runtime.http import Request

LONG_RUN = "sweep/" + "lr=3e-4,seed=1," * 30  # 456 characters: a 700-byte escaped file name


def _record(run: str, data_dir: Path) -> Recorder:
    rec = Recorder(run, data_dir=data_dir)
    rec.record(step=1, rollout_ids=["a", "b"], rewards=[1.0, 0.0], responses=["x", "y"])
    assert rec.flush()
    return rec


def test_a_long_run_id_gets_a_store_and_is_listed(tmp_path: Path) -> None:
    rec = _record(LONG_RUN, tmp_path)
    stats = rec.stats()
    rec.close()
    assert stats["recorded"] == 2 and not any(k.startswith("dropped") for k in stats)
    assert len(run_file(LONG_RUN, tmp_path).name.encode()) <= 255
    assert list_runs(tmp_path) == [LONG_RUN]


def test_the_cli_reads_a_relative_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _record("rel", tmp_path / "data").close()
    monkeypatch.chdir(tmp_path)
    code = main(["rollouts", "list", "--run", "rel", "--data-dir", "data", "--format", "json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert len(json.loads(out.out)) == 2


OUT_OF_RANGE = [
    "step=99999999999999999999",
    "step=-99999999999999999999",
    "worst=99999999999999999999",
    "best=18446744073709551616",
    "limit=99999999999999999999",
    "step=" + "9" * 5000,
]


@pytest.mark.parametrize("query", OUT_OF_RANGE)
def test_rollout_api_parameters_out_of_range_answer_400(tmp_path: Path, query: str) -> None:
    _record("api", tmp_path).close()
    name, _, raw = query.partition("=")
    request = Request("GET", "/rollouts", {"run": ["api"], name: [raw]}, Message(), ("", 0))
    response = routes(tmp_path)["/rollouts"](request)
    assert response.status in (200, 400), response.body[:200]
    if name != "limit":
        assert response.status == 400


@pytest.mark.parametrize("flags", ["", "ab", b"", {"a": 1}], ids=repr)
def test_truncated_that_is_not_one_flag_per_rollout_is_counted(
    tmp_path: Path, flags: object
) -> None:
    rec = Recorder("flags", data_dir=tmp_path)
    try:
        assert rec.record(truncated=flags) == []  # alone: '' read as an empty batch
        assert rec.record(rewards=[1.0, 0.0], truncated=flags) == []
        assert rec.stats().get("dropped:invalid") == 2
    finally:
        rec.close()
