"""The rollout viewer: server-rendered HTML pages over every run's store (read-only).

Pages (GET)::

    /                      the runs in the data directory
    /view?run=ID&...       a run's rollouts, with the JSON API's filters (``server.parse_filter``)
                           and ``order`` = step | recent | best | worst | longest | shortest |
                           random | errors; ``group=G`` shows one GRPO group under its prompt;
                           ``id=ROLLOUT_ID`` one rollout (the newest with that id, in any run)
    /compare?run=ID&a=S&b=S[&order=..]   two steps side by side
    /viewer.css            the stylesheet;  /-/ready  readiness (``rlpulse stack up``)

No page carries script: every text from a store is HTML-escaped with its control and bidi
characters shown as escapes (``escape.terminal``), and the Content-Security-Policy forbids
script, frames and anything loaded from elsewhere. Long texts fold (``<details>``).
"""

from __future__ import annotations

import datetime
import html
import json
import math
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

from rlpulse.rollouts import query as q
from rlpulse.rollouts.escape import terminal
from rlpulse.rollouts.paths import list_runs
from rlpulse.rollouts.server import (
    Answer,
    BadRequest,
    DataDir,
    Params,
    parse_filter,
    route_table,
)
from rlpulse.runtime.http import Handler, Response

HTML = "text/html; charset=utf-8"
DASH = "\u2013"  # an empty cell, a range
HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
FOLD_CHARS = 600  # texts longer than this start folded
ORDER_LABELS = {
    "recent": "newest steps",
    "step": "oldest steps",
    "best": "highest reward",
    "worst": "lowest reward",
    "longest": "longest",
    "shortest": "shortest",
    "random": "random",
    "errors": "failed grader calls",
}
STEPS_SHOWN = 40
CSS = b"""
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:8px 16px}header a{color:#9cf}
main{padding:12px 16px}a{color:#0b5cad}h1{font-size:18px;margin:4px 0}h2{font-size:15px}
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #d5d9e0;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#eef0f4}
form.filters{background:#fff;border:1px solid #d5d9e0;padding:8px;margin:8px 0}
form.filters label{margin-right:10px;white-space:nowrap}input[type=number]{width:7em}
nav.orders a,nav.orders b{margin-right:10px}
.rollout{background:#fff;border:1px solid #d5d9e0;border-radius:4px;margin:10px 0;padding:8px}
.rollout .meta span{margin-right:14px}.bad{color:#b00020;font-weight:600}
pre{white-space:pre-wrap;word-break:break-word;background:#f3f4f6;padding:6px;margin:4px 0;
max-height:40em;overflow:auto}details>summary{cursor:pointer;color:#555}
.columns{display:flex;gap:16px}.columns>section{flex:1;min-width:0}
.components td{font-variant-numeric:tabular-nums}.empty{color:#666;font-style:italic}
"""


def e(value: Any) -> str:
    """Untrusted text as HTML: control/bidi characters made visible, then escaped."""
    return html.escape(terminal(str(value), multiline=True), quote=True)


def num(value: float | None) -> str:
    """A number for a cell."""
    if value is None:
        return DASH
    if not math.isfinite(value):
        return str(value)
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:.4g}"


def url(path: str, **params: Any) -> str:
    """``path?query`` with the parameters that are set, escaped for an attribute."""
    query = urlencode([(k, v) for k, v in params.items() if v not in (None, "", False)])
    return html.escape(f"{path}?{query}" if query else path, quote=True)


def _when(t: float | None) -> str:
    if t is None:
        return DASH
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def page(title: str, body: str, status: int = 200) -> Response:
    """A whole HTML page."""
    doc = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f'<title>{e(title)} · rlpulse</title><link rel=stylesheet href="viewer.css"></head>'
        f'<body><header><a href="./">rlpulse rollouts</a> · {e(title)}</header>'
        f"<main>{body}</main></body></html>"
    )
    return Response(doc.encode("utf-8"), HTML, status, dict(HEADERS))


def _text_block(label: str, text: str | None) -> str:
    if text is None:
        return ""
    inner = f"<pre class={label}>{e(text)}</pre>"
    if len(text) <= FOLD_CHARS:
        return f"<div><b>{label}</b>{inner}</div>"
    return (
        f"<details class=fold><summary><b>{label}</b> ({len(text)} characters): "
        f"{e(text[:160])}…</summary>{inner}</details>"
    )


