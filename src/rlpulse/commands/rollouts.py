"""``rlpulse rollouts list|show|serve``: read a run's sampled rollouts (text escaped, never
run), or serve the viewer and the JSON API over every run's store."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
from typing import Any
from urllib.parse import urlencode

from rlpulse.rollouts.escape import clip, html_safe_json, terminal
from rlpulse.rollouts.query import ComponentFilter, Filter, open_run, query
from rlpulse.rollouts.records import jsonable
from rlpulse.rollouts.server import VIEWER_PORT, VIEWER_URL, serve

URL_ENV = "RLPULSE_ROLLOUTS_URL"


def register(sub: Any) -> None:
    """Add ``rollouts list``, ``rollouts show`` and ``rollouts serve``."""
    p = sub.add_parser("rollouts", help="read sampled rollouts of a run, or serve the viewer")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    s = verbs.add_parser(
        "serve",
        help="serve the rollout viewer and JSON API over every run in the data directory",
    )
    s.add_argument("--data-dir", help="data directory (default $RLPULSE_DATA_DIR)")
    s.add_argument(
        "--addr", default="127.0.0.1", help="address to bind (default 127.0.0.1: this host only)"
    )
    s.add_argument("--port", type=int, default=VIEWER_PORT, help=f"port ({VIEWER_PORT})")
    s.add_argument("--web-config", help="TLS and basic-auth file, the exporter's format")
    s.set_defaults(func=run_serve)
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
        v.add_argument(
            "--viewer-url",
            default=os.environ.get(URL_ENV) or VIEWER_URL,
            help=f"the viewer the printed link opens (default ${URL_ENV} or {VIEWER_URL})",
        )
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
    link = f"open in the viewer: {viewer_link(args)}"
    if args.format == "json":
        print(html_safe_json(jsonable(records), indent=2))
        print(link, file=sys.stderr)
    elif args.verb == "list":
        print(table(records))
        print(link)
    else:
        print("\n\n".join(detail(r) for r in records) or "no rollouts match")
        print(link)
    return 0


def viewer_link(args: argparse.Namespace) -> str:
    """The viewer page that shows what ``args`` asked the command line for."""
    params: dict[str, Any] = {"run": args.run}
    for key in ("step", "step_min", "step_max", "since", "until"):
        if getattr(args, key) is not None:
            params[key] = getattr(args, key)
    for key in ("worst", "best"):
        if getattr(args, key) is not None:
            params["order"], params["limit"] = key, getattr(args, key)
    for key in ("truncated", "errors", "nonfinite"):
        if getattr(args, key):
            params[key] = 1
    pairs = [*params.items(), *(("component", c) for c in args.component)]
    if getattr(args, "ids", None) and len(args.ids) == 1:
        pairs = [("run", args.run), ("id", args.ids[0])]
    return f"{args.viewer_url.rstrip('/')}/view?{urlencode(pairs)}"


def run_serve(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM."""
    try:
        server = serve(args.data_dir, args.addr, args.port, web_config=args.web_config)
    except OSError as exc:  # the port is taken, the address is not this host's …
        print(f"rlpulse rollouts serve: error: {exc}", file=sys.stderr)
        return 1
    scheme = "https" if server.tls is not None else "http"
    host = f"[{args.addr}]" if ":" in args.addr else args.addr
    print(f"rlpulse rollouts: viewer at {scheme}://{host}:{server.port}/", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.close()
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
