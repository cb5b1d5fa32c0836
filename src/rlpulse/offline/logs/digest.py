"""A per-environment epoch digest of a multi-environment RL run (``env-digest``), as written by
the tinker-cookbook reward-hacking study (astOwOlfo/tinker-cookbook-reward-hacking)::

    Loaded 196893 rollout files
    ================
    ENV TYPE: AEEnv (24669/196893 rollouts, 12.5%)
    ================
    [
      {"epoch": 0, "average_reward": 0.02, "n_hacking_successful": 0, ...},
      ...
    ]

Each ``ENV TYPE:`` section is one environment of the same training run, summarised per epoch
from sampled rollouts. The environments are trained together but their rewards differ in
scale and meaning, so each section is read as its own segment (named by the environment) and
replayed as its own run. Step = ``epoch``. Besides the logged numbers, two shares of the
epoch's sampled rollouts are derived from the ``n_<label>_<outcome>`` counts:
``hacking_ratio`` (rollouts labelled hacking) and ``honest_success_ratio`` (successful and not
hacking) — the latter is the run's true objective when mapped as one (see docs/replay.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from rlpulse.offline.logs.base import LogFormatError, Record, as_step, lines, number
from rlpulse.offline.logs.trl import MAX_VALUE

HEADER = re.compile(r"^ENV TYPE:\s*(\S+)")
_COUNT = re.compile(r"^n_(hacking|no_hacking|unclear)_(successful|unsuccessful)$")


def looks_like_digest(text: str) -> bool:
    """Whether ``text`` (a log's head) has an ``ENV TYPE:`` section header."""
    return any(HEADER.match(line) for line in text.splitlines())


def _shares(values: dict[str, float]) -> dict[str, float]:
    counts = {m.groups(): v for k, v in values.items() if (m := _COUNT.match(k))}
    total = sum(counts.values())
    if not total:
        return {}
    hacking = counts.get(("hacking", "successful"), 0.0) + counts.get(
        ("hacking", "unsuccessful"), 0.0
    )
    honest = counts.get(("no_hacking", "successful"), 0.0)
    return {"hacking_ratio": hacking / total, "honest_success_ratio": honest / total}


def _records(path: Path, env: str, start: int, text: str) -> Iterator[Record]:
    try:
        rows = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise LogFormatError(path, f"line {start}", f"{env}: not a JSON array ({exc})") from None
    if not isinstance(rows, list):
        raise LogFormatError(path, f"line {start}", f"{env}: expected a JSON array")
    for n, row in enumerate(rows):
        step = as_step(row.get("epoch")) if isinstance(row, dict) else None
        if step is None:
            raise LogFormatError(path, f"line {start}", f"{env}: entry {n} has no integer epoch")
        values = {k: v for k, v in ((k, number(x)) for k, x in row.items()) if v is not None}
        values.pop("epoch")
        values.update(_shares(values))
        yield Record(step, None, values, f"line {start} entry {n}", segment=env)


def read_digest(path: Path) -> Iterator[Record]:
    """One record per (environment, epoch), environments in file order."""
    env, start, chunk, size = "", 0, list[str](), 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in lines(path, fh):
            if m := HEADER.match(line):
                env = m.group(1)
                continue
            if not chunk and not line.startswith("["):
                continue  # banners, "Loaded N rollout files", blank lines
            if not env:
                raise LogFormatError(path, f"line {lineno}", "JSON array before any ENV TYPE:")
            if not chunk:
                start = lineno
            chunk.append(line)
            size += len(line)
            if size > MAX_VALUE:
                raise LogFormatError(path, f"line {start}", f"{env}: array too long")
            if line.startswith("]"):
                yield from _records(path, env, start, "".join(chunk))
                chunk, size = [], 0
    if chunk:
        raise LogFormatError(path, f"line {start}", f"{env}: file ends inside the array")
