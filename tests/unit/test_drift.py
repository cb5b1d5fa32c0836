"""Drift (``rlpulse.detect.drift``): the debiased PSI's null at small samples, a dead channel, a
category shift, bounded features, onsets, pinned references, and the exporter feeding it off the
caller's thread."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import generate_latest

from rlpulse import Exporter
from rlpulse.detect import drift


def _exp(**kw: object) -> Exporter:
    return Exporter(port=0, run_id="r", gpu=False, host=False, process=False, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [200, 1000])
def test_nothing_changed_scores_near_zero_at_small_samples(n: int) -> None:
    """The PSI of two samples of one distribution is about (k-1)(1/n_ref + 1/n_now) (0.09 for
    ten bins and 200 samples each): the score takes it off, so a null run stays under 0.1 at
    the window's 1,000 samples (under 0.25 at 200)."""
    rng = np.random.default_rng(1)
    raw, scores, cats = [], [], []
    for _ in range(100):
        ref = drift.Reference.of(rng.normal(size=n))
        now = rng.normal(size=n)
        scores.append(ref.score(now))
        shares = np.bincount(np.searchsorted(ref.edges, now, side="right"), minlength=10) / n  # type: ignore[arg-type]
        r = np.maximum(np.asarray(ref.shares), drift.EPS)
        raw.append(
            float(
                np.sum(
                    (np.maximum(shares, drift.EPS) - r) * np.log(np.maximum(shares, drift.EPS) / r)
                )
            )
        )
        tags = ["a", "b", "c", "d"]
        cref = drift.Reference.of(list(rng.choice(tags, n)))
        cats.append(cref.score(list(rng.choice(tags, n))))
    bias = 9 * (2 / n)
    assert np.mean(raw) == pytest.approx(bias, rel=0.3)  # what the score corrects for
    level = drift.CLEAR if n >= drift.WINDOW else drift.SHIFT  # its spread: ~sqrt(18)/n_eff
    assert np.mean(scores) < bias / 4 and np.quantile(scores, 0.99) < level
    assert np.quantile(cats, 0.99) < level


def test_a_channel_that_varied_and_now_reads_one_value_is_dead() -> None:
    rng = np.random.default_rng(2)
    ref = drift.Reference.of(rng.normal(size=1000))
    now = np.zeros(1000)
    now[::20] = rng.normal(size=50)  # a reset now and then still reads a real value
    assert ref.score(now) == drift.EVENT
    always = drift.Reference.of(np.zeros(1000))  # constant from the start: not dead, no drift
    assert not always.varied and always.score(np.zeros(1000)) == 0.0


def test_dead_reads_each_span_it_cannot_rule_out_by_its_equal_neighbours() -> None:
    """``Reference.dead`` skips the spans whose latest values have too few equal neighbours to
    be one value's 90 %: the same answer as reading every span, at shares around 90 %, with
    the other values spread out, clustered, at the end, repeated, or NaN."""
    rng = np.random.default_rng(7)
    ref = drift.Reference.of(rng.normal(size=1000))
    spans = [n for n in drift.DEAD_SPANS if n == drift.EVERY or n > drift.DEAD_RUNS * ref.run]
    seen = set()
    for trial in range(3000):
        n = int(rng.choice([7, 8, 9, 16, 40, 64, 130, 250, 400]))
        values = np.full(n, 3.0)
        k = round(n * rng.uniform(0.0, 0.25))
        at = rng.choice(n, k, replace=False) if trial % 3 else np.arange(n - k, n)
        values[at] = rng.choice([rng.normal(), 1.0, -0.0, math.nan], k) if trial % 5 else 0.0
        want = any(len(values) >= m and drift._top_share(values[-m:]) >= 0.9 for m in spans)
        assert ref.dead(values) == want, (n, k, values.tolist())
        seen.add(want)
    assert seen == {True, False}


