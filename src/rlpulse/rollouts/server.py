"""The optional HTTP JSON endpoint over the rollout stores (read-only, off by default).

Routes (GET)::

    /runs                                   run ids with a store
    /rollouts?run=ID[&step=S|&step_min=S&step_max=S][&since=T&until=T]
              [&worst=N|&best=N|&truncated=1|&errors=1|&nonfinite=1]
              [&component=NAME>VALUE ...][&limit=N]
    /rollout?id=ROLLOUT_ID[&run=ID]         one rollout (the newest with that id)

``routes(data_dir)`` is the route table to mount on the exporter's ``rlpulse.runtime.http.Server``;
``serve`` runs it with the viewer's HTML pages (``rlpulse rollouts serve``) on a server of its
own, bound to 127.0.0.1 unless told otherwise, with TLS and basic auth from a web config file
(the exporter's format, ``rlpulse.runtime.webconfig``) or TLS from a certificate. Bodies are ASCII
JSON with ``<``, ``>`` and ``&`` escaped, served as
``application/json`` with ``nosniff`` and a deny-all CSP, so rollout text cannot run as HTML or
script in a browser.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from typing import Any

from rlpulse.rollouts.escape import html_safe_json
from rlpulse.rollouts.paths import list_runs
from rlpulse.rollouts.query import ComponentFilter, Filter, find, open_run, query
from rlpulse.rollouts.records import jsonable
from rlpulse.runtime import webconfig
from rlpulse.runtime.http import Handler, Request, Response, Server, tls_context

JSON = "application/json; charset=utf-8"
HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
    "Cache-Control": "no-store",
}
_FLAGS = ("truncated", "errors", "nonfinite")
_STEPS = ("step", "step_min", "step_max")  # may be negative
_TIMES = ("since", "until")
_TEXTS = ("group", "q")
_KNOWN = {"run", *_STEPS, *_TIMES, "worst", "best", "component", "limit", *_FLAGS}
_KNOWN |= {*_TEXTS, "order", "offset", "seed"}
MAX_TEXT = 1000  # characters of a group id or search text
DEFAULT_LIMIT = 100
VIEWER_PORT = 9096  # where `rlpulse rollouts serve` and `rlpulse stack up` serve the viewer
VIEWER_URL = f"http://127.0.0.1:{VIEWER_PORT}"
# times past this are in milliseconds (year 2286 in seconds; Grafana's ${__from} is in ms)
MILLISECONDS = 1e10
MAX_LIMIT = 1000
Params = dict[str, list[str]]
DataDir = str | os.PathLike[str] | None
Answer = Callable[[DataDir, Params], Response]


class BadRequest(ValueError):
    """A query the API refuses; the message names the parameter."""


def _json(obj: Any, status: int = 200) -> Response:
    body = html_safe_json(jsonable(obj)).encode("ascii")
    return Response(body, JSON, status, dict(HEADERS))


_INTEGER = re.compile(r"-?[0-9]{1,20}", re.ASCII)


def _int(params: Params, key: str) -> int | None:
    values = params.get(key)
    if not values:
        return None
    if not _INTEGER.fullmatch(values[-1]):  # int() also reads 1_0, " 7" and non-ASCII digits
        raise BadRequest(f"query parameter {key!r}={values[-1][:40]!r} is not an integer")
    n = int(values[-1])
    if n < 0 and key not in _STEPS:
        raise BadRequest(f"query parameter {key!r}={n} must be ≥ 0")
    if not -(2**63) <= n < 2**63:  # SQLite's integers
        raise BadRequest(f"query parameter {key!r} is out of range")
    return n


def _time(params: Params, key: str) -> float | None:
    """A time in Unix seconds; Grafana's ``${__from}`` (milliseconds) is read as such too."""
    values = params.get(key)
    if not values:
        return None
    try:
        t = float(values[-1])
    except ValueError:
        raise BadRequest(f"query parameter {key!r}={values[-1]!r} is not a time") from None
    if not math.isfinite(t) or t < 0:
        raise BadRequest(f"query parameter {key!r}={values[-1]!r} is not a time")
    return t / 1000 if t >= MILLISECONDS else t


def _flag(params: Params, key: str) -> bool:
    raw = params.get(key, ["0"])[-1].lower()
    if raw not in ("", "0", "1", "true", "false", "yes", "no"):
        raise BadRequest(f"query parameter {key!r}={raw!r} is not a boolean")
    return raw in ("", "1", "true", "yes")


def _text(params: Params, key: str) -> str | None:
    values = params.get(key)
    if not values:
        return None
    if len(values[-1]) > MAX_TEXT:
        raise BadRequest(f"query parameter {key!r} is longer than {MAX_TEXT} characters")
    return values[-1]


