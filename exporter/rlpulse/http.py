"""The exporter's HTTP endpoint: a route table on a threading HTTP server.

``Server`` maps paths to handlers (``Request -> Response``); an optional ``guard`` sees every
request first and may answer it instead (authentication plugs in there, ``rlpulse.webconfig``),
and ``headers`` are added to every response. Responses are gzipped
when the client asks. With a TLS context the handshake runs in the connection's own thread, so a
slow client cannot hold up the accept loop. ``metrics_handler`` serves an exposition with content
negotiation (Prometheus text 0.0.4 or OpenMetrics 1.0.0).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import ssl
import sys
import threading
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from rlpulse.exposition import OPENMETRICS, TEXT, Pacer, Renderer

log = logging.getLogger("rlpulse")

GZIP_LEVEL = 1  # 10k series: ~8 ms and ~13x smaller; level 9 costs 4x the time for 15% less
GZIP_MIN_BYTES = 1024
CONNECTION_TIMEOUT = 60.0  # seconds an idle keep-alive connection (or a handshake) may take
POLL_INTERVAL = 0.1  # how quickly close() stops the accept loop


class PortInUseError(OSError):
    """The exporter's port is taken; the message names the port and the fix."""


@dataclass(frozen=True)
class Request:
    """What a route handler sees of a request."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: Message
    client: tuple[str, int]


@dataclass
class Response:
    """A route handler's answer."""

    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Response]
Guard = Callable[[Request], Response | None]


def _params(element: str) -> tuple[str, dict[str, str]]:
    """``"type/sub; a=b"`` -> ``("type/sub", {"a": "b"})`` (names lower-cased)."""
    head, *rest = element.split(";")
    params = {}
    for p in rest:
        name, _, val = p.partition("=")
        params[name.strip().lower()] = val.strip().strip('"')
    return head.strip().lower(), params


def _q(params: Mapping[str, str]) -> float:
    try:
        return float(params.get("q", "1"))
    except ValueError:
        return 0.0


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an ``Accept-Encoding`` header allows gzip (``q=0`` refuses it); an explicit
    ``gzip`` element wins over ``*`` wherever either stands."""
    q: dict[str, float] = {}
    for element in (accept_encoding or "").split(","):
        coding, params = _params(element)
        if coding in ("gzip", "*"):
            q.setdefault(coding, _q(params))
    return q.get("gzip", q.get("*", 0.0)) > 0


def wants_openmetrics(accept: str | None) -> bool:
    """Whether an ``Accept`` header prefers OpenMetrics text to the Prometheus text format."""
    best_om = best_text = 0.0
    for element in (accept or "").split(","):
        media, params = _params(element)
        q = _q(params)
        if media == "application/openmetrics-text":
            best_om = max(best_om, q)
        elif media in ("text/plain", "text/*", "*/*"):
            best_text = max(best_text, q)
    return best_om > 0 and best_om >= best_text


def metrics_handler(renderer: Renderer) -> Handler:
    """A route serving ``renderer`` in the format the scraper asks for."""

    def serve(request: Request) -> Response:
        openmetrics = wants_openmetrics(request.headers.get("Accept"))
        body = renderer.render(openmetrics, Pacer())
        return Response(body, OPENMETRICS if openmetrics else TEXT, headers={"Vary": "Accept"})

    return serve


def index_handler(routes: Mapping[str, Handler]) -> Handler:
    """A route listing the other routes (what ``/`` answers)."""

    def serve(request: Request) -> Response:
        paths = "\n".join(p for p in sorted(routes) if p != "/")
        return Response(f"rlpulse exporter\n{paths}\n".encode())

    return serve


def tls_context(certfile: str, keyfile: str | None = None) -> ssl.SSLContext:
    """A server-side TLS context from a certificate (chain) and its key."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certfile, keyfile)
    return ctx


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: Prometheus reuses its connection
    timeout = CONNECTION_TIMEOUT
    server: _HTTPServer

    def do_GET(self) -> None:
        self._serve(send_body=True)

    def do_HEAD(self) -> None:
        self._serve(send_body=False)

    def _serve(self, send_body: bool) -> None:
        url = urlsplit(self.path)
        request = Request(
            self.command, url.path, parse_qs(url.query), self.headers, self.client_address[:2]
        )
        app = self.server.app
        n = app._arrive(url.path)
        response = app.dispatch(request)
        body = response.body
        headers = {**self.server.app.headers, **response.headers}
        if (
            len(body) >= GZIP_MIN_BYTES
            and "Content-Encoding" not in headers
            and accepts_gzip(self.headers.get("Accept-Encoding"))
        ):
            body = zlib.compress(body, GZIP_LEVEL, wbits=31)  # gzip container; frees the GIL
            headers["Content-Encoding"] = "gzip"
            headers["Vary"] = ", ".join(filter(None, (headers.get("Vary"), "Accept-Encoding")))
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if send_body:
            self.wfile.write(body)
            self.wfile.flush()
            if response.status == 200:
                app._answer(url.path, n)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("rlpulse http: %s " + format, self.address_string(), *args)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, app: Server, family: socket.AddressFamily, address: tuple[str, int]):
        self.address_family = family
        self.app = app
        super().__init__(address, _RequestHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-response is routine: debug-logged, not a traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError | ssl.SSLError):
            log.debug("rlpulse http: %s went away: %s", client_address, exc)
            return
        log.warning("rlpulse http: error serving %s", client_address, exc_info=True)

    def finish_request(self, request: Any, client_address: Any) -> None:
        conn = request
        tls = self.app.tls
        if tls is not None:
            request.settimeout(CONNECTION_TIMEOUT)
            try:
                conn = tls.wrap_socket(request, server_side=True)
            except (OSError, ValueError) as exc:
                log.debug("rlpulse http: TLS handshake from %s failed: %s", client_address, exc)
                return
        self.app.connections.add(conn)
        try:
            super().finish_request(conn, client_address)
        finally:
            self.app.connections.discard(conn)
            if conn is not request:
                conn.close()