def test_a_dead_channel_shows_within_8_samples_not_a_window_later() -> None:
    """A channel that varied and then reads one value is dead once its latest 8 samples are one
    value (8 after a reset's real reading among them), however recently the last score was; a
    channel whose reference held one value for long stretches needs longer spans."""
    rng = np.random.default_rng(5)
    f = drift.Feature("observation", "obs[3]", numeric=True, ref=None)
    f.add(rng.normal(size=drift.REFERENCE + drift.EVERY), 0.0)  # a reference and one score
    assert f.score < drift.SHIFT and f.onset is None and f.ref is not None and f.ref.run == 1
    f.add(np.zeros(7), 1.0)
    assert f.score < drift.EVENT and f.onset is None
    f.add(np.zeros(1), 2.0)
    assert f.score == drift.EVENT and f.onset == 2.0
    f = drift.Feature("observation", "obs[3]", numeric=True, ref=None)
    f.add(rng.normal(size=drift.REFERENCE + drift.EVERY), 0.0)
    dead = np.zeros(16)
    dead[4] = 0.3  # a reset among the dead readings: not dead until 8 after it
    f.add(dead[:12], 1.0)
    assert f.score < drift.EVENT and f.onset is None
    f.add(dead[12:15], 2.0)  # its latest 8 one value again
    assert f.score == drift.EVENT and f.onset == 2.0
    flag = np.repeat(rng.choice([0.0, 1.0, 2.0], 50), 20)  # a flag that stays put 20 samples
    sticky = drift.Reference.of(flag)
    assert sticky.varied and sticky.run >= 20
    assert not sticky.dead(np.zeros(64)) and sticky.dead(np.zeros(drift.EVERY))
    assert sticky.dead(np.zeros(128)) == (drift.DEAD_RUNS * sticky.run < 128)
    tag = drift.Reference.of(list(rng.choice(["a", "b", "c"], 1000, p=[0.49, 0.49, 0.02])))
    assert tag.varied and not tag.dead(["a"] * 24 + ["b"] * 8) and tag.dead(["b"] * 3 + ["a"] * 29)
    again = drift.Reference.from_dict(sticky.to_dict(), "x")
    assert again == sticky
    healthy = drift.Feature("observation", "obs[0]", numeric=True, ref=None)
    for step in range(40):  # a continuous channel never repeats itself
        healthy.add(rng.normal(size=100), float(step))
    assert healthy.score < drift.SHIFT and healthy.onset is None


def test_a_category_shift_and_a_new_category_score_as_large_shifts() -> None:
    rng = np.random.default_rng(3)
    ref = drift.Reference.of(list(rng.choice(["gsm8k", "math"], 1000, p=[0.8, 0.2])))
    mixed = list(rng.choice(["gsm8k", "math"], 1000, p=[0.5, 0.5]))
    new = list(rng.choice(["gsm8k", "math", "code"], 1000, p=[0.7, 0.1, 0.2]))
    assert ref.score(mixed) > drift.SHIFT and ref.score(new) > drift.SHIFT
    assert ref.score(list(rng.choice(["gsm8k", "math"], 1000, p=[0.8, 0.2]))) < drift.CLEAR


def test_features_are_bounded() -> None:
    d = drift.Drift()
    assert d.add("observation", "obs", np.zeros((4, 100)), 0.0)
    names = sorted(n for _, n in d.features)
    assert len(names) == drift.MAX_DIMS and "obs[0]" in names and "obs[99]" in names
    for i in range(drift.MAX_FEATURES):
        assert d.add("input", f"f{i}", np.ones(3), 0.0)
    assert not d.add("input", "one_too_many", np.ones(3), 0.0)
    assert d.add("behaviour", "other_kind", np.ones(3), 0.0)  # the cap is per kind
    f = drift.Feature("input", "tag", numeric=False, ref=None)
    f.add([f"t{i}" for i in range(100)], 0.0)
    assert len(f.categories) == drift.MAX_CATEGORIES and f.taken[-1] == drift.OTHER
    assert len(f.taken) + len(f.window) <= drift.REFERENCE + drift.WINDOW


