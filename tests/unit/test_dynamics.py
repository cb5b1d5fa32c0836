"""Changed dynamics (``rlpulse.detect.dynamics``): a policy that learns moves what the run visits,
not the model of its step; new physics moves the model; the drift feature keeps the change."""

from __future__ import annotations

import numpy as np
import pytest

from rlpulse import Exporter
from rlpulse.detect import drift, dynamics


def _pendulum(n: int, gravity_at: int | None, seed: int = 0) -> tuple[np.ndarray, ...]:
    """A pendulum held up by a policy whose gains grow as it learns (its states narrow from
    wide swings to small ones), every step's transition; gravity x3 from ``gravity_at``."""
    rng = np.random.default_rng(seed)
    dt, state = 0.05, np.array([0.5, 0.0])
    before, actions, after = [], [], []
    for t in range(n):
        g = 30.0 if gravity_at is not None and t >= gravity_at else 10.0
        gain = 1.0 + 9.0 * min(1.0, t / n)  # learning: a stronger hold, narrower states
        u = float(np.clip(-gain * (4 * state[0] + state[1]) + rng.normal(0, 2), -8, 8))
        omega = state[1] + dt * (g * np.sin(state[0]) + u)
        nxt = np.array([state[0] + dt * omega, omega])
        before.append(state), actions.append([u]), after.append(nxt)
        state = nxt if abs(nxt[0]) < 1.0 else rng.normal(0, 0.3, 2)
    return np.array(before), np.array(actions), np.array(after)


def _ratios(before: np.ndarray, actions: np.ndarray, after: np.ndarray) -> list[float]:
    model = dynamics.Dynamics(discrete=False)
    out = []
    for i in range(0, len(before), 16):
        r = model.add(before[i : i + 16], actions[i : i + 16], after[i : i + 16])
        if r is not None:
            out.append(r)
    return out


def test_a_policy_that_learns_stays_under_the_level_new_gravity_crosses_it() -> None:
    healthy = _ratios(*_pendulum(6000, None))
    assert len(healthy) > 100 and np.nanmax(healthy) < dynamics.LEVEL / 2
    changed = _ratios(*_pendulum(6000, 4000))
    assert len(changed) == len(healthy)  # both score on the same schedule
    first = (4000 - dynamics.HISTORY - dynamics.WINDOW) // dynamics.EVERY + 1
    assert np.nanmax(changed[:first]) < dynamics.LEVEL / 2
    assert np.nanmax(changed[first:]) >= dynamics.LEVEL


def test_discrete_actions_are_a_column_each() -> None:
    """A cart pushed left or right: the push's effect is one column per action, not a slope."""
    rng = np.random.default_rng(1)
    n = dynamics.HISTORY + dynamics.WINDOW
    x = rng.normal(size=(n, 2))
    a = rng.integers(0, 3, size=(n, 1)).astype(float)
    push = np.array([-1.0, 0.3, 1.0])[a[:, 0].astype(int)]  # not linear in the index
    nxt = x + 0.02 * np.column_stack((x[:, 1], push - x[:, 0]))
    assert dynamics.ratio(x, a, nxt, discrete=True) < 2.0
    nxt[-dynamics.WINDOW :, 1] += 0.02 * push[-dynamics.WINDOW :]  # the motor twice as strong
    assert dynamics.ratio(x, a, nxt, discrete=True) >= dynamics.LEVEL


def test_a_step_the_model_cannot_follow_is_not_judged() -> None:
    rng = np.random.default_rng(2)
    n = dynamics.HISTORY + dynamics.WINDOW
    x = rng.normal(size=(n, 1))
    nxt = x + np.sin(3 * x) ** 2  # far from linear: no dimension is judged
    assert np.isnan(dynamics.ratio(x, np.zeros((n, 1)), nxt, discrete=False))


def test_the_drift_feature_keeps_a_change_from_its_step() -> None:
    d = drift.Drift()
    before, actions, after = _pendulum(6000, 4000)
    for i in range(0, len(before), 16):
        d.transitions(before[i : i + 16], actions[i : i + 16], after[i : i + 16], False, i)
    feature = d.features[("observation", drift.DYNAMICS)]
    assert feature.score == drift.EVENT and 4000 <= (feature.onset or 0) < 4000 + 4 * 125
    scores = {labels: v for metric, labels, v in d.samples() if metric is drift.SCORE}
    assert scores[("observation", drift.DYNAMICS)] == drift.EVENT


def test_the_exporter_copies_transitions_at_the_call() -> None:
    exp = Exporter(port=0, run_id="r", gpu=False, host=False, process=False)
    try:
        before, actions, after = _pendulum(2000, None)
        kept = before.copy()
        exp.observe_transitions(before, actions, after)
        before[:] = 0.0  # the trainer reuses its array
        exp.observe_transitions([[1.0, 2.0]], [[0.0]], [[1.0]])  # shapes that differ: counted
        exp.flush()
        assert exp.drift.dynamics is not None
        got = exp.drift.dynamics.before
        assert np.array_equal(got, kept[-len(got) :])
        assert exp.drift.features[("observation", drift.DYNAMICS)].score < dynamics.LEVEL
        assert exp.dropped.get("bad_call") == 1
    finally:
        exp.close()


def test_a_custom_loop_sends_transitions_through_the_facade() -> None:
    """``rlpulse.observe_transitions`` (a loop without an integration) reaches the process's
    exporter like every other recording call."""
    import rlpulse

    exp = rlpulse.start(0, addr="127.0.0.1", run_id="facade-transitions", gpu=False, host=False)
    try:
        before, actions, after = _pendulum(500, None)
        rlpulse.observe_transitions(before, actions, after)
        exp.flush()
        assert exp.drift.dynamics is not None
        assert np.array_equal(exp.drift.dynamics.before, before[-len(exp.drift.dynamics.before) :])
    finally:
        rlpulse.close()


@pytest.mark.parametrize("mode", ["next", "same"])
def test_a_vector_env_leaves_resets_out_of_its_transitions(mode: str) -> None:
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    from rlpulse.integrations.gymnasium import RlpulseVectorEpisodeStats

    exp = Exporter(port=0, run_id="r", gpu=False, host=False, process=False)
    try:
        autoreset = AutoresetMode.NEXT_STEP if mode == "next" else AutoresetMode.SAME_STEP
        envs = gym.vector.SyncVectorEnv(
            [lambda: gym.make("CartPole-v1")] * 2, autoreset_mode=autoreset
        )
        env = RlpulseVectorEpisodeStats(envs, exp, rollouts=False, drift_every=1)
        env.reset(seed=0)
        for _ in range(300):
            env.step(env.action_space.sample())
        env.close()
        exp.flush()
        assert exp.drift.dynamics is not None
        b, a = exp.drift.dynamics.before, exp.drift.dynamics.actions
        nxt = exp.drift.dynamics.after
        assert 0 < len(b) < 600  # some rows left out: episodes ended
        # CartPole's position moves by tau times the velocity before it: every row is one step
        assert np.allclose(nxt[:, 0], b[:, 0] + 0.02 * b[:, 1], atol=1e-6)
        assert set(np.unique(a)) <= {0.0, 1.0}
    finally:
        exp.close()
