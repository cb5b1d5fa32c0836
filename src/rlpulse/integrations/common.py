"""What every integration shares: finding (or starting) the exporter it reports to and ending
the run it started, a clear message when the library is missing, and turning a trainer's dict
into plain numbers."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

import rlpulse
from rlpulse import catalog, notices
from rlpulse.detect import drift
from rlpulse.runtime.exporter import Exporter

HYPERPARAMETER = catalog.get("rl_hyperparameter").name


@contextmanager
def requires(package: str, extra: str) -> Iterator[None]:
    """Around an integration's imports of its library: an ``ImportError`` says which
    ``package`` it needs and the extra that installs it."""
    try:
        yield
    except ImportError as exc:
        needs = f"rlpulse.integrations.{extra} needs {package}"
        raise ImportError(f"{needs}: pip install 'rlpulse[{extra}]' ({exc})") from exc


def exporter_for(
    exporter: Exporter | None,
    framework: str,
    framework_version: str = "",
    *,
    start: bool = True,
    **start_kwargs: Any,
) -> Exporter | None:
    """The exporter an integration reports to.

    ``exporter`` when given; else the process-wide one; else, with ``start``, a process-wide
    exporter started now with ``framework`` in its metadata (so logged keys go through that
    framework's key map) and ``start_kwargs`` passed on to ``rlpulse.start`` (which serves on a
    free port, registered and said, when that port is taken).
    """
    if exporter is not None:
        return exporter
    running = rlpulse.get_exporter()
    if running is not None or not start:
        return running
    metadata = {"framework": framework, "framework_version": framework_version}
    metadata.update(start_kwargs.pop("metadata", None) or {})
    try:
        return rlpulse.start(metadata=metadata, **start_kwargs)  # a taken port: served on another
    except Exception as exc:  # bad monitoring configuration never stops training
        notices.warn(
            "monitoring_off",
            "rlpulse: monitoring is off for this run, training goes on: %s",
            exc,
        )
        return None


def starts_exporter(exporter: Exporter | None, start: bool) -> bool:
    """Whether ``exporter_for`` with these arguments would start the process-wide exporter."""
    return exporter is None and start and rlpulse.get_exporter() is None


def end_run(
    exporter: Exporter | None, started: bool, outcome: str = "finished", reason: str = ""
) -> None:
    """At the end of training: end (``rlpulse.end``) the process-wide exporter the integration
    started itself, so its target going away does not page (a crash pages RLRunCrashed); an
    exporter the user gave or started is theirs to end."""
    if started and exporter is not None and exporter is rlpulse.get_exporter():
        rlpulse.end(outcome, reason)


def scalar(value: Any) -> float | int | None:
    """A plain Python number from a logged value (numpy/torch scalars included), or None for
    anything that is not a single number (strings, videos, figures, arrays, None, bools).

    NaN and ±Inf pass through: the exporter records and counts them.
    """
    t = type(value)
    if t is float or t is int:
        return value
    if value is None or isinstance(value, bool | str | bytes):
        return None
    item = getattr(value, "item", None)
    if item is None or getattr(value, "ndim", 0) != 0:
        return None
    try:
        out = item()
    except (TypeError, ValueError, RuntimeError):
        return None
    if isinstance(out, bool) or not isinstance(out, int | float):
        return None
    return out


def numbers(values: Mapping[str, Any], skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The single-number entries of a trainer's metrics dict, as plain Python numbers."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key in skip:
            continue
        v = scalar(value)
        if v is not None:
            out[key] = v
    return out


def set_hyperparameters(exporter: Exporter, params: Mapping[str, Any]) -> None:
    """Export the numeric entries of ``params`` as ``rl_hyperparameter{name}`` gauges."""
    for name, value in numbers(params).items():
        exporter.set(HYPERPARAMETER, value, name=name)


def final_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """The scalar entries of an episode's last ``info`` (observations and arrays left out)."""
    return {
        str(k): v.item() if hasattr(v, "item") and getattr(v, "size", 1) == 1 else v
        for k, v in info.items()
        if isinstance(v, bool | int | float | str)
        or (hasattr(v, "item") and getattr(v, "size", 0) == 1)
    }