def _feed(d: drift.Drift, kind: drift.Kind, values: np.ndarray, per_step: int, first: int) -> int:
    step = first
    for i in range(0, values.size, per_step):
        d.add(kind, "x", values[i : i + per_step], float(step))
        step += 1
    return step


def test_an_input_drifts_once_past_shift_an_observation_only_when_dead() -> None:
    rng = np.random.default_rng(4)
    for kind in ("input", "observation"):
        d = drift.Drift()
        step = _feed(d, kind, rng.normal(size=2000), 100, 0)  # steps 0-19: reference, window
        assert d.features[(kind, "x")].onset is None
        step = _feed(d, kind, rng.normal(2.0, 1.0, size=2000), 100, step)  # a shifted mean
        f = d.features[(kind, "x")]
        assert f.score > drift.SHIFT
        if kind == "input":
            assert f.onset is not None and 20 <= f.onset <= 25
        else:
            assert f.onset is None  # an observation moves as the policy learns: context only
        _feed(d, kind, np.zeros(2000), 100, step)
        assert f.score == drift.EVENT and f.onset is not None
        got = {(m.name, labels): v for m, labels, v in d.samples()}
        assert got[("rl_drift_score", (kind, "x"))] == drift.EVENT
        assert ("rl_drift_onset_step", (kind, "x")) in got
    _feed(d, "observation", rng.normal(size=3000), 100, 100)  # back to the reference: cleared
    assert d.features[("observation", "x")].onset is None


def test_a_new_version_is_an_input_drift_from_its_step() -> None:
    d = drift.Drift()
    d.version("grader", "v1", 0.0)
    d.version("grader", "v1", 5.0)
    assert d.features[("input", "version:grader")].score == 0.0
    d.version("grader", "v2", 7.0)
    f = d.features[("input", "version:grader")]
    assert f.score == drift.EVENT and f.onset == 7.0


