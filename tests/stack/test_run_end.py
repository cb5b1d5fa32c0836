"""How a run ends, seen from a real process over real HTTP: a normal exit is a finished run, an
uncaught exception (any thread) or a non-zero ``sys.exit`` a crashed one, Ctrl-C an interrupted
one; a last scrape carries the outcome; problems reach stderr without any logging set-up."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.stackutil import interruptible
from tests.conftest import samples, scrape, scrape_as_prometheus

OUTCOME = "rl_run_outcome"
FINISHED = "rl_run_finished_timestamp_seconds"

# The child starts an exporter, prints its URL, waits for the test's first scrape (so a scraper
# is known), then runs the ending under test.
PRELUDE = """
import sys, threading, rlpulse
exp = rlpulse.start(port=0, addr="127.0.0.1", run_id="r1", gpu=False, host=False, collector_ttl=0)
print(exp.url, flush=True)
sys.stdin.readline()
rlpulse.log({"loss": 0.5}, step=3)
"""


@dataclass
class Ended:
    """What the test saw of a child's end."""

    outcome: dict[str, str]  # the rl_run_outcome labels of the last scrape
    returncode: int
    stderr: str


@contextmanager
def _child(body: str, **env: str) -> Iterator[subprocess.Popen[str]]:
    script = PRELUDE + textwrap.dedent(body)
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RLPULSE_FINAL_WAIT": "60", **env},
        preexec_fn=interruptible,  # its Ctrl-C tests send SIGINT
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def _run(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (dedented) to its end in a fresh interpreter; fails if it fails."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, **env},
    )


def _end(body: str, **env: str) -> Ended:
    """Run ``body`` in a child after one scrape; scrape, as Prometheus would, until it exits."""
    with _child(body, **env) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        url = proc.stdout.readline().strip()
        scrape_as_prometheus(url)  # Prometheus has been scraping it
        proc.stdin.write("go\n")
        proc.stdin.flush()
        return Ended(scrape_until_exit(proc, url), *_finish(proc))


def scrape_until_exit(proc: subprocess.Popen[str], url: str) -> dict[str, str]:
    """Scrape ``url`` until ``proc`` exits; the rl_run_outcome labels of the last scrape that
    had one (a scrape that began before the end mark was set may carry it without counting as
    the last scrape the run waits for, so keep scraping like Prometheus does)."""
    outcome: dict[str, str] = {}
    while proc.poll() is None:
        try:
            text = scrape(url)
        except (OSError, http.client.HTTPException):
            continue  # stopped serving: the process is on its way out
        found = [dict(lbl) for (name, lbl) in samples(text) if name == OUTCOME]
        outcome = found[0] if found else outcome
    return outcome


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def test_normal_exit_is_a_finished_run() -> None:
    ended = _end("")
    assert ended.outcome["outcome"] == "finished" and ended.outcome["reason"] == ""
    assert ended.returncode == 0
    assert "waiting up to 60 s for Prometheus to scrape" in ended.stderr  # visible by default


def test_uncaught_exception_is_a_crash_and_the_users_hook_still_runs() -> None:
    ended = _end(
        """
        sys.excepthook = lambda *a, prev=sys.excepthook: (print("user hook", file=sys.stderr),
                                                           prev(*a))
        raise ValueError("diverged")
        """
    )
    assert ended.outcome["outcome"] == "crashed" and ended.outcome["reason"] == "ValueError"
    assert "user hook" in ended.stderr and "ValueError: diverged" in ended.stderr
    assert ended.returncode == 1


def test_a_hook_set_before_start_is_chained() -> None:
    script = """
    import sys
    sys.excepthook = lambda *a: print("earlier hook", file=sys.stderr)
    """
    body = textwrap.dedent(script) + PRELUDE + "raise KeyError('x')\n"
    proc = subprocess.run(
        [sys.executable, "-c", body],
        input="go\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RLPULSE_FINAL_WAIT": "0"},
        check=False,
    )
    assert "earlier hook" in proc.stderr


