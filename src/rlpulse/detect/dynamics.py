"""Changed dynamics: a linear model of the environment's step, fit on the run's recent past.

A classic RL run's observations move as its policy learns, so their distribution cannot tell new
dynamics (gravity, a mass, a motor's force) from a policy that got better. The step itself can:
the same state and action lead to the same change while the physics stays, whatever the policy
visits. From sampled transitions (observation, action, next observation; the integrations take
every 4th env step's, episode ends left out), each observation dimension's change ``next - obs``
is fit by least squares on the observation, the action (one column per discrete action) and a
constant, over the ``HISTORY`` transitions before the latest ``WINDOW``: the reference moves
with the run, so a policy that changes slowly is absorbed, while an abrupt change of the
physics is not. The fit is trimmed (fit again without the ``TRIM`` share it fits worst), so a
clipped velocity or a wall does not bend it.

Every ``EVERY`` new transitions the latest ``WINDOW`` are predicted, those inside the history's
range of every input only (a region the policy had not visited says nothing). A dimension's
*error ratio* is their median absolute error over the history's own (at least ``FLOOR`` of the
change's spread: float32 rounding is no error). Only dimensions the model fits are judged (the
history's median error under ``GATE`` of the change's spread: a velocity's update, near-linear
per step, not an angle's sine), so a task whose step the model cannot follow (Acrobot's
four-step integration of two links) is not scored. The score is the largest ratio; at
``LEVEL`` the dynamics changed.

Bounded: ``HISTORY + WINDOW`` transitions of at most ``drift.MAX_DIMS`` dimensions; one
``numpy.linalg.lstsq``-sized solve per ``EVERY`` transitions, on the exporter's thread.
"""

from __future__ import annotations

import numpy as np

HISTORY = 1000  # transitions the model is fit on (the moving reference)
WINDOW = 125  # latest transitions predicted (500 env steps at every 4th step)
EVERY = 32  # new transitions between two scores
TRIM = 0.2  # share of the history refit without (its worst-fit transitions)
GATE = 0.01  # a dimension is judged when the history's median error is under this of its spread
FLOOR = 1e-3  # an error ratio's denominator is at least this of the change's spread
INSIDE = WINDOW // 4  # in-range transitions a score needs
LEVEL = 10.0  # an error ratio at which the dynamics changed
MAX_ACTIONS = 16  # discrete actions given a column each (more: the action is one number)


class Dynamics:
    """The latest transitions of one run and their error ratio."""

    __slots__ = ("actions", "after", "before", "discrete", "since")

    def __init__(self, discrete: bool) -> None:
        self.discrete = discrete
        self.before = np.empty((0, 0))
        self.actions = np.empty((0, 0))
        self.after = np.empty((0, 0))
        self.since = 0  # transitions since the last score

    def add(self, before: np.ndarray, actions: np.ndarray, after: np.ndarray) -> float | None:
        """Take transitions (rows: observation, action, next observation; 2-D float arrays);
        the error ratio when one is worked out now, else None."""
        if not self.before.size or self.before.shape[1:] != before.shape[1:]:
            self.before, self.actions, self.after = before[:0], actions[:0], after[:0]
        if self.actions.shape[1:] != actions.shape[1:]:
            return None  # another action shape than before: left out
        keep = HISTORY + WINDOW
        self.before = np.concatenate((self.before, before))[-keep:]
        self.actions = np.concatenate((self.actions, actions))[-keep:]
        self.after = np.concatenate((self.after, after))[-keep:]
        self.since += len(before)
        if self.since < EVERY or len(self.before) < keep:
            return None
        self.since = 0
        return ratio(self.before, self.actions, self.after, self.discrete)


def ratio(before: np.ndarray, actions: np.ndarray, after: np.ndarray, discrete: bool) -> float:
    """The largest error ratio of the last ``WINDOW`` transitions under the model of those
    before them (NaN when too few are in range or no dimension is judged)."""
    inputs = np.hstack((before, _coded(actions, discrete)))
    x = np.hstack((inputs, np.ones((len(inputs), 1))))
    y = after - before
    split = len(x) - WINDOW
    coef = _trimmed_fit(x[:split], y[:split])
    own = np.median(np.abs(y[:split] - x[:split] @ coef), axis=0)
    spread = y[:split].std(axis=0)
    lo, hi = inputs[:split].min(axis=0), inputs[:split].max(axis=0)
    inside = np.all((inputs[split:] >= lo) & (inputs[split:] <= hi), axis=1)
    judged = own <= GATE * spread
    if inside.sum() < INSIDE or not judged.any():
        return float("nan")
    now = np.median(np.abs(y[split:][inside] - x[split:][inside] @ coef), axis=0)
    ratios = now / np.maximum(own, FLOOR * spread + np.finfo(float).tiny)
    return float(ratios[judged].max())


def _coded(actions: np.ndarray, discrete: bool) -> np.ndarray:
    """A discrete action as one column per action value seen (up to ``MAX_ACTIONS``), else as
    given."""
    if not discrete:
        return actions
    values = np.unique(actions[:, 0])
    if values.size > MAX_ACTIONS:
        return actions
    return (actions[:, :1] == values[None, :]).astype(np.float64)


def _trimmed_fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares of each column of ``y`` on ``x``, fit again without the ``TRIM`` share of
    rows it fits worst."""
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    err = np.abs(y - x @ coef)
    worst = np.quantile(err, 1 - TRIM, axis=0)
    for j in range(y.shape[1]):
        rows = err[:, j] <= worst[j]
        coef[:, j] = np.linalg.lstsq(x[rows], y[rows, j], rcond=None)[0]
    return coef
