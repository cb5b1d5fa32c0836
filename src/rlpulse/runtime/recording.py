"""The recording API, one protocol: what a trainer, a library or a worker calls to record.

``Exporter`` (in the process that serves ``/metrics``) and ``workers.WorkerClient`` (in a worker
that reports to it) implement it; the module functions ``rlpulse.log``, ``rlpulse.count`` ...
forward to the process-wide exporter through it. No implementation raises into the caller on
bad input (unless ``strict``) or keeps a reference to a logged object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypedDict, Unpack

# The calls a worker sends to its rank's exporter (``phase`` is timed in the worker and sent
# as ``observe``).
SENT = frozenset(
    {
        "log",
        "count",
        "set",
        "observe",
        "observe_rollouts",
        "observe_episodes",
        "observe_features",
        "observe_transitions",
        "observe_prompts",
        "observe_versions",
    }
)


class RolloutBatch(TypedDict, total=False):
    """One batch of rollouts, the keywords of ``observe_rollouts``: per-sample arrays (or lists)
    of equal length; any may be left out or None."""

    latency_seconds: Any
    response_tokens: Any
    prompt_tokens: Any
    rewards: Any
    components: Mapping[str, Any] | None  # a reward component's name -> its per-sample array
    truncated: Any
    format_ok: Any
    success: Any
    group_size: int | None  # rollouts per prompt, consecutive in the batch
    rollout_ids: Sequence[Any] | None  # exemplar ids (only the kept ones lead to a trace)


# the per-sample arrays of a batch, in their order
ROLLOUT_ARRAYS = tuple(
    k for k in RolloutBatch.__annotations__ if k not in ("components", "group_size", "rollout_ids")
)


def check_keywords(call: str, given: Mapping[str, Any], keywords: type) -> None:
    """``TypeError`` for a keyword the TypedDict ``keywords`` does not have, as a signature
    would say it: ``call`` takes ``**given: Unpack[keywords]``."""
    for name in given:
        if name not in keywords.__annotations__:
            raise TypeError(f"{call}() got an unexpected keyword argument {name!r}")


class Recording(Protocol):
    """Record into the run's catalog metrics."""

    def log(self, metrics: Mapping[str, Any], /) -> None:
        """A trainer's metrics dict; framework keys are mapped onto the catalog."""

    def count(self, name: str, amount: float = 1.0, /, **labels: Any) -> None:
        """Add ``amount`` (≥ 0) to a catalog counter."""

    def set(self, name: str, value: Any, /, **labels: Any) -> None:
        """Set a catalog gauge."""

    def observe(
        self, name: str, values: Any, /, *, exemplars: Sequence[Any] | None = None, **labels: Any
    ) -> None:
        """Add a batch of values (or one value) to a catalog histogram."""

    def observe_rollouts(self, **batch: Unpack[RolloutBatch]) -> None:
        """One batch of rollouts (``RolloutBatch``)."""

    def observe_episodes(self, returns: Any, lengths: Any, success: Any = None) -> None:
        """Finished episodes (classic RL)."""

    def observe_features(
        self, kind: str, /, *, categorical: Iterable[str] = (), **features: Any
    ) -> None:
        """Samples of drift features (input, observation or behaviour)."""

    def observe_transitions(
        self, before: Any, actions: Any, after: Any, *, discrete: bool = False
    ) -> None:
        """Sampled environment transitions (observation, action, next observation), whose
        model's error is the drift feature ``observation/dynamics``."""

    def observe_prompts(
        self, *, lengths: Any = None, sources: Any = None, difficulty: Any = None
    ) -> None:
        """A batch of prompts' lengths, source tags and difficulty as drift inputs."""

    def observe_versions(self, **versions: Any) -> None:
        """The versions of the run's parts now (a change is an input drift)."""

    def phase(self, name: str) -> AbstractContextManager[Any]:
        """Time a phase (``with rec.phase("rollout"): ...``) into rl_phase_duration_seconds."""