def _json_block(label: str, value: Any) -> str:
    if value is None:
        return ""
    return _text_block(label, json.dumps(value, indent=1, ensure_ascii=False, default=str))


def rollout_html(r: dict[str, Any], run: str, *, prompt: bool = True) -> str:
    """One rollout as an ``<article>``: its numbers, reward components, texts."""
    group = r["group_id"]
    step = r["step"]  # group ids may repeat across steps (a prompt index)
    in_group = url("view", run=run, group=group, step_min=step, step_max=step, order="best")
    group_link = f'<a class=group href="{in_group}">{e(group)}</a>' if group is not None else DASH
    meta = [
        ("step", f'<a href="{url("view", run=run, step=r["step"])}">{r["step"]}</a>'),
        ("reward", num(r["reward"])),
        ("advantage", num(r["advantage"])),
        ("length", num(r["length"])),
        (
            "truncated",
            {True: "<span class=bad>yes</span>", False: "no", None: DASH}[r["truncated"]],
        ),
        ("group", group_link),
        ("rank", str(r["rank"])),
    ]
    if r["verdict"] is not None:
        meta.append(("verdict", e(r["verdict"])))
    spans = "".join(f"<span class={k}>{k}: <b>{v}</b></span>" for k, v in meta)
    names = "".join(f"<th>{e(k)}</th>" for k in r["components"])
    values = "".join(f"<td>{num(v)}</td>" for v in r["components"].values())
    parts = [
        f'<article class=rollout id="{html.escape("r-" + r["rollout_id"], quote=True)}">',
        f'<div class=rid>rollout <a href="{url("view", run=run, id=r["rollout_id"])}">'
        f"{e(r['rollout_id'])}</a> · kept for {e(', '.join(r['kept_for']) or DASH)}</div>",
        f"<div class=meta>{spans}</div>",
        f"<table class=components><tr><th>reward components</th>{names}</tr>"
        f"<tr><td></td>{values}</tr></table>"
        if names
        else "",
    ]
    if r["error"]:
        parts.append(f"<div class=bad>grader error: <span class=error>{e(r['error'])}</span></div>")
    if r["nonfinite"]:
        parts.append(f"<div class=bad>non-finite: {e(', '.join(r['nonfinite']))}</div>")
    if prompt:
        parts.append(_text_block("prompt", r["prompt"]))
    parts.append(_text_block("response", r["response"]))
    parts.append(_json_block("tool_calls", r["tool_calls"]))
    parts.append(_json_block("metadata", r["metadata"]))
    return "".join(parts) + "</article>"


def _order(params: Params) -> tuple[Params, bool]:
    """The parameters with ``order=errors`` turned into the error filter (newest first)."""
    if params.get("order", [""])[-1] != "errors":
        return params, False
    out = {k: v for k, v in params.items() if k != "order"}
    return {**out, "errors": ["1"], "order": ["recent"]}, True


def _keep(params: Params, *drop: str) -> dict[str, str]:
    return {k: v[-1] for k, v in params.items() if k not in drop}


def _filters_form(run: str, params: Params, components: Iterable[str]) -> str:
    def field(name: str, label: str, kind: str = "text") -> str:
        value = params.get(name, [""])[-1]
        return (
            f'<label>{label} <input type={kind} name={name} value="{html.escape(value)}"></label>'
        )

    current = params.get("order", ["recent"])[-1]
    options = "".join(
        f"<option value={k}{' selected' if k == current else ''}>{v}</option>"
        for k, v in ORDER_LABELS.items()
    )
    hint = ", ".join(components)
    return (
        '<form class=filters method=get action="view">'
        f'<input type=hidden name=run value="{html.escape(run)}">'
        + field("step_min", "steps from", "number")
        + field("step_max", "to", "number")
        + f"<label>order <select name=order>{options}</select></label>"
        + field("group", "group")
        + field("component", f"component (e.g. {e(hint.split(', ')[0] or 'format')}>0.5)")
        + field("q", "text")
        + field("limit", "per page", "number")
        + "<button type=submit>show</button>"
        + (f"<div class=empty>reward components: {e(hint)}</div>" if hint else "")
        + "</form>"
    )


def _orders_nav(run: str, params: Params) -> str:
    current = params.get("order", ["recent"])[-1]
    keep = _keep(params, "order", "offset", "seed", "id")
    links = [
        f"<b>{v}</b>" if k == current else f'<a href="{url("view", **keep, order=k)}">{v}</a>'
        for k, v in ORDER_LABELS.items()
    ]
    return "<nav class=orders>order: " + "".join(links) + "</nav>"


