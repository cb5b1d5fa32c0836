"""``rlpulse targets``: file_sd from host lists, hostfiles and the launcher's environment."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from rlpulse import cli, targets


def test_hostlist_ranges() -> None:
    assert targets.expand_hostlist("gpu[01-03,07],login1") == [
        "gpu01",
        "gpu02",
        "gpu03",
        "gpu07",
        "login1",
    ]
    assert targets.expand_hostlist("n[8-10]") == ["n8", "n9", "n10"]
    with pytest.raises(ValueError, match="bad range 'a-b'"):
        targets.expand_hostlist("n[a-b]")


def test_hostfile(tmp_path: Path) -> None:
    hf = tmp_path / "hostfile"
    hf.write_text("# nodes\nworker-1 slots=8\nworker-2 slots=4\nworker-3\n")
    nodes = targets.read_hostfile(hf, 2)
    assert [(n.host, n.ranks) for n in nodes] == [("worker-1", 8), ("worker-2", 4), ("worker-3", 2)]
    hf.write_text("worker-1 gpus=8\n")
    with pytest.raises(ValueError, match=r"hostfile:1: cannot read 'gpus=8'"):
        targets.read_hostfile(hf, 2)


def test_from_slurm_environment() -> None:
    env = {"SLURM_JOB_NODELIST": "node[001-128]", "SLURM_NTASKS_PER_NODE": "8(x128)"}
    groups = targets.file_sd(targets.nodes_from_env(env, 1), 9400)
    assert len(groups) == 128
    assert sum(len(g["targets"]) for g in groups) == 1024  # type: ignore[arg-type]
    assert groups[0] == {
        "targets": [f"node001:{9400 + r}" for r in range(8)],
        "labels": {},
    }
    with pytest.raises(ValueError, match="SLURM_JOB_NODELIST"):
        targets.nodes_from_env({}, 8)


def test_cli_writes_a_file_prometheus_accepts(tmp_path: Path) -> None:
    out = tmp_path / "targets" / "run.json"
    out.parent.mkdir()
    rc = cli.main(
        [
            "targets",
            "--hosts",
            "a,b[1-2]",
            "--ranks-per-node",
            "2",
            "--label",
            "run_id=exp1",
            "-o",
            str(out),
        ]
    )
    assert rc == 0
    groups = json.loads(out.read_text())
    assert groups[1] == {
        "targets": ["b1:9400", "b1:9401"],
        "labels": {"run_id": "exp1"},
    }
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "scrape_configs": [
                    {"job_name": "rl", "file_sd_configs": [{"files": [str(out.parent / "*.json")]}]}
                ]
            }
        )
    )
    promtool = shutil.which("promtool")
    assert promtool
    check = subprocess.run(
        [promtool, "check", "config", str(config)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_cli_bad_label_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["targets", "--hosts", "a", "--label", "oops"]) == 2
    assert "--label 'oops': expected NAME=VALUE" in capsys.readouterr().err