def parse_filter(params: Params, extra: frozenset[str] = frozenset()) -> Filter:
    """The ``Filter`` a query string asks for (``extra``: more parameters the caller reads);
    ``BadRequest`` names the first bad parameter."""
    unknown = sorted(set(params) - _KNOWN - extra)
    if unknown:
        raise BadRequest(f"unknown query parameter {unknown[0]!r}")
    picked = [k for k in ("worst", "best") if params.get(k)]
    picked += [k for k in _FLAGS if _flag(params, k)]
    if len(picked) > 1:
        raise BadRequest(f"query parameters {picked[0]!r} and {picked[1]!r} exclude each other")
    try:
        components = tuple(ComponentFilter.parse(c) for c in params.get("component", []))
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    limit = _int(params, "limit")
    try:
        return Filter(
            step=_int(params, "step"),
            step_min=_int(params, "step_min"),
            step_max=_int(params, "step_max"),
            since=_time(params, "since"),
            until=_time(params, "until"),
            worst=_int(params, "worst"),
            best=_int(params, "best"),
            truncated=_flag(params, "truncated"),
            errors=_flag(params, "errors"),
            nonfinite=_flag(params, "nonfinite"),
            components=components,
            group=_text(params, "group"),
            text=_text(params, "q"),
            order=_text(params, "order") or "step",
            seed=_int(params, "seed") or 0,
            offset=_int(params, "offset") or 0,
            limit=DEFAULT_LIMIT if limit is None else min(limit, MAX_LIMIT),
        )
    except ValueError as exc:  # a range that ends before it starts, an unknown order …
        raise BadRequest(str(exc)) from None


def _param(params: Params, key: str) -> str:
    value = params.get(key, [""])[-1]
    if not value:
        raise BadRequest(f"missing query parameter {key!r}")
    return value


def _runs(data_dir: DataDir, params: Params) -> Response:
    return _json({"runs": list_runs(data_dir)})


def _rollouts(data_dir: DataDir, params: Params) -> Response:
    run = _param(params, "run")
    flt = parse_filter(params)
    conn = open_run(run, data_dir)
    try:
        return _json({"run": run, "rollouts": query(conn, flt)})
    finally:
        conn.close()


def _rollout(data_dir: DataDir, params: Params) -> Response:
    unknown = sorted(set(params) - {"id", "run"})
    if unknown:
        raise BadRequest(f"unknown query parameter {unknown[0]!r}")
    rollout_id = _param(params, "id")
    hit = find(rollout_id, data_dir, params.get("run", [""])[-1] or None)
    if hit is None:
        return _json({"error": f"no rollout {rollout_id!r}"}, 404)
    return _json({"run": hit[0], "rollout": hit[1]})


_ROUTES: dict[str, Answer] = {
    "/runs": _runs,
    "/rollouts": _rollouts,
    "/rollout": _rollout,
}


def route_table(
    data_dir: DataDir, answers: dict[str, Answer], error: Callable[[Exception, int], Response]
) -> dict[str, Handler]:
    """Each path's answer as a handler reading ``data_dir``; a refused query is ``error(exc,
    400)``, a missing run or store ``error(exc, 404)``."""

    def handler(answer: Answer) -> Handler:
        def serve(request: Request) -> Response:
            try:
                return answer(data_dir, request.query)
            except BadRequest as exc:
                return error(exc, 400)
            except FileNotFoundError as exc:
                return error(exc, 404)

        return serve

    return {path: handler(answer) for path, answer in answers.items()}


def _json_error(exc: Exception, status: int) -> Response:
    return _json({"error": str(exc)}, status)


def routes(data_dir: DataDir = None) -> dict[str, Handler]:
    """The API as a route table for ``rlpulse.runtime.http.Server``
    (``server.routes.update(...)``)."""
    return route_table(data_dir, _ROUTES, _json_error)


def serve(
    data_dir: DataDir = None,
    addr: str = "127.0.0.1",
    port: int = 0,
    certfile: str | None = None,
    keyfile: str | None = None,
    web_config: str | os.PathLike[str] | None = None,
) -> Server:
    """Serve the API and the viewer's pages (``rlpulse.rollouts.viewer``) on their own started
    server (port 0: a free one; ``.port`` tells which); TLS, basic auth and headers from
    ``web_config``, or HTTPS when ``certfile`` is given (not both). ``close()`` frees the port."""
    from rlpulse.rollouts import viewer  # the pages build on this module's parsing

    if web_config is not None and certfile:
        raise ValueError("give the certificate in the web config or as certfile, not both")
    options: dict[str, Any] = {}
    if web_config is not None:
        options = webconfig.load(web_config).server_options()
    elif certfile:
        options["tls"] = tls_context(certfile, keyfile)
    return Server(addr, port, {**routes(data_dir), **viewer.routes(data_dir)}, **options).start()