def test_nonzero_sys_exit_is_a_crash_and_zero_a_finish() -> None:
    crashed = _end("sys.exit(3)")
    assert crashed.outcome == {**crashed.outcome, "outcome": "crashed", "reason": "exit status 3"}
    assert crashed.returncode == 3
    finished = _end("sys.exit(0)")
    assert finished.outcome["outcome"] == "finished" and finished.returncode == 0


def test_uncaught_exception_in_a_thread_is_a_crash() -> None:
    ended = _end(
        """
        def work():
            raise RuntimeError("loader died")
        t = threading.Thread(target=work); t.start(); t.join()
        """
    )
    assert ended.outcome["outcome"] == "crashed"
    assert ended.outcome["reason"] == "thread: RuntimeError"
    assert "loader died" in ended.stderr  # the default thread hook still printed it


def test_keyboard_interrupt_is_an_interrupted_run() -> None:
    ended = _end("raise KeyboardInterrupt")
    assert ended.outcome["outcome"] == "interrupted"


def test_finish_then_exit_ends_once() -> None:
    ended = _end("rlpulse.finish()\nraise ValueError('after the end')")
    assert ended.outcome["outcome"] == "finished"  # the run had ended before the exception


@pytest.mark.parametrize(
    ("env", "first_scrape"),
    [
        ({"RLPULSE_FINAL_WAIT": "0"}, scrape_as_prometheus),  # the wait skipped
        ({}, scrape),  # only a person looked (no scraper headers): nobody to wait for
        ({}, None),  # never scraped, none expected
    ],
)
def test_no_wait_when_skipped_or_no_scraper_is_expected(
    env: dict[str, str], first_scrape: Callable[[str], str] | None
) -> None:
    with _child("", **env) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        url = proc.stdout.readline().strip()
        if first_scrape is not None:
            first_scrape(url)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "waiting up to" not in err


def test_quiet_silences_the_stderr_notice() -> None:
    ended = _end("", RLPULSE_QUIET="1")
    assert ended.outcome["outcome"] == "finished" and "rlpulse" not in ended.stderr


def test_log_before_start_and_a_second_start_are_told_once() -> None:
    script = """
    import rlpulse
    rlpulse.log({"loss": 1.0}); rlpulse.log({"loss": 2.0})
    rlpulse.start(port=0, addr="127.0.0.1", gpu=False, host=False)
    rlpulse.start(port=0, addr="127.0.0.1", gpu=False, host=False)  # same arguments: silent
    rlpulse.start(port=0, addr="127.0.0.1", run_id="other", gpu=False, host=False)
    """
    out = _run(script)
    assert out.stderr.count("while no exporter runs") == 1
    assert out.stderr.count("start() called again with other arguments") == 1


def test_exporters_ending_at_exit_share_one_wait() -> None:
    """Two scraped exporters at exit (nobody scrapes again): the first waits the whole bound,
    the second has none of it left instead of a second full wait."""
    script = """
    import logging, sys, urllib.request
    from rlpulse.runtime.exporter import Exporter
    logging.basicConfig(format="LOG %(message)s")  # every record, not only the first per kind
    head = {"X-Prometheus-Scrape-Timeout-Seconds": "1"}
    for run in ("a", "b"):
        exp = Exporter(0, addr="127.0.0.1", run_id=run, gpu=False, host=False).start()
        urllib.request.urlopen(urllib.request.Request(exp.url, headers=head)).read()
    """
    out = _run(script, RLPULSE_FINAL_WAIT="2")
    waits = [line for line in out.stderr.splitlines() if "waiting up to" in line]
    assert len(waits) == 1 and "waiting up to 2 s" in waits[0], out.stderr  # either run first


def test_a_registered_target_expects_a_scrape(tmp_path: Path) -> None:
    """An exporter announced through file_sd waits for Prometheus at exit though none came."""
    script = f"""
    import rlpulse
    from rlpulse.runtime import targets
    exp = rlpulse.start(port=0, addr="127.0.0.1", run_id="reg", gpu=False, host=False)
    targets.register({str(tmp_path)!r}, exp)
    """
    out = _run(script, RLPULSE_FINAL_WAIT="0.5")
    assert "run reg ended; waiting up to" in out.stderr
    assert not list(tmp_path.iterdir())  # the target file is gone with the run