class Server:
    """An HTTP(S) server for a route table; ``start()`` binds, ``close()`` frees the port."""

    def __init__(
        self,
        addr: str,
        port: int,
        routes: Mapping[str, Handler] | None = None,
        *,
        tls: ssl.SSLContext | None = None,
        guard: Guard | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.addr = addr
        self.port = port
        self.tls = tls
        self.guard = guard
        self.headers: dict[str, str] = dict(headers or {})
        self.routes: dict[str, Handler] = dict(routes or {})
        self.routes.setdefault("/", index_handler(self.routes))
        self.connections: set[Any] = set()
        self._sent = threading.Condition()
        self._arrived: dict[str, int] = {}  # path -> requests dispatched so far
        self._answered: dict[str, int] = {}  # path -> highest such number answered with 200
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def route(self, path: str, handler: Handler) -> None:
        """Serve ``handler`` at ``path`` (replacing any handler there)."""
        self.routes[path] = handler

    def arrived(self, path: str) -> int:
        """How many requests for ``path`` have been dispatched so far."""
        with self._sent:
            return self._arrived.get(path, 0)

    def wait_answered(self, path: str, after: int, timeout: float) -> bool:
        """Wait (up to ``timeout`` s) until a request for ``path`` that arrived after the
        ``after``-th one has been answered in full with 200; whether one was."""
        with self._sent:
            return self._sent.wait_for(lambda: self._answered.get(path, 0) > after, timeout)

    def _arrive(self, path: str) -> int:
        with self._sent:
            self._arrived[path] = n = self._arrived.get(path, 0) + 1
            return n

    def _answer(self, path: str, n: int) -> None:
        with self._sent:
            if n > self._answered.get(path, 0):
                self._answered[path] = n
                self._sent.notify_all()

    def dispatch(self, request: Request) -> Response:
        """The response to one request: the guard's, the route's, 404, or 500 if it raised."""
        try:
            if self.guard is not None:
                refused = self.guard(request)
                if refused is not None:
                    return refused
            handler = self.routes.get(request.path)
            if handler is None:
                return Response(f"not found: {request.path}\n".encode(), status=404)
            return handler(request)
        except Exception:
            log.exception("rlpulse http: %s %s failed", request.method, request.path)
            return Response(b"internal error\n", status=500)

    def start(self) -> Server:
        """Bind and serve in a daemon thread; ``PortInUseError`` when the port is taken."""
        family = socket.getaddrinfo(
            self.addr or None, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0][0]
        try:
            self._httpd = _HTTPServer(self, family, (self.addr, self.port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUseError(
                    exc.errno,
                    f"rlpulse: port {self.port} on {self.addr} is already in use (another "
                    f"trainer or exporter?). Pass port=..., set RLPULSE_PORT, or use port=0 "
                    f"for a free port.",
                ) from None
            raise
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": POLL_INTERVAL},
            name=f"rlpulse-http-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop accepting, drop open connections and free the port."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        for conn in list(self.connections):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join()

    def abandon(self) -> None:
        """In a forked child: close the inherited listening socket and connections.

        The serving thread did not survive the fork, and the parent still serves through the
        same sockets, so nothing is shut down (that would cut the parent's connections): the
        child only lets go of its copies, so the port is freed when the parent closes.
        """
        httpd, self._httpd = self._httpd, None
        self._thread = None
        if httpd is None:
            return
        for conn in list(self.connections):
            with contextlib.suppress(OSError):
                conn.close()
        self.connections = set()
        httpd.socket.close()
