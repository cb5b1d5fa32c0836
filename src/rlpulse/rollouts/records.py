"""Rollout columns as the trainer passes them, and the per-row records built for kept rows.

``Columns.parse`` only converts the numeric columns to numpy arrays and checks lengths, so its
cost does not depend on how much text a batch carries. Per-row Python objects are made by
``Columns.rows`` for the few rows the sampler keeps.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np

SHORT_TEXT = 256  # chars kept of ids, group ids and verdicts
ERROR_TEXT = 2048  # chars kept of a grader error


class RolloutTraces(TypedDict, total=False):
    """One batch offered to the trace store (``Recorder.record``): columns of equal length,
    any left out or None; rollouts without ``rollout_ids`` are named ``"<step>-<n>"``."""

    rollout_ids: Any
    step: Any  # one integer or one per rollout
    group_ids: Any
    prompts: Any
    responses: Any
    rewards: Any
    components: Mapping[str, Any] | None  # a reward component's name -> its column
    advantages: Any
    lengths: Any
    truncated: Any
    verdicts: Any
    errors: Any  # a grader error message (or None) per rollout
    tool_calls: Any  # a list of dicts per rollout
    metadata: Any  # a dict per rollout, or one dict for the whole batch


NUMERIC_COLUMNS = ("rewards", "advantages", "lengths")
# the columns kept per rollout as given (texts and JSON), in their order
TEXT_COLUMNS = tuple(
    k
    for k in RolloutTraces.__annotations__
    if k not in (*NUMERIC_COLUMNS, "step", "components", "truncated")
)


class ColumnError(ValueError):
    """A batch whose columns are unusable; the message names the column."""


def _numeric(key: str, values: Any) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise ColumnError(f"column {key!r} is not numeric") from None
    if arr.ndim != 1:
        raise ColumnError(f"column {key!r} must be one-dimensional, got shape {arr.shape}")
    return arr


def _flags(key: str, values: Any, n: int) -> np.ndarray:
    if isinstance(values, np.ndarray) and values.dtype == bool:
        return values.ravel()
    try:
        return np.fromiter(map(bool, values), dtype=bool, count=n)
    except (TypeError, ValueError):
        raise ColumnError(f"column {key!r} must hold {n} truth values") from None


def valid_text(text: str) -> str:
    """``text`` with lone surrogates (not storable as UTF-8) replaced by U+FFFD."""
    if text.isascii():
        return text
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def clip_text(value: Any, limit: int) -> str | None:
    """A stored text: ``None`` stays ``None``, anything else becomes ``str`` of ≤ ``limit``
    characters (a cut is marked with how much was dropped)."""
    if value is None:
        return None
    if type(value) is str and len(value) <= limit and value.isascii():
        return value  # the common case, without a copy
    if isinstance(value, bytes):
        text = value.decode("utf-8", "replace")
    else:
        text = valid_text(value if isinstance(value, str) else str(value))
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[+{len(text) - limit} chars]"


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return repr(value)


def to_json(value: Any, limit: int) -> str | None:
    """JSON text of a tool-call list or metadata dict (``repr`` for what JSON cannot hold,
    NaN/Infinity tokens for non-finite floats); past ``limit`` characters it becomes one
    clipped JSON string."""
    if value is None:
        return None
    text = valid_text(json.dumps(value, default=_json_default, ensure_ascii=False))
    return text if len(text) <= limit else json.dumps(clip_text(text, limit), ensure_ascii=False)


def jsonable(value: Any) -> Any:
    """``value`` made JSON-safe for output: non-finite floats become "nan"/"inf"/"-inf",
    numpy scalars plain numbers."""
    if isinstance(value, float | np.floating):
        f = float(value)
        return f if math.isfinite(f) else repr(f)
    if isinstance(value, np.integer | np.bool_):
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [jsonable(v) for v in value]
    return value


@dataclass
class Columns:
    """One validated batch: ``n`` rollouts, numeric columns as float arrays."""

    n: int
    steps: np.ndarray  # int64, one per rollout
    rewards: np.ndarray | None = None
    advantages: np.ndarray | None = None
    lengths: np.ndarray | None = None
    truncated: np.ndarray | None = None  # bool
    components: dict[str, np.ndarray] = field(default_factory=dict)
    text: dict[str, Any] = field(default_factory=dict)  # TEXT_COLUMNS given per rollout
    shared_metadata: Mapping[str, Any] | None = None

    @classmethod
    def parse(cls, batch: Mapping[str, Any]) -> Columns:
        """Validate a batch (``RolloutTraces``); ``ColumnError`` names the first bad column."""
        step: Any = batch.get("step")
        components, truncated = batch.get("components"), batch.get("truncated")
        arrays = {k: _numeric(k, v) for k in NUMERIC_COLUMNS if (v := batch.get(k)) is not None}
        text = {k: batch.get(k) for k in TEXT_COLUMNS}
        comps = {}
        if components is not None:
            if not isinstance(components, Mapping):
                raise ColumnError("column 'components' must map component names to arrays")
            comps = {str(k): _numeric(f"components[{k}]", v) for k, v in components.items()}
        shared = None
        per_row: dict[str, Any] = {}
        for key, seq in text.items():
            if seq is None:
                continue
            if key == "metadata" and isinstance(seq, Mapping):
                shared = seq
                continue
            if isinstance(seq, str | bytes | Mapping) or not (
                hasattr(seq, "__len__") and hasattr(seq, "__getitem__")
            ):
                raise ColumnError(f"column {key!r} must be a sequence with one item per rollout")
            per_row[key] = seq
        sizes = {k: a.size for k, a in arrays.items()}
        sizes |= {f"components[{k}]": a.size for k, a in comps.items()}
        sizes |= {k: len(v) for k, v in per_row.items()}
        if isinstance(truncated, str | bytes | Mapping):  # '' would read as an empty batch
            raise ColumnError("column 'truncated' must hold one truth value per rollout")
        if truncated is not None and hasattr(truncated, "__len__"):
            sizes["truncated"] = len(truncated)
        if np.ndim(step) == 1:
            sizes["step"] = len(step)
        if not sizes:
            raise ColumnError("no per-rollout column given (rewards, responses, rollout_ids …)")
        n = next(iter(sizes.values()))
        if any(s != n for s in sizes.values()):
            raise ColumnError(f"columns differ in length: {sizes}")
        try:
            steps = np.broadcast_to(np.asarray(-1 if step is None else step, dtype=np.int64), (n,))
        except (TypeError, ValueError, OverflowError):
            raise ColumnError(f"column 'step' must be an integer or {n} integers") from None
        return cls(
            n=n,
            steps=steps,
            rewards=arrays.get("rewards"),
            advantages=arrays.get("advantages"),
            lengths=arrays.get("lengths"),
            truncated=None if truncated is None else _flags("truncated", truncated, n),
            components=comps,
            text=per_row,
            shared_metadata=shared,
        )

    def error_flags(self) -> np.ndarray | None:
        """Which rollouts carry a grader error (a non-empty ``errors`` entry)."""
        errors = self.text.get("errors")
        return None if errors is None else _flags("errors", errors, self.n)

    def nonfinite_flags(self) -> np.ndarray | None:
        """Which rollouts have a NaN/±Inf reward, advantage or component."""
        cols = [
            c for c in (self.rewards, self.advantages, *self.components.values()) if c is not None
        ]
        if not cols:
            return None
        bad = ~np.isfinite(cols[0])
        for c in cols[1:]:
            bad |= ~np.isfinite(c)
        return bad

    def length_scores(self) -> np.ndarray | None:
        """Rollout lengths: the ``lengths`` column, else the response length in characters."""
        if self.lengths is not None:
            return self.lengths
        responses = self.text.get("responses")
        if responses is None:
            return None
        return np.fromiter(
            (len(r) if isinstance(r, str) else 0 for r in responses), dtype=float, count=self.n
        )

    def rows(self, positions: list[int], first_seq: int, max_text: int) -> list[dict[str, Any]]:
        """The records of the rollouts at ``positions``: plain Python values, texts clipped,
        tool calls and metadata snapshotted as JSON. Rollouts without an id are named
        ``"<step>-<first_seq + position>"``."""
        pos = np.asarray(positions, dtype=np.intp)
        steps = self.steps[pos].tolist()

        def numbers(arr: np.ndarray | None) -> list[Any]:
            return [None] * len(positions) if arr is None else arr[pos].tolist()

        def items(key: str) -> list[Any]:
            seq = self.text.get(key)
            return [None] * len(positions) if seq is None else [seq[i] for i in positions]

        comps = {k: v[pos].tolist() for k, v in self.components.items()}
        meta = items("metadata")
        shared = self.shared_metadata
        if shared is not None:
            meta = [{**shared, **m} if m else shared for m in meta]
        tool_calls = items("tool_calls")
        if tool_calls and all(t is tool_calls[0] for t in tool_calls):  # one object per batch
            tool_calls = [to_json(tool_calls[0], max_text)] * len(positions)
        else:
            tool_calls = [to_json(t, max_text) for t in tool_calls]
        if meta and all(m is meta[0] for m in meta):
            meta = [to_json(meta[0], max_text)] * len(positions)
        else:
            meta = [to_json(m, max_text) for m in meta]
        out = []
        for j, (i, rid, group, prompt, response, verdict, error) in enumerate(
            zip(
                positions,
                items("rollout_ids"),
                items("group_ids"),
                items("prompts"),
                items("responses"),
                items("verdicts"),
                items("errors"),
                strict=True,
            )
        ):
            out.append(
                {
                    "rollout_id": clip_text(
                        f"{steps[j]}-{first_seq + i}" if rid is None else rid, SHORT_TEXT
                    ),
                    "step": steps[j],
                    "group_id": clip_text(group, SHORT_TEXT),
                    "prompt": clip_text(prompt, max_text),
                    "response": clip_text(response, max_text),
                    "components": {k: v[j] for k, v in comps.items()},
                    "verdict": clip_text(verdict, SHORT_TEXT),
                    "error": clip_text(error, ERROR_TEXT) if error else None,
                    "tool_calls": tool_calls[j],
                    "metadata": meta[j],
                }
            )
        for key, arr in (
            ("reward", self.rewards),
            ("advantage", self.advantages),
            ("length", self.lengths),
            ("truncated", self.truncated),
        ):
            for rec, v in zip(out, numbers(arr), strict=True):
                rec[key] = v
        return out