def record_episodes(
    exp: Exporter,
    step: int,
    returns: list[float],
    lengths: list[float],
    successes: list[Any],
    infos: list[dict[str, Any]],
) -> None:
    """Offer finished episodes to the run's rollout store, an episode as a rollout: its return
    as the reward, its length, success as the verdict, and its seed and final info (``infos``:
    one dict per episode) as metadata. The store's sampling and bounds apply."""
    exp.record_rollouts(
        step=step,
        rewards=returns,
        lengths=lengths,
        verdicts=[None if s is None else ("success" if s else "failure") for s in successes],
        metadata=infos,
    )


DRIFT_EVERY = 4  # a classic integration samples every this many steps' observations and actions
MAX_DRIFT_SAMPLES = 4096  # samples buffered between two hand-overs; past it no step is sampled
# until the next (a sample left out is not data lost: drift is scored on samples)


class DriftSampler:
    """Every ``every``-th step's observations (at most ``drift.MAX_DIMS`` dimensions, picked by
    ``drift.columns``) and actions, copied as they are taken and handed to an exporter as drift
    features in one call per flush (``observation`` ``obs[i]``; ``behaviour`` ``action``, a
    category when ``discrete``, else ``action[i]``). ``every=0``: nothing is sampled.
    ``batched``: each step's observation is a batch (a vector env's), not one observation.
    A step given the observations its actions were taken on (``before``) is a transition too
    (``Exporter.observe_transitions``) when the observation has at most ``drift.MAX_DIMS``
    dimensions (a state, not a frame), but for the rows ``ended`` marks (their observation is
    the next episode's first); an env that returns one array it changes in place has none."""

    __slots__ = ("actions", "batched", "before", "discrete", "ended", "every", "idx", "n", "obs")

    def __init__(self, every: int, discrete: bool, batched: bool) -> None:
        self.every, self.discrete, self.batched = every, discrete, batched
        self.n = 0
        self.idx: np.ndarray | None = None  # the watched dimensions
        self.obs: list[np.ndarray] = []
        self.actions: list[np.ndarray] = []
        self.before: list[np.ndarray] = []  # of the transitions: the observations before
        self.ended: list[np.ndarray] = []  # and which of their rows ended an episode

    def step(self, obs: Any, actions: Any, before: Any = None, ended: Any = False) -> None:
        """One step: copied when it is an ``every``-th one (observations that are no array,
        such as a dict space's, are left out)."""
        self.n += 1
        if not self.every or self.n % self.every or type(obs) is not np.ndarray:
            return
        if len(self.obs) >= MAX_DRIFT_SAMPLES:
            return
        rows = obs.reshape(obs.shape[0] if self.batched else 1, -1)
        if self.idx is None:
            self.idx = np.asarray(drift.columns(rows.shape[1]))
        whole = self.idx.size == rows.shape[1]  # a state vector, not a frame's pixels
        self.obs.append(rows.copy() if whole else rows[:, self.idx])  # the watched columns
        if actions is None:
            return
        self.actions.append(np.array(actions, dtype=np.float64).reshape(rows.shape[0], -1))
        if whole and type(before) is np.ndarray and before is not obs and before.shape == obs.shape:
            self.before.append(before.reshape(rows.shape).copy())
            self.ended.append(np.array(ended, dtype=bool))

    def flush(self, exp: Exporter | None) -> None:
        """Hand what was sampled to ``exp`` (nothing is kept either way)."""
        obs, actions, self.obs, self.actions = self.obs, self.actions, [], []
        before, ended, self.before, self.ended = self.before, self.ended, [], []
        if exp is None or not obs or self.idx is None:
            return
        rows = np.concatenate(obs)
        exp.observe_features(
            "observation", **{f"obs[{i}]": rows[:, j] for j, i in enumerate(self.idx.tolist())}
        )
        if not actions:
            return
        acts = np.concatenate(actions)
        if before and len(before) == len(actions) == len(obs):  # every step gave its before
            ok = ~np.concatenate([e.reshape(-1) for e in ended])
            if ok.any():
                exp.observe_transitions(
                    np.concatenate(before)[ok], acts[ok], rows[ok], discrete=self.discrete
                )
        if self.discrete:
            exp.observe_features(
                "behaviour",
                action=acts.astype(np.int64).reshape(-1).tolist(),
                categorical=("action",),
            )
        else:
            exp.observe_features(
                "behaviour", **{f"action[{i}]": acts[:, i] for i in drift.columns(acts.shape[1])}
            )
