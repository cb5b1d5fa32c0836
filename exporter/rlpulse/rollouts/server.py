"""The optional HTTP JSON endpoint over the rollout stores (read-only, off by default).

Routes (GET only)::

    /runs                                   run ids with a store
    /rollouts?run=ID[&step=S][&worst=N|&best=N|&truncated=1|&errors=1|&nonfinite=1]
              [&component=NAME>VALUE ...][&limit=N]
    /rollouts/<rollout id>[?run=ID]          one rollout (the newest with that id)

``handle`` is the whole API as a function (for mounting on another server); ``make_wsgi_app``
wraps it for WSGI; ``serve`` runs it on its own thread, bound to 127.0.0.1 unless told
otherwise, with TLS when given a certificate. Bodies are ASCII JSON with ``<``, ``>`` and ``&``
escaped, served as ``application/json`` with ``nosniff`` and a deny-all CSP, so rollout text
cannot run as HTML or script in a browser.
"""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from rlpulse.rollouts.escape import html_safe_json
from rlpulse.rollouts.paths import list_runs
from rlpulse.rollouts.query import ComponentFilter, Filter, find, open_run, query
from rlpulse.rollouts.records import jsonable

HEADERS = (
    ("Content-Type", "application/json; charset=utf-8"),
    ("X-Content-Type-Options", "nosniff"),
    ("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'"),
    ("Cache-Control", "no-store"),
)
_FLAGS = ("truncated", "errors", "nonfinite")
_KNOWN = {"run", "step", "worst", "best", "component", "limit", *_FLAGS}
DEFAULT_LIMIT = 100
Response = tuple[int, bytes]


class BadRequest(ValueError):
    """A query the API refuses; the message names the parameter."""


def _json(status: int, obj: Any) -> Response:
    return status, html_safe_json(jsonable(obj)).encode("ascii")


def _int(params: dict[str, list[str]], key: str) -> int | None:
    values = params.get(key)
    if not values:
        return None
    try:
        n = int(values[-1])
    except ValueError:
        raise BadRequest(f"query parameter {key!r}={values[-1]!r} is not an integer") from None
    if n < 0 and key != "step":
        raise BadRequest(f"query parameter {key!r}={n} must be ≥ 0")
    return n


def _flag(params: dict[str, list[str]], key: str) -> bool:
    raw = params.get(key, ["0"])[-1].lower()
    if raw not in ("", "0", "1", "true", "false", "yes", "no"):
        raise BadRequest(f"query parameter {key!r}={raw!r} is not a boolean")
    return raw in ("", "1", "true", "yes")


def _filter(params: dict[str, list[str]]) -> Filter:
    unknown = sorted(set(params) - _KNOWN)
    if unknown:
        raise BadRequest(f"unknown query parameter {unknown[0]!r}")
    worst, best = _int(params, "worst"), _int(params, "best")
    picked = [k for k in ("worst", "best") if params.get(k)]
    picked += [k for k in _FLAGS if _flag(params, k)]
    if len(picked) > 1:
        raise BadRequest(f"query parameters {picked[0]!r} and {picked[1]!r} exclude each other")
    try:
        components = tuple(ComponentFilter.parse(c) for c in params.get("component", []))
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    limit = _int(params, "limit")
    return Filter(
        step=_int(params, "step"),
        worst=worst,
        best=best,
        truncated=_flag(params, "truncated"),
        errors=_flag(params, "errors"),
        nonfinite=_flag(params, "nonfinite"),
        components=components,
        limit=DEFAULT_LIMIT if limit is None else min(limit, 1000),
    )


def handle(data_dir: str | os.PathLike[str] | None, path: str, query_string: str = "") -> Response:
    """Answer one GET: ``(status, JSON body)``."""
    params = parse_qs(query_string, keep_blank_values=True)
    route = path.rstrip("/") or "/"
    try:
        if route == "/runs":
            return _json(200, {"runs": list_runs(data_dir)})
        if route == "/rollouts":
            run = params.get("run", [""])[-1]
            if not run:
                raise BadRequest("missing query parameter 'run'")
            flt = _filter(params)
            conn = open_run(run, data_dir)
            try:
                return _json(200, {"run": run, "rollouts": query(conn, flt)})
            finally:
                conn.close()
        if route.startswith("/rollouts/"):
            rollout_id = unquote(route[len("/rollouts/") :])
            hit = find(rollout_id, data_dir, params.get("run", [""])[-1] or None)
            if hit is None:
                return _json(404, {"error": f"no rollout {rollout_id!r}"})
            return _json(200, {"run": hit[0], "rollout": hit[1]})
        return _json(404, {"error": f"no route {route!r}; try /rollouts?run=ID or /runs"})
    except BadRequest as exc:
        return _json(400, {"error": str(exc)})
    except FileNotFoundError as exc:
        return _json(404, {"error": str(exc)})


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def make_wsgi_app(data_dir: str | os.PathLike[str] | None = None) -> Callable[..., Iterable[bytes]]:
    """A WSGI app serving the API (mount it under the paths above)."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            status, body = _json(405, {"error": "only GET"})
        else:
            status, body = handle(
                data_dir, environ.get("PATH_INFO", "/"), environ.get("QUERY_STRING", "")
            )
        headers = [*HEADERS, ("Content-Length", str(len(body)))]
        start_response(f"{status} {_REASONS.get(status, '')}", headers)
        return [body]

    return app


class RolloutServer:
    """The API on its own HTTP(S) server thread; ``close()`` frees the port."""

    def __init__(self, httpd: ThreadingHTTPServer, tls: bool) -> None:
        self._httpd = httpd
        host, self.port = httpd.server_address[:2]
        self.addr = host.decode() if isinstance(host, bytes) else str(host)
        self.url = f"{'https' if tls else 'http'}://{self.addr}:{self.port}"
        self._thread = threading.Thread(
            target=httpd.serve_forever, name="rlpulse-rollouts-http", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop serving."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def __enter__(self) -> RolloutServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(
    data_dir: str | os.PathLike[str] | None = None,
    addr: str = "127.0.0.1",
    port: int = 0,
    certfile: str | None = None,
    keyfile: str | None = None,
) -> RolloutServer:
    """Serve the API on ``addr:port`` (port 0: a free one); HTTPS when ``certfile`` is given."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "rlpulse-rollouts"

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            self._send(*handle(data_dir, parts.path, parts.query))

        def do_POST(self) -> None:
            self._send(*_json(405, {"error": "only GET"}))

        do_PUT = do_DELETE = do_PATCH = do_POST

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            for name, value in HEADERS:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: no per-request log
            return

    ctx = None
    if certfile:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certfile, keyfile)
    httpd = _Server((addr, port), Handler, ctx)
    return RolloutServer(httpd, tls=ctx is not None)


class _Server(ThreadingHTTPServer):
    """Threaded server whose TLS handshake happens in the request's thread, so one slow or
    broken client cannot hold up the others."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], ctx: Any
    ) -> None:
        super().__init__(address, handler)
        self.ctx = ctx

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.ctx is not None:
            request.settimeout(10)
            try:
                request = self.ctx.wrap_socket(request, server_side=True)
            except (OSError, ssl.SSLError):
                request.close()
                return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-request is not worth a traceback."""
