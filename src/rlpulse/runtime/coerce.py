"""User input to plain numbers: what ``log()``, ``count()``, ``set()`` and ``observe()`` take
from the trainer, converted at the call so no reference to a user object is kept (a tensor with
its autograd graph, an array the trainer mutates), or a ``Dropped`` saying why it is no number.
"""

from __future__ import annotations

import math
import reprlib
import sys
from collections.abc import Mapping
from operator import countOf
from typing import Any

import numpy as np

PREVIEW_CHARS = 200  # of a dropped value's repr, in the log and in strict errors
_PREVIEW = reprlib.Repr()
_PREVIEW.maxstring = _PREVIEW.maxother = _PREVIEW.maxlong = PREVIEW_CHARS


def preview(value: Any) -> str:
    """A short repr of a user value: bounded, and never an exception."""
    try:
        return _PREVIEW.repr(value)[:PREVIEW_CHARS]
    except Exception:
        return f"<{type(value).__name__} whose repr raised>"


class Dropped:
    """A logged value that is no number: why, and a preview of it (never the object itself)."""

    __slots__ = ("preview", "reason")

    def __init__(self, reason: str, value: Any) -> None:
        self.reason = reason
        self.preview = preview(value)

    def __repr__(self) -> str:
        return self.preview


def int_float(value: int) -> float:
    """An int as a float; one too large for a float is ±Inf (then counted non-finite)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def plain(value: Any) -> float | Dropped:
    """A plain float taken from a logged value now, or why it is not a number.

    Taking it at once keeps no reference to the user's object (a tensor with its autograd
    graph, an array the trainer mutates) and reads the value it had at the call.
    """
    if type(value) is float or type(value) is Dropped:
        return value
    if value is None:
        return Dropped("none", value)
    if isinstance(value, bool | np.bool_):
        return Dropped("bool", value)
    if isinstance(value, int):
        return int_float(value)
    if isinstance(value, str | bytes | complex):
        return Dropped("non_numeric", value)
    if isinstance(value, list | tuple):
        return Dropped("non_scalar", value)
    try:
        if getattr(value, "ndim", 0) != 0:
            return Dropped("non_scalar", value)
        if hasattr(value, "item"):  # numpy and torch scalars; .item() ignores a graph quietly
            value = value.item()
        return int_float(value) if isinstance(value, int) else float(value)
    except Exception:
        return Dropped("non_numeric", value)


FLOAT_MAX = sys.float_info.max
_PLAIN = frozenset({float, int})  # value types log() keeps as they are (immutable numbers)


def plain_key(key: Any) -> Any:
    """A logged dict's key as a plain str, or a ``Dropped`` standing for a non-string key."""
    if isinstance(key, str):
        return str.__str__(key)
    return Dropped("bad_key", key)


def plain_snapshot(metrics: Mapping[Any, Any]) -> dict[Any, Any]:
    """A logged dict as plain floats and ints (others: a ``Dropped`` saying why), taken now so
    that no reference to a user object is kept (``Exporter.log``, ``WorkerClient.log``)."""
    snapshot = dict(metrics)
    values = snapshot.values()  # all floats: the common case, checked at C speed
    if countOf(map(type, values), float) == len(values) or _PLAIN.issuperset(map(type, values)):
        return snapshot
    return {
        (k if type(k) is str else plain_key(k)): (v if type(v) is float else plain(v))
        for k, v in snapshot.items()
    }


def float_array(values: Any) -> np.ndarray:
    """A flat float array of numbers, bools or number objects (huge ints: ±Inf, None: NaN);
    ``TypeError`` for text, complex or anything else."""
    arr = np.asarray(values)
    kind = arr.dtype.kind
    if kind in "biuf":
        return arr.astype(float, copy=False).ravel()
    if kind != "O":
        raise TypeError(f"{arr.dtype} values are not numbers")
    out = np.empty(arr.size, dtype=float)
    for i, item in enumerate(arr.ravel().tolist()):
        v = math.nan if item is None else plain(item)
        if isinstance(v, Dropped):
            raise TypeError(f"{v.preview} is not a number")
        out[i] = v
    return out


def label_text(value: Any) -> str:
    """A label value as text; ``ValueError`` when its ``str()`` fails."""
    try:
        return str(value)
    except Exception as exc:
        raise ValueError(
            f"label value of type {type(value).__name__}: str() failed: {exc!r}"
        ) from None
