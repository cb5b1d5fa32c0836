"""Catalog series names the tests and the scale harness read from a scrape, bound once
(``catalog.get`` checks each name), in catalog-name order."""

from __future__ import annotations

from rlpulse import catalog


def _name(metric: str) -> str:
    return catalog.get(metric).name


COMPLETION_TOKENS = _name("rl_completion_tokens_total")
ENV_STEPS = _name("rl_env_steps_total")
EPISODE_LENGTH = _name("rl_episode_length_steps")
EPISODE_RETURN = _name("rl_episode_return")
EPISODES = _name("rl_episodes_total")
EVAL_SCORE = _name("rl_eval_score")
GRADER_CALLS = _name("rl_grader_calls_total")
GRADER_LATENCY = _name("rl_grader_duration_seconds")
LAST_LOG = _name("rl_last_step_timestamp_seconds")
PHASE = _name("rl_phase_duration_seconds")
RESPONSE_LENGTH = _name("rl_response_length_tokens")
REWARD = _name("rl_reward_mean")
ROLLOUT = _name("rl_rollout_duration_seconds")
OUTCOME = _name("rl_run_outcome")
SAMPLES = _name("rl_samples_total")
STEP = _name("rl_step")
STEP_SIGNAL = _name("rl_step_signal")
SUCCESS = _name("rl_success_ratio")
UNMAPPED = _name("rl_unmapped_metric")
VALUE_LOSS = _name("rl_value_loss")
DROPPED = _name("rlpulse_dropped_values_total")
