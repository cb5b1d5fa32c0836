"""Recording calls are applied in call order, off the training thread (``rlpulse.runtime.calls``):
the process's apply thread applies what nobody scrapes, a full queue drops and counts, never
blocks; the thread survives a fork and never keeps the process alive; a run's end applies
everything before its last scrape."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

from rlpulse.runtime import calls
from rlpulse.runtime.exporter import Exporter
from tests.conftest import fork_child_exits_0


def _exporter(**kwargs: object) -> Exporter:
    return Exporter(port=0, run_id="r", gpu=False, host=False, process=False, **kwargs)  # type: ignore[arg-type]


def _value(exp: Exporter, name: str) -> float:
    return exp.store.values[exp.store.get(name).slot]


def _eventually(check: Callable[[], bool], within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return False


def test_log_and_episodes_apply_in_call_order_whenever_the_store_is_read() -> None:
    """The SB3 callback feeds the return through log() and observe_episodes(): the last call
    wins, with or without a read between the two (issue 24, point 1)."""
    for read_between in (False, True):
        exp = _exporter(metadata={"framework": "sb3"})
        exp.log({"rollout/ep_rew_mean": 100.0}, step=1)
        if read_between:
            exp.flush()
        exp.observe_episodes([5.0], [5])
        exp.flush()
        assert _value(exp, "rl_episode_return") == 5.0


def test_every_call_kind_keeps_its_place() -> None:
    exp = _exporter()
    exp.set("rl_entropy", 1.0)
    exp.log({"rl_entropy": 2.0})
    exp.set("rl_entropy", 3.0)
    exp.count("rl_env_steps_total", 2)
    exp.log({"rl_env_steps_total": 10.0})  # a counter logged as a total: 10, not 12
    with exp.phase("rollout"):
        pass
    assert exp.ingest.calls.queue, "nothing applied on the caller's thread"
    exp.flush()
    assert _value(exp, "rl_entropy") == 3.0
    assert _value(exp, "rl_env_steps_total") == 10.0
    hist = exp.store.get("rl_phase_duration_seconds", phase="rollout").hist
    assert hist is not None and hist.snapshot()[0][-1] == 1


def test_the_apply_thread_applies_what_nobody_scrapes() -> None:
    exp = _exporter()  # never started, never scraped
    for step in range(5000):
        exp.log({"rl_entropy": float(step)}, step=step)
    last = 4999.0
    assert _eventually(lambda: _value(exp, "rl_entropy") == last)
    assert _value(exp, "rl_step") == last and not exp.dropped
    [thread] = [t for t in threading.enumerate() if t.name == "rlpulse-apply"]
    assert thread.daemon  # it never keeps the process alive


def test_a_full_queue_drops_and_counts_without_blocking(caplog: pytest.LogCaptureFixture) -> None:
    exp = _exporter()
    with exp.ingest.calls.lock:  # the applier is stuck: nothing leaves the queue
        for step in range(calls.MAX_QUEUED + 25):
            exp.log({"rl_entropy": float(step)}, step=step)
        exp.observe_episodes([1.0], [3])
    assert exp.dropped == {"queue_full": 26}
    said = [r.getMessage() for r in caplog.records if "queue_full" in r.getMessage()]
    assert len(said) == 1 and "dropped a log() call" in said[0], said  # at once, once
    exp.flush()
    assert _value(exp, "rl_entropy") == calls.MAX_QUEUED - 1.0  # the calls kept, in order


def test_strict_applies_at_once_and_raises_in_the_caller() -> None:
    exp = _exporter(strict=True)
    exp.log({"rl_entropy": 0.5})
    assert not exp.ingest.calls.queue and _value(exp, "rl_entropy") == 0.5
    with pytest.raises(ValueError, match="bool"):
        exp.set("rl_entropy", True)


def test_no_call_keeps_the_callers_array() -> None:
    import numpy as np

    returns, lengths = np.array([1.0, 2.0]), np.array([3, 4])
    exp = _exporter()
    exp.observe_episodes(returns, lengths)
    exp.observe_rollouts(rewards=returns, response_tokens=lengths)
    returns[:] = 100.0  # the trainer reuses its buffer before the call is applied
    exp.flush()
    assert _value(exp, "rl_episode_return") == 1.5 and _value(exp, "rl_reward_mean") == 1.5


def test_end_applies_every_call_before_the_last_scrape() -> None:
    exp = _exporter().start()
    with exp.ingest.calls.lock:
        exp.log({"rl_entropy": 0.25}, step=7)
    exp.end(wait=0)
    assert not exp.ingest.calls.queue
    assert _value(exp, "rl_step") == 7 and _value(exp, "rl_run_finished_timestamp_seconds") > 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_the_apply_thread_is_started_again_in_a_forked_child() -> None:
    before = """
