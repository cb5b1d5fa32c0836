"""Worker subprocesses reporting through their rank's exporter (rlpulse.runtime.workers).

Real processes under every multiprocessing start method and a plain ``subprocess``; totals are
read back from a real scrape of the rank's endpoint.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Client
from pathlib import Path

import numpy as np
import pytest

from harness.series import DROPPED, ENV_STEPS, LAST_LOG, PHASE, REWARD, ROLLOUT, STEP, STEP_SIGNAL
from harness.stackutil import wait_for
from rlpulse import catalog
from rlpulse.runtime import workers
from rlpulse.runtime.exporter import Exporter
from tests.conftest import samples, scrape, value


def _report(n: int, seed: int) -> None:
    """A rollout worker: ``n`` batches of 8 rollouts, env steps and a timed phase."""
    w = workers.worker_client()
    for i in range(n):
        with w.phase("generate"):
            w.observe_rollouts(
                latency_seconds=[0.1 * (seed + 1)] * 8,
                response_tokens=[64 + i] * 8,
                rewards=[float(seed)] * 8,
            )
        w.count(ENV_STEPS, 8)
    w.set(REWARD, float(seed))


def _report_then_hang(ready: multiprocessing.synchronize.Event) -> None:
    w = workers.worker_client()
    w.count(ENV_STEPS, 5)
    assert w.flush()
    w.count(ENV_STEPS, 1000)  # buffered, never flushed: lost with the worker
    ready.set()
    time.sleep(60)


def _total(exp: Exporter, name: str, **labels: str) -> float:
    return value(scrape(exp.url), name, **labels)


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_workers_add_exactly_into_the_ranks_series(hub: workers.WorkerHub, method: str) -> None:
    ctx = multiprocessing.get_context(method)
    procs = [ctx.Process(target=_report, args=(5, seed)) for seed in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    exp = hub.exporter
    wait_for(lambda: hub.exited == 3, 10, "three workers to disconnect")
    text = scrape(exp.url)
    assert value(text, ENV_STEPS) == 3 * 5 * 8
    assert value(text, ROLLOUT + "_count") == 3 * 5 * 8
    assert value(text, ROLLOUT + "_sum") == pytest.approx(8 * 5 * (0.1 + 0.2 + 0.3))
    assert value(text, "rl_samples_total") == 3 * 5 * 8
    assert value(text, PHASE + "_count", phase="generate") == 15
    assert value(text, REWARD) in (0.0, 1.0, 2.0)  # a gauge: whichever worker wrote last
    assert hub.workers() == []
    no_worker_label = [lbls for (_, lbls) in samples(text) if any(k == "worker" for k, _ in lbls)]
    assert not no_worker_label


def test_a_killed_worker_is_dropped_and_what_it_sent_stays(hub: workers.WorkerHub) -> None:
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    victim = ctx.Process(target=_report_then_hang, args=(ready,))
    victim.start()
    assert ready.wait(30)
    assert [w.pid for w in hub.workers()] == [victim.pid]
    os.kill(victim.pid, signal.SIGKILL)  # type: ignore[arg-type]
    victim.join(10)
    wait_for(lambda: hub.exited == 1 and not hub.workers(), 10, "the dead worker to be dropped")
    assert _total(hub.exporter, ENV_STEPS) == 5  # exactly what it flushed, nothing twice
    survivor = ctx.Process(target=_report, args=(2, 0))  # the hub still serves new workers
    survivor.start()
    survivor.join(30)
    wait_for(lambda: hub.exited == 2, 10, "the second worker to disconnect")
    assert _total(hub.exporter, ENV_STEPS) == 5 + 2 * 8


def test_worker_churn_adds_no_series(hub: workers.WorkerHub) -> None:
    """A data loader re-spawned every epoch: series stay the same, totals keep adding."""
    ctx = multiprocessing.get_context("fork")
    counts = []
    for epoch in range(4):
        procs = [ctx.Process(target=_report, args=(1, epoch)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        wait_for(lambda e=epoch: hub.exited == 4 * (e + 1), 10, "the epoch's workers to exit")
        text = scrape(hub.exporter.url)
        # step signals appear once their series have warmed up (values, not worker churn)
        counts.append(sum(1 for name, _ in samples(text) if not name.startswith(STEP_SIGNAL)))
        assert value(text, ENV_STEPS) == 8 * 4 * (epoch + 1)
    assert len(set(counts)) == 1, counts


def test_a_plain_subprocess_finds_the_hub_in_its_environment(hub: workers.WorkerHub) -> None:
    code = (
        "from rlpulse.runtime import workers\n"
        "w = workers.worker_client(name='grader')\n"
        f"w.count({ENV_STEPS!r}, 7)\n"
        "w.log({'rollout/queue_depth': 3.0})\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode()
    wait_for(lambda: hub.exited == 1, 10, "the subprocess to disconnect")
    assert _total(hub.exporter, ENV_STEPS) == 7  # sent at interpreter exit


def test_worker_log_maps_keys_but_leaves_the_trainers_step_and_liveness(
    hub: workers.WorkerHub,
) -> None:
    exp = hub.exporter
    exp.log({"loss": 0.5}, step=42)
    exp.flush()
    before = _total(exp, LAST_LOG)
    w = workers.worker_client(hub.address, flush_interval=60)
    w.log({"reward": 0.75, "entropy": 1.25})
    assert w.flush()
    text = scrape(exp.url)
    assert value(text, REWARD) == 0.75
    assert value(text, catalog.get("rl_entropy").name) == 1.25
    assert value(text, STEP) == 42
    assert value(text, LAST_LOG) == before
    w.close()


def test_flush_waits_until_the_exporter_applied_everything(hub: workers.WorkerHub) -> None:
    w = workers.worker_client(str(hub.address), flush_interval=60)
    for _ in range(5000):  # several batches of max_batch
        w.count(ENV_STEPS, 1)
    w.observe(ROLLOUT, [0.5, 1.5], exemplars=["a", "b"])
    assert w.flush()
    text = scrape(hub.exporter.url)
    assert value(text, ENV_STEPS) == 5000
    assert value(text, ROLLOUT + "_count") == 2
    w.close()


def test_bad_calls_are_counted_not_fatal(hub: workers.WorkerHub) -> None:
    w = workers.worker_client(hub.address, flush_interval=60)
    w.count("rl_no_such_metric_total", 1)
    w.set(REWARD, "high")
    w.count(ENV_STEPS, 2)
    assert w.flush()
    raw = Client(hub.address.path, family="AF_UNIX", authkey=hub.address.key)
    raw.send(("hello", {"name": "raw", "pid": 1}))
    raw.send(("calls", [("__import__", ("os",), {}), "junk"]))
    raw.send(("nonsense", None))
    raw.close()
    wait_for(lambda: hub.exited == 1, 10, "the raw client to disconnect")
    text = scrape(hub.exporter.url)
    assert value(text, DROPPED, reason="bad_metric") == 1
    assert value(text, DROPPED, reason="non_numeric") == 1
    assert value(text, DROPPED, reason="bad_worker_call") == 3
    assert value(text, ENV_STEPS) == 2
    w.close()


def test_a_client_without_the_key_is_refused(hub: workers.WorkerHub) -> None:
    with pytest.raises(multiprocessing.AuthenticationError):
        Client(hub.address.path, family="AF_UNIX", authkey=b"wrong")
    w = workers.worker_client(hub.address)
    w.count(ENV_STEPS, 1)
    assert w.flush()  # the hub kept serving
    w.close()


def test_without_a_hub_calls_do_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(workers.ENV, raising=False)
    w = workers.worker_client()
    assert not w.connected
    w.count(ENV_STEPS, 1)
    w.observe_episodes([1.0], [10])
    assert not w.flush()
    monkeypatch.setenv(workers.ENV, "no-at-sign")
    with pytest.raises(ValueError, match="RLPULSE_WORKER_ADDRESS='no-at-sign'"):
        workers.worker_client()


def test_a_hub_that_went_away_is_logged_once(
    hub: workers.WorkerHub, caplog: pytest.LogCaptureFixture
) -> None:
    w = workers.worker_client(hub.address, flush_interval=60)
    w.count(ENV_STEPS, 1)
    assert w.flush()
    hub.close()
    for _ in range(3):
        w.count(ENV_STEPS, 1)
        assert not w.flush(timeout=1)
    assert not w.connected
    assert sum("cannot reach" in r.message for r in caplog.records) == 1


def test_close_removes_the_socket_and_the_variable(hub: workers.WorkerHub) -> None:
    folder = Path(hub.address.path).parent
    assert folder.stat().st_mode & 0o077 == 0  # private to this user
    assert os.environ[workers.ENV] == str(hub.address)
    pid = os.fork()
    if pid == 0:  # a forked child closing the inherited hub leaves the parent's alone
        hub.close()
        os._exit(0 if folder.exists() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert folder.exists()
    hub.close()
    assert not folder.exists()
    assert workers.ENV not in os.environ


def test_serve_needs_an_exporter() -> None:
    with pytest.raises(ValueError, match=r"rlpulse.start\(\) first"):
        workers.serve()


def test_a_worker_feeds_the_ranks_drift_features(hub: workers.WorkerHub) -> None:
    """A reward or environment worker reports what it sees (prompts' sources, versions, its
    own features); the rank's exporter scores them."""
    w = workers.worker_client(str(hub.address), flush_interval=60)
    for _ in range(3):
        w.observe_prompts(sources=["gsm8k", "math"] * 250, lengths=[10.0, 20.0] * 250)
    w.observe_features("observation", obs=[[0.0, 1.0], [1.0, 0.0]] * 700)
    w.observe_versions(grader="g1")
    w.observe_versions(grader="g2")
    steps = np.arange(40.0).reshape(20, 2)
    w.observe_transitions(steps, np.zeros((20, 1)), steps + 1.0)  # an env worker's transitions
    assert w.flush()
    text = scrape(hub.exporter.url)
    hub.exporter.flush()
    dyn = hub.exporter.drift.dynamics
    assert dyn is not None and np.array_equal(dyn.before[-20:], steps)
    feats = hub.exporter.drift.features
    assert feats[("input", "source")].samples == 1500
    assert feats[("observation", "obs[1]")].samples == 1400
    score = catalog.get("rl_drift_score").name
    assert value(text, score, kind="input", feature="version:grader") == 100  # a new version
    assert value(text, score, kind="input", feature="source") == 0
    w.close()
