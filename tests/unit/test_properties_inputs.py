"""Property-based bad input (hypothesis) beyond log(): rollout records, the stack's YAML config
and the command line. A rollout batch is stored or counted as dropped (never raises); a config
document is a Config or a ConfigError naming the file; an argument list exits 0 or 2 with a
message, never a traceback. Expected behaviour: docs/reliability.md."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlpulse import cli
from rlpulse.rollouts import Recorder
from rlpulse.stack import config

_SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_TMP = Path(tempfile.mkdtemp(prefix="rlpulse-props-"))

# ---- rollout records ----------------------------------------------------------------------------

_CELLS = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.text(max_size=12),
    st.binary(max_size=4),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
_COLUMN = st.one_of(
    st.none(),
    st.lists(_CELLS, max_size=6),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=3, max_size=3),
    st.builds(np.array, st.lists(st.floats(width=32), max_size=4)),
    _CELLS,
)
_RECORDER = Recorder("props", data_dir=_TMP / "data", max_rows=200, queue_size=8)


def _accounted() -> float:
    stats = _RECORDER.stats()
    return stats.get("offered", 0.0) + stats.get("dropped:invalid", 0.0)


@_SETTINGS
@given(
    columns=st.dictionaries(
        st.sampled_from(
            ["rollout_ids", "group_ids", "prompts", "responses", "rewards", "advantages"]
            + ["lengths", "truncated", "verdicts", "errors", "tool_calls", "metadata"]
        ),
        _COLUMN,
        max_size=6,
    ),
    step=st.one_of(st.none(), _CELLS, st.lists(st.integers(), max_size=6)),
    components=st.one_of(st.none(), st.dictionaries(st.text(max_size=6), _COLUMN, max_size=2)),
)
def test_a_rollout_batch_is_stored_or_counted_never_raised(
    columns: dict[str, Any], step: Any, components: Any
) -> None:
    before = _accounted()
    kept = _RECORDER.record(step=step, components=components, **columns)
    assert isinstance(kept, list) and all(isinstance(p, int) for p in kept)
    given = [*columns.values(), step, *(components or {}).values()]
    empty = any(isinstance(c, list | np.ndarray) and len(c) == 0 for c in given)
    # offered (then sampled) or counted as dropped:invalid; an empty batch is a no-op
    assert _accounted() > before or (empty and not kept), (columns, step, components)


def test_the_recorder_still_writes_after_all_that() -> None:
    assert _RECORDER.record(rewards=[1.0, 0.0], responses=["a", "b"], step=1) is not None
    assert _RECORDER.flush()
    assert _RECORDER.stats()["recorded"] > 0


# ---- the stack's YAML config --------------------------------------------------------------------


def _keys(cls: Any) -> list[str]:
    out: list[str] = []
    for f in dataclasses.fields(cls):
        out.append(config.yaml_key(f))
        sub = getattr(cls(), f.name)
        if dataclasses.is_dataclass(sub):
            out += _keys(type(sub))
    return out


_CONFIG_KEYS = sorted(set(_keys(config.Config)))
_YAML_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["30s", "5m", "1h", "0s", "-1m", "1.5m", "slack", "webhook", "rl_loss"]),
    st.text(max_size=10),
)
_YAML_DOCS = st.recursive(
    _YAML_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(_CONFIG_KEYS) | st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=16,
)


@_SETTINGS
@given(doc=_YAML_DOCS)
def test_any_yaml_config_loads_or_fails_naming_the_file(doc: Any) -> None:
    path = _TMP / "rlpulse.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    try:
        cfg = config.load(path)
    except config.ConfigError as exc:
        assert str(exc).startswith(f"{path}: "), exc
        return
    assert isinstance(cfg, config.Config)


# ---- command-line arguments ---------------------------------------------------------------------

# Subcommands that only read or write below the working directory are run; the others (stack,
# demo, tail-tensorboard start processes or loop) are only parsed.
_RUN = {"catalog", "targets", "rollouts"}
_TOKENS = st.one_of(
    st.sampled_from(
        ["catalog", "targets", "rollouts", "list", "show", "generate", "replay", "stack", "up"]
        + ["demo", "tail-tensorboard", "--format", "json", "markdown", "table", "--hosts"]
        + ["gpu[01-04]", "gpu[1-x]", "a,b", "--ranks-per-node", "0", "-3", "8", "--label"]
        + ["k=v", "bad", "1k=v", "-o", "out.json", "missing/dir/out.json", "--base-port"]
        + ["--run", "nope", "--worst", "--step", "--limit", "--data-dir", "--version", "-h"]
        + ["--config", "--check", "--fast", "--scenario", "--"]
    ),
    st.text(max_size=8),
)


@contextlib.contextmanager
def _sandbox() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    cwd = os.getcwd()
    work = Path(tempfile.mkdtemp(dir=_TMP))
    out, err = io.StringIO(), io.StringIO()
    env = os.environ.get("RLPULSE_DATA_DIR")
    os.environ["RLPULSE_DATA_DIR"] = str(work / "data")
    os.chdir(work)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield out, err
    finally:
        os.chdir(cwd)
        if env is None:
            os.environ.pop("RLPULSE_DATA_DIR", None)
        else:
            os.environ["RLPULSE_DATA_DIR"] = env


@_SETTINGS
@given(argv=st.lists(_TOKENS, max_size=6))
def test_any_argument_list_exits_0_or_2_with_a_message(argv: list[str]) -> None:
    with _sandbox() as (_out, err):
        try:
            args = cli.build_parser().parse_args(argv)
            code = cli.main(argv) if getattr(args, "command", None) in _RUN else 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    assert code in (0, 2), (argv, code, err.getvalue())
    if code == 2 and argv and argv[0] in _RUN:
        assert "error" in err.getvalue() or "usage" in err.getvalue(), (argv, err.getvalue())
