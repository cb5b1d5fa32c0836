"""What a run says about itself once, at start: ``metadata=`` as the labels of its
``rl_run_info`` series, and the numbers of ``config=`` as ``rl_hyperparameter{name}``.

Nothing here raises on user data: a key or value that cannot be kept is handed to ``drop``
(``bad_metadata``, ``bad_config``), which counts it and says so once.
"""

from __future__ import annotations

import dataclasses
import re
import socket
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlpulse import catalog
from rlpulse.catalog import IDENTITY_LABELS, Metric
from rlpulse.runtime.coerce import label_text
from rlpulse.version import __version__

Drop = Callable[[str, str, Any], None]  # (reason, key, value)

RUN_INFO = catalog.get("rl_run_info")
# rl_run_info's labels a trainer may set (rlpulse_version is always rlpulse's own)
METADATA_KEYS = tuple(n for n in RUN_INFO.labels if n != "rlpulse_version")
METADATA_ALIASES = {"grader": "grader_version", "version": "framework_version", "sha": "git_sha"}
MAX_EXTRA_METADATA = 16  # free-form metadata keys kept as rl_run_info labels
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 256
# label names a free-form key may not take: Prometheus' own and the ones it would rename
RESERVED_LABELS = frozenset({*IDENTITY_LABELS, *RUN_INFO.labels, "job", "instance", "le"})
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_CONFIG_DEPTH = 32  # nesting of config= kept as rl_hyperparameter{name}


@dataclass(frozen=True)
class RunInfo:
    """The run's ``rl_run_info`` series: the metric with this run's free-form labels added,
    its label values, and the framework the trainer named (lower case) if any."""

    metric: Metric
    values: tuple[str, ...]
    framework: str | None


def run_info(metadata: Any, drop: Drop) -> RunInfo:
    """``metadata=`` as the run's info series (aliases such as ``sha`` understood; free-form
    keys that are label names become extra labels, at most ``MAX_EXTRA_METADATA``)."""
    if not isinstance(metadata, Mapping):
        drop("bad_metadata", "metadata", metadata)
        metadata = {}
    info = dict.fromkeys(METADATA_KEYS, "")
    info["host"] = socket.gethostname()
    extra: dict[str, str] = {}
    for raw_key, value in metadata.items():
        key = METADATA_ALIASES.get(raw_key, raw_key)
        text = "" if value is None else str(value)[:MAX_METADATA_VALUE_CHARS]
        if key in info:
            info[key] = text
        elif _free_form_key(key, extra):
            extra[key] = text
        else:
            drop("bad_metadata", str(raw_key), value)
    if not info["git_sha"]:
        info["git_sha"] = _git_sha()
    info["rlpulse_version"] = __version__
    return RunInfo(
        dataclasses.replace(RUN_INFO, labels=(*RUN_INFO.labels, *extra)),
        (*(info[k] for k in RUN_INFO.labels), *extra.values()),
        info["framework"].lower() or None,
    )


def _free_form_key(key: Any, kept: Mapping[str, str]) -> bool:
    """Whether a metadata key outside the catalog's can be one more rl_run_info label: a
    label name (not reserved, not ``__``-prefixed, bounded length) while there is room."""
    return (
        isinstance(key, str)
        and len(key) <= MAX_METADATA_KEY_CHARS
        and _LABEL_NAME.fullmatch(key) is not None
        and not key.startswith("__")
        and key not in RESERVED_LABELS
        and len(kept) < MAX_EXTRA_METADATA
    )


def _git_sha() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=2,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def hyperparameters(
    config: Any, drop: Drop, prefix: str = "", within: tuple[int, ...] = ()
) -> Iterator[tuple[str, Any]]:
    """The numeric settings of ``config=`` as (dotted name, value); strings, lists and None
    are settings, not numbers, and are skipped. A cycle, nesting past ``MAX_CONFIG_DEPTH`` or
    a mapping that fails to iterate is dropped as ``bad_config``."""
    if not isinstance(config, Mapping) or id(config) in within:
        drop("bad_config", prefix or "config", "not a mapping, or a cycle")
        return
    if len(within) >= MAX_CONFIG_DEPTH:
        drop("bad_config", prefix, f"nested deeper than {MAX_CONFIG_DEPTH}")
        return
    try:
        items = list(config.items())
    except Exception as exc:
        drop("bad_config", prefix or "config", exc)
        return
    for key, value in items:
        try:
            name = f"{prefix}{label_text(key)}"
        except ValueError as exc:
            drop("bad_config", prefix or "config", exc)
            continue
        if isinstance(value, Mapping):
            yield from hyperparameters(value, drop, f"{name}.", (*within, id(config)))
        elif isinstance(value, bool | np.bool_):
            yield name, float(value)
        elif isinstance(value, int | float | np.number):
            yield name, value


NOT_VERSIONED = frozenset({"framework_version", "rlpulse_version"})


def versions(info: RunInfo) -> Iterator[tuple[str, str]]:
    """The versioned parts the run's metadata names: (``grader``, its version) from
    ``grader_version``, (``env``, ...) from a free-form ``env_version`` ... (not the
    framework's)."""
    for name, value in zip(info.metric.labels, info.values, strict=True):
        if name.endswith("_version") and value and name not in NOT_VERSIONED:
            yield name.removesuffix("_version"), value
