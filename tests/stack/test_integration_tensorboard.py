"""``rlpulse tail-tensorboard`` on event files written by real SummaryWriters (torch's, as CleanRL
and OpenRLHF use it, and tensorboardX), growing while the command runs, scraped over HTTP."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tensorboardX import SummaryWriter as XWriter
from torch.utils.tensorboard import SummaryWriter

from harness.series import EPISODE_RETURN, OUTCOME, STEP, UNMAPPED, VALUE_LOSS
from rlpulse import catalog
from rlpulse.cli import main
from rlpulse.integrations.tensorboard import TensorBoardTailer
from rlpulse.offline.logs.tfrecord import frame
from rlpulse.runtime.exporter import Exporter
from tests.conftest import promtool_check_metrics, scrape, scrape_as_prometheus, value


def cleanrl_scalars(writer: SummaryWriter, step: int) -> None:
    """What CleanRL's ppo.py writes once per iteration."""
    writer.add_scalar("charts/episodic_return", 10.0 * step, step)
    writer.add_scalar("losses/value_loss", 1.0 / step, step)
    writer.add_scalar("custom/thing", 0.5 * step, step)
    writer.flush()


def eventually(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


@pytest.fixture
def tail(tmp_path: Path) -> Iterator[tuple[Path, str, subprocess.Popen[str]]]:
    logdir = tmp_path / "runs" / "ppo_cartpole_1"
    logdir.mkdir(parents=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlpulse.cli", "tail-tensorboard", str(logdir), "--port", "0"]
        + ["--framework", "cleanrl", "--interval", "0.1", "--duration", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    banner = proc.stdout.readline()
    assert "serving" in banner, banner + proc.stderr.read() if proc.stderr else banner
    url = banner.rsplit(" ", 1)[-1].strip()
    yield logdir, url, proc
    proc.terminate()
    proc.wait(timeout=10)


def test_command_follows_growing_event_files(tail: tuple[Path, str, subprocess.Popen[str]]) -> None:
    logdir, url, _proc = tail
    writer = SummaryWriter(str(logdir))
    cleanrl_scalars(writer, 1)
    eventually(lambda: f"{STEP}{{" in scrape(url) and value(scrape(url), STEP) == 1)
    text = scrape(url)
    assert promtool_check_metrics(text).returncode == 0
    assert value(text, EPISODE_RETURN) == 10.0
    assert value(text, VALUE_LOSS) == 1.0
    assert value(text, UNMAPPED, key="custom/thing") == 0.5
    assert value(text, catalog.get("rl_run_info").name, framework="cleanrl") == 1
    for step in (2, 3):  # the file grows while tailed
        cleanrl_scalars(writer, step)
    eventually(lambda: value(scrape(url), STEP) == 3)
    assert value(scrape(url), EPISODE_RETURN) == 30.0
    writer.close()
    # a restarted run writes a second event file into the same directory
    again = SummaryWriter(str(logdir))
    cleanrl_scalars(again, 4)
    again.close()
    eventually(lambda: value(scrape(url), STEP) == 4)
    assert value(scrape(url), VALUE_LOSS) == 0.25


def test_command_stops_after_duration_and_reports(tmp_path: Path) -> None:
    writer = XWriter(str(tmp_path))
    writer.add_scalar("charts/episodic_return", 5.0, 1)
    writer.close()
    out = subprocess.run(
        [sys.executable, "-m", "rlpulse.cli", "tail-tensorboard", str(tmp_path)]
        + ["--port", "0", "--interval", "0.1", "--duration", "0.5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "exported 1 records" in out.stdout


def test_a_corrupt_file_is_left_and_the_others_followed(tmp_path: Path, exporter: Exporter) -> None:
    good = SummaryWriter(str(tmp_path))
    good.add_scalar("losses/value_loss", 2.0, 5)
    good.flush()
    bad = tmp_path / "events.out.tfevents.0.corrupt"
    bad.write_bytes(b"\x00" * 64)
    # framing and CRCs intact, a summary value whose tag is a varint (an assert once)
    crafted = tmp_path / "events.out.tfevents.1.crafted"
    crafted.write_bytes(frame(bytes([0x2A, 6, 0x0A, 4, 0x08, 5, 0x10, 1])))
    tailer = TensorBoardTailer(tmp_path, exporter)
    assert tailer.poll() == 1
    assert sorted(tailer.broken) == [bad, crafted]
    assert "bad Event proto" in tailer.broken[crafted]
    good.add_scalar("losses/value_loss", 3.0, 6)
    good.flush()
    assert tailer.poll() == 1
    assert value(scrape(exporter.url), STEP) == 6
    good.close()


def test_bad_arguments_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tail-tensorboard", "/no/such/dir"]) == 2
    assert "/no/such/dir" in capsys.readouterr().err
    assert main(["tail-tensorboard", ".", "--framework", "nope"]) == 2
    assert "'nope'" in capsys.readouterr().err
    assert main(["tail-tensorboard", ".", "--interval", "0"]) == 2
    assert "--interval" in capsys.readouterr().err


def test_backfill_of_a_directory_that_appears_later_ends_as_a_finished_run(
    tmp_path: Path,
) -> None:
    """``--wait --once``: wait for the run's directory, export all it holds, end the run with
    a last scrape carrying the values and the finished outcome (a scraper is expected)."""
    logdir = tmp_path / "later"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlpulse.cli", "tail-tensorboard", str(logdir), "--wait"]
        + ["--once", "--port", "0", "--framework", "cleanrl", "--interval", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RLPULSE_EXPECT_SCRAPE": "1", "RLPULSE_FINAL_WAIT": "60"},
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().rsplit(" ", 1)[-1].strip()
    assert "waiting for" in proc.stdout.readline()
    staging = tmp_path / "staging"  # the finished run's directory appears whole
    writer = SummaryWriter(str(staging))
    for step in (1, 2, 3):
        cleanrl_scalars(writer, step)
    writer.close()
    staging.rename(logdir)
    last = ""
    while proc.poll() is None:  # scrape as Prometheus does, until the tailer has ended
        try:
            text = scrape_as_prometheus(url)
        except (OSError, http.client.HTTPException):
            continue
        last = text if OUTCOME in text else last
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert value(last, OUTCOME, outcome="finished") == 1
    assert value(last, EPISODE_RETURN) == 30.0 and value(last, STEP) == 3
    assert "exported 3 records" in out  # one record per step