import time
from rlpulse.runtime.exporter import Exporter
from tests.conftest import fork_child_exits_0
exp = Exporter(port=0, run_id="r", gpu=False, host=False, process=False)
exp.log({"rl_entropy": 1.0}, step=1)  # the parent's apply thread runs
time.sleep(0.2)
"""
    child = """
exp.log({"rl_entropy": 2.0}, step=2)
slot = exp.store.get("rl_entropy").slot
deadline = time.monotonic() + 30
while exp.store.values[slot] != 2.0 and time.monotonic() < deadline:
    time.sleep(0.01)
os._exit(0 if exp.store.values[slot] == 2.0 else 1)
"""
    fork_child_exits_0(before, child, timeout=120)


def test_the_first_dropped_call_is_said_on_stderr_once() -> None:
    code = """
from rlpulse.runtime import calls
from rlpulse.runtime.exporter import Exporter
from tests.conftest import fork_child_exits_0
exp = Exporter(port=0, run_id="r", gpu=False, host=False, process=False)
exp.log({"rl_loss": "text"})  # another drop was said before: the queue's is said all the same
exp.flush()
with exp.ingest.calls.lock:
    for step in range(calls.MAX_QUEUED + 5):
        exp.log({"rl_entropy": 1.0}, step=step)
print(exp.dropped)
"""
    env = {k: v for k, v in os.environ.items() if k != "RLPULSE_QUIET"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert "'queue_full': 5" in out.stdout, out.stderr
    assert out.stderr.count("dropped a log() call") == 1, out.stderr


def test_a_backlog_ends_the_gather_and_another_queue_does_not() -> None:
    """The apply thread gathers calls for ``BATCH_SECONDS`` after a wake-up: another exporter's
    first call does not end the gather, a queue of ``BACKLOG`` calls does (here the gather is
    10 minutes long, in a process of its own)."""
    code = """
import time
from rlpulse.runtime import calls
from rlpulse.runtime.exporter import Exporter
calls.BATCH_SECONDS = 600.0
exp = Exporter(port=0, run_id="r", gpu=False, host=False, process=False)
exp.log({"rl_entropy": 0.0}, step=0)  # wakes the apply thread: it gathers
time.sleep(0.5)
other = Exporter(port=0, run_id="o", gpu=False, host=False, process=False)
other.log({"rl_entropy": 1.0}, step=0)
time.sleep(0.5)
assert len(exp.ingest.calls.queue) == 1, "another queue's first call ended the gather"
for step in range(1, calls.BACKLOG):
    exp.log({"rl_entropy": float(step)}, step=step)
deadline = time.monotonic() + 60
while exp.ingest.calls.queue and time.monotonic() < deadline:
    time.sleep(0.01)
assert not exp.ingest.calls.queue and not other.ingest.calls.queue, "the backlog waited"
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_a_queue_past_its_backlog_is_applied_without_a_gather() -> None:
    """Writers that outran the last apply leave a queue past ``BACKLOG``: its next call cannot
    meet ``BACKLOG`` again, so the apply thread does not gather before it applies."""
    code = """
import time
from rlpulse.runtime import calls
from rlpulse.runtime.exporter import Exporter
calls.BATCH_SECONDS = 600.0
exp = Exporter(port=0, run_id="r", gpu=False, host=False, process=False)
queue = exp.ingest.calls.queue
queue.extend(({"rl_entropy": 1.0}, i, 0.0) for i in range(calls.BACKLOG))  # as log() queues
exp.log({"rl_entropy": 2.0}, step=calls.BACKLOG)  # wakes the apply thread
deadline = time.monotonic() + 60
while queue and time.monotonic() < deadline:
    time.sleep(0.01)
assert not queue, "it gathered"
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
