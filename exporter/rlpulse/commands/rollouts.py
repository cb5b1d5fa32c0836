"""``rlpulse rollouts list|show``: read a run's sampled rollouts (text escaped, never run)."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from rlpulse.rollouts.escape import clip, html_safe_json, terminal
from rlpulse.rollouts.query import ComponentFilter, Filter, open_run, query
from rlpulse.rollouts.records import jsonable


def register(sub: Any) -> None:
    """Add ``rollouts list`` and ``rollouts show``."""
    p = sub.add_parser("rollouts", help="read sampled rollouts of a run")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, help_, limit in (
        ("list", "one line per rollout", 100),
        ("show", "full rollouts: prompt, response, components, tool calls", 20),
    ):
        v = verbs.add_parser(verb, help=help_)
        if verb == "show":
            v.add_argument("ids", nargs="*", metavar="ROLLOUT_ID", help="rollouts to show")
        v.add_argument("--run", required=True, help="run id (as given to the exporter/demo)")
        v.add_argument("--step", type=int, help="only this step")
        v.add_argument("--step-min", type=int, metavar="S", help="only steps from S on")
        v.add_argument("--step-max", type=int, metavar="S", help="only steps up to S")
        v.add_argument("--since", type=float, metavar="T", help="recorded at or after T (Unix s)")
        v.add_argument("--until", type=float, metavar="T", help="recorded at or before T (Unix s)")
        pick = v.add_mutually_exclusive_group()
        pick.add_argument("--worst", type=int, metavar="N", help="the N lowest total rewards")
        pick.add_argument("--best", type=int, metavar="N", help="the N highest total rewards")
        pick.add_argument("--truncated", action="store_true", help="only truncated rollouts")
        pick.add_argument("--errors", action="store_true", help="only grader errors")
        pick.add_argument("--nonfinite", action="store_true", help="only NaN/Inf values")
        v.add_argument(
            "--component",
            action="append",
            default=[],
            metavar="NAME>VALUE",
            help="reward-component filter (quote it; also <, >=, <=, =, !=); repeatable",
        )
        v.add_argument("--limit", type=int, default=limit, help=f"at most this many ({limit})")
        v.add_argument("--format", choices=("table", "json"), default="table")
        v.add_argument("--data-dir", help="data directory (default $RLPULSE_DATA_DIR)")
        v.set_defaults(func=run)


def _filter(args: argparse.Namespace) -> Filter:
    for name in ("worst", "best", "limit"):
        n = getattr(args, name)
        if n is not None and n < 0:
            raise ValueError(f"--{name} {n} must be ≥ 0")
    return Filter(
        step=args.step,
        step_min=args.step_min,
        step_max=args.step_max,
        since=args.since,
        until=args.until,
        worst=args.worst,
        best=args.best,
        truncated=args.truncated,
        errors=args.errors,
        nonfinite=args.nonfinite,
        components=tuple(ComponentFilter.parse(c) for c in args.component),
        ids=tuple(getattr(args, "ids", ()) or ()),
        limit=args.limit,
    )


def run(args: argparse.Namespace) -> int:
    """Print the matching rollouts."""
    flt = _filter(args)
    conn = open_run(args.run, args.data_dir)
    try:
        records = query(conn, flt)
    finally:
        conn.close()
    if args.format == "json":
        print(html_safe_json(jsonable(records), indent=2))
    elif args.verb == "list":
        print(table(records))
    else:
        print("\n\n".join(detail(r) for r in records) or "no rollouts match")
    return 0


def num(value: float | None) -> str:
    """A number for a table cell."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"


def _components(comps: dict[str, float], width: int) -> str:
    return clip(" ".join(f"{k}={num(v)}" for k, v in comps.items()), width)


def table(records: list[dict[str, Any]]) -> str:
    """One escaped line per rollout."""
    head = ("ROLLOUT", "STEP", "REWARD", "COMPONENTS", "LEN", "TRUNC", "VERDICT", "RESPONSE")
    rows = [
        (
            clip(r["rollout_id"], 24),
            str(r["step"]),
            num(r["reward"]),
            _components(r["components"], 36),
            num(r["length"]),
            {True: "yes", False: "no", None: "-"}[r["truncated"]],
            clip("ERROR: " + r["error"] if r["error"] else r["verdict"] or "-", 32),
            clip(r["response"] or "", 60),
        )
        for r in records
    ]
    widths = [max(len(c) for c in col) for col in zip(head, *rows, strict=True)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in [head, *rows]
    ]
    return "\n".join(line.rstrip() for line in lines) + f"\n({len(rows)} rollouts)"


def detail(r: dict[str, Any]) -> str:
    """One rollout in full, every text escaped."""

    def line(label: str, value: Any) -> str:
        return f"{label}: {terminal(str(value))}"

    out = [
        line("rollout", r["rollout_id"]),
        f"step: {r['step']}   rank: {r['rank']}   group: {terminal(str(r['group_id'] or '-'))}",
        f"reward: {num(r['reward'])}   advantage: {num(r['advantage'])}   "
        f"length: {num(r['length'])}   truncated: {r['truncated']}",
        "components: " + (_components(r["components"], 10_000) or "-"),
        line("verdict", r["verdict"] or "-"),
        line("kept for", ", ".join(r["kept_for"]) or "-"),
    ]
    if r["error"]:
        out.append(line("grader error", r["error"]))
    if r["nonfinite"]:
        out.append(line("non-finite", ", ".join(r["nonfinite"])))
    for key in ("prompt", "response"):
        if r[key] is not None:
            out += [f"--- {key} ---", terminal(r[key], multiline=True)]
    for key in ("tool_calls", "metadata"):
        if r[key] is not None:
            text = json.dumps(jsonable(r[key]), indent=2, ensure_ascii=True)
            out += [f"--- {key.replace('_', ' ')} ---", text]
    return "\n".join(out)
