"""``rlpulse targets``: file_sd from host lists, hostfiles and the launcher's environment, and
exporters registering themselves (one file each, gone when the exporter closes)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlpulse import cli
from rlpulse.runtime import targets
from rlpulse.runtime.exporter import Exporter
from tests.conftest import self_signed


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
    with pytest.raises(ValueError, match="bad range '9-3'"):
        targets.expand_hostlist("n[9-3]")
    with pytest.raises(ValueError, match="is over 65536 hosts"):  # a typo, refused at once
        targets.expand_hostlist("gpu[0-99999999]")
    with pytest.raises(ValueError, match="over 65536 hosts"):  # nested ranges multiply
        targets.expand_hostlist("r[0-999]n[0-999]")


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
            "cluster=east",
            "-o",
            str(out),
        ]
    )
    assert rc == 0
    groups = json.loads(out.read_text())
    assert groups[1] == {
        "targets": ["b1:9400", "b1:9401"],
        "labels": {"cluster": "east"},
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
    assert cli.main(["targets", "--hosts", "a", "--label", "rank=1"]) == 2
    assert "target label(s) ['rank'] would clash" in capsys.readouterr().err


# ---- self-registration (rlpulse.runtime.targets.register) ---


def test_register_writes_one_target_and_removes_it_on_close(tmp_path: Path) -> None:
    exp = Exporter(port=0, addr="127.0.0.1", run_id="grpo/7", rank=3, gpu=False, host=False)
    exp.start()
    try:
        reg = targets.register(tmp_path / "sd", exp, {"role": "rollout"})
        assert reg.path == tmp_path / "sd" / "grpo_7-3.json"  # a '/' is no file name
        assert json.loads(reg.path.read_text()) == [
            {"targets": [f"127.0.0.1:{exp.port}"], "labels": {"role": "rollout"}}
        ]
        assert [p.name for p in (tmp_path / "sd").iterdir()] == [reg.path.name]  # no temp file
    finally:
        exp.close()
    assert not reg.path.exists()
    reg.close()  # twice is fine


def test_register_host_and_scheme(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    exp = Exporter(port=0, run_id="r", certfile=cert, keyfile=key, gpu=False, host=False).start()
    try:
        reg = targets.register(tmp_path, exp)  # bound to 0.0.0.0: this machine's name
        assert reg.address == f"{socket.gethostname()}:{exp.port}"
        assert json.loads(reg.path.read_text())[0]["labels"] == {"__scheme__": "https"}
        reg = targets.register(tmp_path, exp, host="fd00::1")
        assert reg.address == f"[fd00::1]:{exp.port}"
    finally:
        exp.close()
    assert list(tmp_path.glob("*.json")) == []


def test_register_refuses_what_would_break_scraping(tmp_path: Path) -> None:
    exp = Exporter(port=0, run_id="r", gpu=False, host=False)
    with pytest.raises(ValueError, match="started exporter"):
        targets.register(tmp_path, exp)
    exp.start()
    try:
        with pytest.raises(ValueError, match=r"\['node', 'rank'\] would clash"):
            targets.register(tmp_path, exp, {"rank": "0", "node": "a", "role": "x"})
    finally:
        exp.close()


def test_unregister_after_a_hard_kill(tmp_path: Path) -> None:
    path = targets.write_target(tmp_path, "run", 5, "10.0.0.5:40123")
    assert path.name == "run-5.json"
    assert targets.unregister(tmp_path, "run", 5)
    assert not targets.unregister(tmp_path, "run", 5)


_CHILD = """
import os, sys
from rlpulse.runtime import targets
from rlpulse.runtime.exporter import Exporter
exp = Exporter(port=0, addr="127.0.0.1", run_id="child", gpu=False, host=False).start()
reg = targets.register(sys.argv[1], exp)
if os.fork() == 0:  # a forked child exiting must not take the parent's file with it
    reg.close()
    exp.close()
    os._exit(0)
os.wait()
assert reg.path.exists()
print(reg.path, flush=True)
sys.stdin.readline()  # then exit (or wait here for the SIGTERM)
"""


@pytest.mark.parametrize("end", ["exit", "sigterm"])
def test_the_file_goes_with_the_process(tmp_path: Path, end: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "RLPULSE_FINAL_WAIT": "0"},  # no Prometheus here to wait for at exit
    )
    assert proc.stdout is not None and proc.stdin is not None
    path = Path(proc.stdout.readline().strip())
    assert path.exists()
    if end == "sigterm":
        proc.send_signal(signal.SIGTERM)
    else:
        proc.stdin.close()
    assert proc.wait(timeout=30) == (-signal.SIGTERM if end == "sigterm" else 0)
    proc.stdin.close()
    proc.stdout.close()
    assert not path.exists()
