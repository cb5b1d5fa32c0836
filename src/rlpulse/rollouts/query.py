"""Reading a run's rollouts: the filters shared by ``rlpulse rollouts`` and the HTTP endpoint."""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlpulse.rollouts.paths import list_runs, run_file
from rlpulse.rollouts.store import FIELDS

_COMPONENT = re.compile(r"^\s*([A-Za-z0-9_.:/-]+)\s*(>=|<=|==|!=|>|<|=)\s*(\S+)\s*$")
_SQL_OPS = {">": ">", "<": "<", ">=": ">=", "<=": "<=", "=": "=", "==": "=", "!=": "!="}
MAX_LIMIT = 10_000
# how each order sorts, and the rows it needs a value in; ties go to the newest step (where a
# failure that an alert just found shows), then by insertion
ORDERS = {
    "step": ("step, id", None),
    "recent": ("step DESC, id", None),
    "best": ("reward DESC, step DESC, id", "reward"),
    "worst": ("reward ASC, step DESC, id", "reward"),
    "longest": ("length DESC, step DESC, id", "length"),
    "shortest": ("length ASC, step DESC, id", "length"),
    "random": ("(id * 2654435761 + ?) % 4294967311, id", None),  # a shuffle fixed by its seed
}


MAX_COMPONENT_FILTERS = 64  # each is two SQL terms; SQLite's expression depth is 1,000


@dataclass(frozen=True)
class ComponentFilter:
    """``name op value`` on one reward component, e.g. ``format>0.5``."""

    name: str
    op: str
    value: float

    @classmethod
    def parse(cls, text: str) -> ComponentFilter:
        """Parse ``NAME>VALUE`` (also ``<``, ``>=``, ``<=``, ``=``, ``!=``)."""
        m = _COMPONENT.match(text)
        if m is None:
            raise ValueError(f"component filter {text!r} is not NAME>VALUE (e.g. 'format>0.5')")
        name, op, raw = m.groups()
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"component filter {text!r}: {raw!r} is not a number") from None
        return cls(name, _SQL_OPS[op], value)


@dataclass(frozen=True)
class Filter:
    """Which rollouts to read; ``worst``/``best`` order by total reward.

    ``step`` picks one step; ``step_min``/``step_max`` an inclusive step range, and
    ``since``/``until`` a range of recording times (Unix seconds), the window a dashboard shows.
    ``order`` is one of ``ORDERS`` (``worst``/``best`` = N pick that order and at most N rows);
    ``group`` one GRPO group; ``text`` a case-insensitive substring of the prompt or response;
    ``seed`` fixes the ``random`` order so its pages follow each other.
    """

    step: int | None = None
    step_min: int | None = None
    step_max: int | None = None
    since: float | None = None
    until: float | None = None
    worst: int | None = None
    best: int | None = None
    truncated: bool = False
    errors: bool = False
    nonfinite: bool = False
    components: tuple[ComponentFilter, ...] = ()
    ids: tuple[str, ...] = ()
    group: str | None = None
    text: str | None = None
    order: str = "step"
    seed: int = 0
    offset: int = 0
    limit: int = 100

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"order {self.order!r} is not one of {', '.join(ORDERS)}")
        if not 0 <= self.offset < 2**63:
            raise ValueError(f"offset {self.offset} must be ≥ 0")
        for name in ("step", "step_min", "step_max", "worst", "best", "seed", "limit"):
            n = getattr(self, name)
            if n is not None and not -(2**63) <= n < 2**63:  # SQLite's integers
                raise ValueError(f"{name} {n} is out of range (a 64-bit integer)")
        if len(self.components) > MAX_COMPONENT_FILTERS:
            raise ValueError(
                f"{len(self.components)} component filters; at most {MAX_COMPONENT_FILTERS}"
            )
        if self.step is not None and (self.step_min is not None or self.step_max is not None):
            raise ValueError("choose one of step and a step range (step_min, step_max)")
        for low, high, what in (
            (self.step_min, self.step_max, "step_min"),
            (self.since, self.until, "since"),
        ):
            if low is not None and high is not None and low > high:
                raise ValueError(f"{what} {low} is past the end of its range ({high})")

    def sql(self) -> tuple[str, list[Any]]:
        """The SELECT statement and its parameters."""
        if self.worst is not None and self.best is not None:
            raise ValueError("choose one of worst and best")
        where: list[str] = []
        params: list[Any] = []
        for column, op, bound in (
            ("step", "=", self.step),
            ("step", ">=", self.step_min),
            ("step", "<=", self.step_max),
            ("recorded_at", ">=", self.since),
            ("recorded_at", "<=", self.until),
        ):
            if bound is not None:
                where.append(f"{column} {op} ?")
                params.append(bound)
        if self.truncated:
            where.append("truncated = 1")
        if self.errors:
            where.append("error IS NOT NULL")
        if self.nonfinite:
            where.append("nonfinite != ''")
        if self.ids:
            where.append(f"rollout_id IN ({', '.join('?' * len(self.ids))})")
            params += list(self.ids)
        if self.group is not None:
            where.append("group_id = ?")
            params.append(self.group)
        if self.text:
            pattern = "%" + re.sub(r"([\\%_])", r"\\\1", self.text) + "%"
            where.append("(prompt LIKE ? ESCAPE '\\' OR response LIKE ? ESCAPE '\\')")
            params += [pattern, pattern]
        for c in self.components:
            path = f'$."{c.name}"'
            where.append(
                f"typeof(json_extract(components, ?)) IN ('real', 'integer') "
                f"AND json_extract(components, ?) {c.op} ?"
            )
            params += [path, path, c.value]
        limit, name = self.limit, self.order
        for picked, n in (("worst", self.worst), ("best", self.best)):
            if n is not None:
                name, limit = picked, min(limit, n)
        order, needs = ORDERS[name]
        if needs is not None:
            where.append(f"{needs} IS NOT NULL")
        if not 0 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit {limit} must be between 0 and {MAX_LIMIT}")
        cond = " WHERE " + " AND ".join(where) if where else ""
        page = f"LIMIT {int(limit)} OFFSET {int(self.offset)}"
        if name == "random":
            seed = self.seed % 4294967311
            params, after = [*params, seed], [seed]
        else:
            after = []
        # the page's ids first (sorted on an index, without reading the rows' text), then
        # those rows: a sort over many rows never carries their prompts and responses
        picked = f"SELECT id FROM rollouts{cond} ORDER BY {order} {page}"
        sql = f"SELECT {', '.join(FIELDS)} FROM rollouts WHERE id IN ({picked}) ORDER BY {order}"
        return sql, [*params, *after]