def _steps_table(run: str, stats: list[Any], params: Params) -> str:
    if not stats:
        return ""
    keep = _keep(params, "step", "step_min", "step_max", "offset", "id")
    rows = []
    for i, (step, n, mean, low, high) in enumerate(stats):
        before = stats[i + 1][0] if i + 1 < len(stats) else None
        compare = (
            f'<a href="{url("compare", run=run, a=before, b=step, order=keep.get("order"))}">'
            f"vs step {before}</a>"
            if before is not None
            else ""
        )
        rows.append(
            f'<tr><td><a href="{url("view", **keep, step_min=step, step_max=step)}">{step}</a>'
            f"</td><td>{n}</td><td>{num(mean)}</td><td>{num(low)}</td><td>{num(high)}</td>"
            f"<td>{compare}</td></tr>"
        )
    return (
        f"<details class=steps><summary>steps ({len(stats)} newest in range)</summary><table>"
        "<tr><th>step</th><th>rollouts kept</th><th>mean reward</th><th>min</th><th>max</th>"
        f"<th>side by side</th></tr>{''.join(rows)}</table></details>"
    )


def _view(data_dir: DataDir, params: Params) -> Response:
    if params.get("id"):
        return _one(data_dir, params)
    run = params.get("run", [""])[-1]
    if not run:
        raise BadRequest("missing query parameter 'run'")
    shown = {**params, "order": params.get("order", ["recent"])}
    flt_params, errors_order = _order(shown)
    flt = parse_filter(flt_params, frozenset({"id"}))
    conn = q.open_run(run, data_dir)
    try:
        rows = q.query(conn, flt)
        info = q.summary(conn)
        stats = q.step_stats(conn, flt.step_min, flt.step_max, STEPS_SHOWN)
    finally:
        conn.close()
    steps = (
        f"steps {flt.step_min if flt.step_min is not None else info.first_step}\u2013"
        f"{flt.step_max if flt.step_max is not None else info.last_step}"
    )
    order = ORDER_LABELS["errors" if errors_order else flt.order]
    title = f"{run} · {steps} · {order}"
    body = [
        f"<h1 class=title>{e(run)}</h1>",
        f"<p class=summary>{info.rows} rollouts kept, steps {num(info.first_step)}\u2013"
        f"{num(info.last_step)}, last written {_when(info.last_recorded)}. Showing "
        f"<b class=shown>{e(steps)}</b>, <b class=order>{e(order)}</b>"
        f"{', group ' + e(flt.group) if flt.group is not None else ''}.</p>",
        _filters_form(run, shown, info.components),
        _orders_nav(run, shown),
        _steps_table(run, stats, shown),
    ]
    if flt.group is not None and rows:
        body.append(f"<h2>Group {e(flt.group)}: {len(rows)} completions of one prompt</h2>")
        body.append(_text_block("prompt", rows[0]["prompt"]))
        same = all(r["prompt"] == rows[0]["prompt"] for r in rows)
        body += [rollout_html(r, run, prompt=not same) for r in rows]
    else:
        body += [rollout_html(r, run) for r in rows]
    if not rows:
        body.append("<p class=empty>no rollouts match</p>")
    body.append(_pages(params, flt, len(rows)))
    return page(title, "".join(body))


def _pages(params: Params, flt: q.Filter, n: int) -> str:
    keep = _keep(params, "offset")
    links = []
    if flt.offset > 0:
        links.append(
            f'<a href="{url("view", **keep, offset=max(flt.offset - flt.limit, 0))}">← previous</a>'
        )
    if n == flt.limit and n > 0:
        links.append(
            f'<a class=next href="{url("view", **keep, offset=flt.offset + n)}">next →</a>'
        )
    return "<nav class=pages>" + " ".join(links) + "</nav>"


def _one(data_dir: DataDir, params: Params) -> Response:
    unknown = sorted(set(params) - {"id", "run"})
    if unknown:
        raise BadRequest(f"unknown query parameter {unknown[0]!r} next to 'id'")
    rollout_id = params["id"][-1]
    hit = q.find(rollout_id, data_dir, params.get("run", [""])[-1] or None)
    if hit is None:
        return page("not found", f"<p class=empty>no rollout {e(rollout_id)}</p>", 404)
    run, r = hit
    step = r["step"]
    same_step = url("view", run=run, step_min=step, step_max=step, order="best")
    body = (
        f'<h1 class=title>{e(run)}</h1><p><a href="{same_step}">all rollouts of step {step}</a>'
        "</p>" + rollout_html(r, run)
    )
    return page(f"{run} · rollout {rollout_id}", body)


