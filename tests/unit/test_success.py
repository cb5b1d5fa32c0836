"""The success rate derived from binary episode returns (rlpulse.runtime.success), and through the
exporter: a classic loop's logged episode rewards become ``rl_success_ratio``."""

from __future__ import annotations

import math

from rlpulse.runtime.exporter import Exporter
from rlpulse.runtime.success import SuccessFromReturns
from tests.conftest import samples, scrape


def test_the_share_of_goals_among_the_last_episodes() -> None:
    rate = SuccessFromReturns(window=4)
    assert [rate.returned(r) for r in (0.0, 1.0, 1.0, 0.0)] == [0.0, 0.5, 2 / 3, 0.5]
    assert rate.returned(1.0) == 0.75  # the first 0 left the window
    assert [rate.returned(1.0) for _ in range(3)] == [0.75, 0.75, 1.0]


def test_a_return_that_is_not_binary_ends_it_for_good() -> None:
    rate = SuccessFromReturns()
    assert rate.returned(1.0) == 1.0
    assert math.isnan(rate.returned(0.35))  # an averaged or shaped return: withdrawn
    assert rate.returned(1.0) is None and not rate.active
    assert SuccessFromReturns().returned(math.nan) is None  # nothing given, nothing withdrawn


def test_stop_when_the_trainer_logs_its_own() -> None:
    rate = SuccessFromReturns()
    rate.stop()
    assert rate.returned(1.0) is None


# ---- through the exporter: a logged dict, mapped and scraped ----------------------------------


def scraped_success(*logged: dict[str, float], framework: str | None = None) -> list[float]:
    """``rl_success_ratio`` samples of a scrape after the trainer logged ``logged``."""
    metadata = {"framework": framework} if framework else {}
    exp = Exporter(port=0, run_id="success", gpu=False, metadata=metadata).start()
    try:
        for step, metrics in enumerate(logged):
            exp.log(metrics, step=step)
        text = scrape(exp.url)
    finally:
        exp.close()
    return [v for (name, _), v in samples(text).items() if name == "rl_success_ratio"]


def test_the_tutorial_loop_gets_a_success_rate() -> None:
    """{"episode", "reward"} is a classic loop; FrozenLake's reward is 1 at the goal."""
    rewards = (0.0, 1.0, 1.0, 0.0)
    assert scraped_success(*({"episode": e, "reward": r} for e, r in enumerate(rewards))) == [0.5]


def test_returns_that_are_not_binary_withdraw_it() -> None:
    [rate] = scraped_success({"episode": 0, "reward": 1.0}, {"episode": 1, "reward": 3.5})
    assert math.isnan(rate)
    assert scraped_success({"episode": 0, "reward": 12.0}, {"episode": 1, "reward": 1.0}) == []


def test_a_success_rate_the_trainer_logs_is_the_only_one() -> None:
    logged = [{"episode": e, "reward": 1.0, "success_rate": 0.25} for e in range(3)]
    assert scraped_success(*logged) == [0.25]


def test_only_a_classic_loop_logs_one_episode_per_value() -> None:
    """SB3's ep_rew_mean is a mean over 100 episodes: no success from it."""
    assert scraped_success({"rollout/ep_rew_mean": 1.0}, framework="sb3") == []