def open_run(run_id: str, data_dir: str | os.PathLike[str] | None = None) -> sqlite3.Connection:
    """A read-only connection to a run's store; ``FileNotFoundError`` names the known runs."""
    path = run_file(run_id, data_dir)
    if not path.is_file():
        runs = list_runs(data_dir)
        known = ", ".join(repr(r) for r in runs[:20]) or "none"
        raise FileNotFoundError(
            f"no rollouts for run {run_id!r} in {path.parent} (runs there: {known})"
        )
    return _connect(path)


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=5.0)
    conn.execute("PRAGMA query_only = 1")
    return conn


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _decode(row: tuple[Any, ...]) -> dict[str, Any]:
    rec = dict(zip(FIELDS, row, strict=True))
    nonfinite = set(filter(None, rec["nonfinite"].split(",")))
    for key in ("reward", "advantage"):
        rec[key] = _number(rec[key])
        if rec[key] is None and key in nonfinite:
            rec[key] = math.nan
    rec["components"] = {
        k: float(v) for k, v in json.loads(rec["components"]).items()
    }  # "nan"/"inf" strings parse back with float()
    rec["length"] = _number(rec["length"])
    rec["truncated"] = None if rec["truncated"] is None else bool(rec["truncated"])
    for key in ("tool_calls", "metadata"):
        if rec[key] is not None:
            rec[key] = json.loads(rec[key])
    rec["nonfinite"] = sorted(nonfinite)
    rec["kept_for"] = [k for k in rec["kept_for"].split(",") if k]
    return rec


def query(conn: sqlite3.Connection, flt: Filter) -> list[dict[str, Any]]:
    """The rollouts matching ``flt``, decoded (non-finite numbers as float NaN/±Inf)."""
    sql, params = flt.sql()
    return [_decode(r) for r in conn.execute(sql, params)]


def find(
    rollout_id: str, data_dir: str | os.PathLike[str] | None = None, run_id: str | None = None
) -> tuple[str, dict[str, Any]] | None:
    """The newest rollout called ``rollout_id`` (in ``run_id``, else in any run) with its run."""
    runs = [run_id] if run_id is not None else list_runs(data_dir)
    for run in runs:
        conn = open_run(run, data_dir)
        try:
            sql = f"SELECT {', '.join(FIELDS)} FROM rollouts WHERE rollout_id = ? "
            row = conn.execute(sql + "ORDER BY id DESC LIMIT 1", (rollout_id,)).fetchone()
        finally:
            conn.close()
        if row is not None:
            return run, _decode(row)
    return None


@dataclass(frozen=True)
class RunSummary:
    """What the run list shows of one store."""

    rows: int
    first_step: int | None
    last_step: int | None
    last_recorded: float | None
    components: tuple[str, ...]


def summary(conn: sqlite3.Connection) -> RunSummary:
    """Row count, step span, newest write and reward component names of a store (index reads
    only, so a large store answers at once)."""
    (rows,) = conn.execute("SELECT rows FROM totals").fetchone()
    first = conn.execute("SELECT min(step) FROM rollouts").fetchone()[0]
    last = conn.execute("SELECT max(step) FROM rollouts").fetchone()[0]
    newest = conn.execute(
        "SELECT recorded_at, components FROM rollouts ORDER BY id DESC LIMIT 1"
    ).fetchone()
    comps = tuple(json.loads(newest[1])) if newest else ()
    return RunSummary(int(rows), first, last, newest[0] if newest else None, comps)


def step_stats(
    conn: sqlite3.Connection, step_min: int | None, step_max: int | None, limit: int = 40
) -> list[tuple[int, int, float | None, float | None, float | None]]:
    """(step, rollouts, mean, min, max reward) of the newest ``limit`` steps in the range."""
    low = -(2**63) if step_min is None else step_min
    high = 2**63 - 1 if step_max is None else step_max
    sql = (
        "SELECT step, count(*), avg(reward), min(reward), max(reward) FROM rollouts "
        "WHERE step BETWEEN ? AND ? GROUP BY step ORDER BY step DESC LIMIT ?"
    )
    return [tuple(r) for r in conn.execute(sql, (low, high, limit))]