def test_a_pinned_reference_round_trips_and_bad_files_say_what_is_wrong(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    d = drift.Drift()
    d.add("observation", "obs", rng.normal(size=(1200, 2)), 0.0)
    d.add("input", "source", ["a", "b"] * 600, 0.0)
    path = tmp_path / "drift.json"
    drift.save(d.references(), path, run="ref-run")
    pinned = drift.load(path)
    assert set(pinned) == {"observation/obs[0]", "observation/obs[1]", "input/source"}
    assert pinned["input/source"] == d.references()["input/source"]
    later = drift.Drift(pinned)
    later.add("observation", "obs", rng.normal(3.0, 1.0, size=(1000, 2)), 1.0)  # no own reference
    assert later.features[("observation", "obs[0]")].score > drift.SHIFT
    path.write_text('{"rlpulse_drift": 1, "features": {"input/x": {"n": 5, "shares": [1.0]}}}')
    with pytest.raises(ValueError, match=r"input/x.*edges"):
        drift.load(path)
    path.write_text("{}")
    with pytest.raises(ValueError, match="not an rlpulse drift file"):
        drift.load(path)


def test_the_exporter_copies_at_the_call_and_scores_off_it() -> None:
    exp = _exp(metadata={"grader_version": "g1"})
    try:
        obs = np.random.default_rng(6).normal(size=(2000, 3))
        exp.observe_features("observation", obs=obs)
        exp.observe_features("behaviour", action=[0, 1] * 500, categorical=("action",))
        obs[:] = 0.0  # the trainer reuses its array: the exporter scores what it was given
        assert not any(k == "observation" for k, _ in exp.drift.features)  # queued, not applied
        for _ in range(2):  # texts are taken up to a window's worth a call
            exp.observe_prompts(lengths=np.arange(1000) % 50, sources=["a", "b"] * 500)
        exp.observe_rollouts(
            prompt_tokens=[10.0] * 4,
            response_tokens=[5.0] * 4,
            rewards=[1.0] * 4,
            components={"fmt": [1.0] * 4},
        )
        exp.observe_versions(grader="g2")
        exp.observe_features("input", tag=np.array(["x", "y"] * 600))  # texts in an array
        exp.observe_features("nonsense", x=[1.0])  # counted, not raised
        text = generate_latest(exp.registry).decode()  # a scrape applies what is queued
        feats = exp.drift.features
        assert feats[("observation", "obs[0]")].score == 0.0  # the copy, not the zeros
        assert 'feature="obs[0]",kind="observation"' in text
        assert 'feature="source",kind="input"' in text
        assert not feats[("behaviour", "action")].numeric
        assert feats[("input", "tag")].categories == {"x", "y"}
        assert {
            ("input", "prompt_length"),
            ("behaviour", "response_length"),
            ("behaviour", "reward"),
            ("behaviour", "reward[fmt]"),
        } <= set(feats)
        assert feats[("input", "version:grader")].onset is not None
        assert 'rl_drift_onset_step{feature="version:grader",kind="input"' in text
        assert exp.dropped.get("bad_call") == 1
    finally:
        exp.close()


def test_sb3_and_gymnasium_sample_observations_and_actions_as_drift_features() -> None:
    """Real SB3 PPO on CartPole and a Gymnasium wrapper: every 4th step's observation and
    action become drift samples (an observation per dimension, a discrete action a category)."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO

    from rlpulse.integrations.gymnasium import RlpulseEpisodeStats
    from rlpulse.integrations.sb3 import RlpulseCallback

    torch.set_num_threads(1)
    exp = _exp()
    try:
        model = PPO("MlpPolicy", "CartPole-v1", n_steps=512, seed=0, device="cpu")
        model.learn(8192, callback=RlpulseCallback(exp, rollouts=False))
        exp.flush()
        feats = exp.drift.features
        obs = feats[("observation", "obs[2]")]
        assert obs.numeric and obs.samples == 8192 // 4 and not np.isnan(obs.score)
        action = feats[("behaviour", "action")]
        assert not action.numeric and action.categories == {"0", "1"}
        # and every sampled step that did not end an episode is a transition: its model scored
        assert exp.drift.dynamics is not None and len(exp.drift.dynamics.before) == 1125
        assert feats[("observation", drift.DYNAMICS)].score < drift.EVENT
    finally:
        exp.close()
    exp = _exp()
    try:
        env = RlpulseEpisodeStats(gym.make("MountainCarContinuous-v0"), exp, rollouts=False)
        env.reset(seed=0)
        for _ in range(400):
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            if term or trunc:
                env.reset()
        env.close()
        exp.flush()
        feats = exp.drift.features
        assert feats[("observation", "obs[1]")].samples == 100
        assert feats[("behaviour", "action[0]")].numeric  # a continuous action: its statistics
        assert exp.drift.dynamics is not None and len(exp.drift.dynamics.before) == 100
    finally:
        exp.close()


def test_a_run_saves_its_references_and_a_later_run_is_scored_against_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rng = np.random.default_rng(7)
    first = _exp()
    path = tmp_path / "drift.json"
    try:
        first.observe_prompts(sources=list(rng.choice(["gsm8k", "math"], 1000, p=[0.8, 0.2])))
        first.save_drift_reference(path)
    finally:
        first.close()
    later = _exp(drift_reference=path)
    try:
        shifted = list(rng.choice(["gsm8k", "math"], 1000, p=[0.4, 0.6]))
        later.observe_prompts(sources=shifted)  # from its first samples: no own reference
        later.flush()
        source = later.drift.features[("input", "source")]
        assert source.score > drift.SHIFT and source.onset is not None
    finally:
        later.close()
    path.write_text("{")
    bad = _exp(drift_reference=path)
    assert bad.drift.pinned == {} and "drift reference" in caplog.text
    bad.close()
    with pytest.raises(ValueError, match="drift reference"):
        _exp(drift_reference=path, strict=True)