def _compare(data_dir: DataDir, params: Params) -> Response:
    run = params.get("run", [""])[-1]
    if not run:
        raise BadRequest("missing query parameter 'run'")
    steps = []
    for key in ("a", "b"):
        raw = params.get(key, [""])[-1]
        try:
            steps.append(int(raw))
        except ValueError:
            raise BadRequest(f"query parameter {key!r}={raw!r} is not a step") from None
    rest = {k: v for k, v in params.items() if k not in ("run", "a", "b")}
    rest.setdefault("order", ["best"])
    rest, _ = _order(rest)
    conn = q.open_run(run, data_dir)
    columns = []
    try:
        for step in steps:
            flt = parse_filter({**rest, "step": [str(step)]})
            rows = q.query(conn, flt)
            [(_, n, mean, low, high)] = q.step_stats(conn, step, step, 1) or [
                (step, 0, None, None, None)
            ]
            columns.append(
                f"<section class=step-column><h2>step {step}</h2><p>{n} rollouts kept · mean "
                f"reward {num(mean)} (min {num(low)}, max {num(high)})</p>"
                + "".join(rollout_html(r, run) for r in rows)
                + ("" if rows else "<p class=empty>no rollouts match</p>")
                + "</section>"
            )
    finally:
        conn.close()
    order = rest.get("order", ["best"])[-1]
    body = (
        f"<h1 class=title>{e(run)}</h1><p>step {steps[0]} and step {steps[1]} side by side, "
        f"{e(ORDER_LABELS.get(order, order))} first · "
        f'<a href="{url("view", run=run, step_min=min(steps), step_max=max(steps))}">'
        "as one list</a></p>"
        f"<div class=columns>{''.join(columns)}</div>"
    )
    return page(f"{run} · step {steps[0]} vs {steps[1]}", body)


def _index(data_dir: DataDir, params: Params) -> Response:
    if params:
        raise BadRequest(f"unknown query parameter {sorted(params)[0]!r}")
    rows = []
    for run in list_runs(data_dir):
        try:
            conn = q.open_run(run, data_dir)
        except FileNotFoundError:
            continue
        try:
            info = q.summary(conn)
        except Exception as exc:  # a damaged or foreign file: listed, not fatal
            rows.append(f"<tr><td>{e(run)}</td><td colspan=4 class=bad>{e(exc)}</td></tr>")
            continue
        finally:
            conn.close()
        rows.append(
            f'<tr class=run><td><a href="{url("view", run=run)}">{e(run)}</a></td>'
            f"<td>{info.rows}</td><td>{num(info.first_step)}\u2013{num(info.last_step)}</td>"
            f"<td>{_when(info.last_recorded)}</td><td>{e(', '.join(info.components))}</td></tr>"
        )
    table = (
        "<table><tr><th>run</th><th>rollouts kept</th><th>steps</th><th>last written</th>"
        f"<th>reward components</th></tr>{''.join(rows)}</table>"
        if rows
        else "<p class=empty>no run has recorded rollouts in this data directory yet</p>"
    )
    return page("runs", f"<h1>Runs</h1>{table}")


def _css(data_dir: DataDir, params: Params) -> Response:
    return Response(CSS, "text/css; charset=utf-8", 200, dict(HEADERS))


def _ready(data_dir: DataDir, params: Params) -> Response:
    return Response(b"ok\n", "text/plain; charset=utf-8", 200, dict(HEADERS))


_PAGES: dict[str, Answer] = {
    "/": _index,
    "/view": _view,
    "/compare": _compare,
    "/viewer.css": _css,
    "/-/ready": _ready,
}


_ERRORS = {400: "bad request", 404: "not found"}


def _error_page(exc: Exception, status: int) -> Response:
    return page(_ERRORS[status], f"<p class=bad>{e(exc)}</p>", status)


def routes(data_dir: DataDir = None) -> dict[str, Handler]:
    """The viewer's pages as a route table for ``rlpulse.runtime.http.Server``."""
    return route_table(data_dir, _PAGES, _error_page)
