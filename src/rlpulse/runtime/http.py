"""The exporter's HTTP endpoint: a route table on a threading HTTP server.

``Server`` maps paths to handlers (``Request -> Response``); an optional ``guard`` sees every
request first and may answer it instead (authentication plugs in there,
``rlpulse.runtime.webconfig``), and ``headers`` are added to every response. Responses are gzipped
when the client asks. ``metrics_handler`` serves an exposition with content negotiation
(Prometheus text 0.0.4 or OpenMetrics 1.0.0).

Connections cannot exhaust the trainer's threads or file descriptors: the accept loop holds a new
connection without a thread until its first bytes arrive, keeps at most ``MAX_CONNECTIONS``,
gives each connection ``HEAD_TIMEOUT`` seconds in total for its TLS handshake and each request's
line and headers, and pauses accepting (instead of spinning) while the process is out of
descriptors. A new connection past the cap evicts the one idle longest (sent nothing yet, in its
handshake, or between keep-alive requests), those never answered 200 first, else a non-scraper's
request in flight: clients that keep re-sending cannot lock a scraper out. One bad connection
never ends the accept loop.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import selectors
import socket
import ssl
import sys
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from rlpulse.runtime.exposition import OPENMETRICS, TEXT, Pacer, Renderer

log = logging.getLogger("rlpulse")

GZIP_LEVEL = 1  # 10k series: ~8 ms and ~13x smaller; level 9 costs 4x the time for 15% less
GZIP_MIN_BYTES = 1024
CONNECTION_TIMEOUT = 60.0  # seconds one read or write of a request body or response may take
HEAD_TIMEOUT = 10.0  # seconds for the TLS handshake plus a request line and headers, in total
MAX_CONNECTIONS = 32  # open connections; Prometheus needs one or two
ACCEPT_BACKOFF = 0.5  # seconds without accepting after the process ran out of descriptors
POLL_INTERVAL = 0.1  # how quickly close() stops the accept loop and deadlines are enforced
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


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


class _Conn:
    """A served connection: its socket (the TLS one once wrapped), the monotonic time by which
    its handshake or current request head must have arrived (inf while serving), whether it was
    ever answered 200 (a scraper's) and whether it was cut to make room."""

    __slots__ = ("answered", "deadline", "evicted", "sock")

    def __init__(self, sock: Any, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.answered = False
        self.evicted = False

    def cut(self) -> None:
        """Abort whatever the connection's thread is blocked on."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def rank(self) -> tuple[int, float]:
        """Eviction order, lowest first: idle (handshake, head) before serving, never
        answered 200 before a scraper's, then longest idle."""
        serving = self.deadline == math.inf
        return (2 * serving + self.answered, 0.0 if serving else self.deadline)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: Prometheus reuses its connection
    timeout = CONNECTION_TIMEOUT
    server: _HTTPServer

    def __init__(self, request: Any, client_address: Any, server: Any, conn: _Conn) -> None:
        self.conn = conn
        super().__init__(request, client_address, server)

    def handle(self) -> None:
        """Serve requests until the connection closes; each head has ``HEAD_TIMEOUT`` s."""
        self.close_connection = True
        self._one()
        while not self.close_connection:
            self._one()

    def _one(self) -> None:
        self.conn.deadline = time.monotonic() + HEAD_TIMEOUT
        self.handle_one_request()

    def do_GET(self) -> None:
        self._serve(send_body=True)

    def do_HEAD(self) -> None:
        self._serve(send_body=False)

    def _serve(self, send_body: bool) -> None:
        self.conn.deadline = math.inf  # the head is in: no deadline while the request is served
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
                self.conn.answered = True
                app._answer(url.path, n)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("rlpulse http: %s " + format, self.address_string(), *args)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # the listen backlog: a burst of connects is not made to retry

    def __init__(self, app: Server, family: socket.AddressFamily, address: tuple[str, int]):
        self.address_family = family
        self.app = app
        super().__init__(address, BaseHTTPRequestHandler)  # finish_request makes the handler

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-response is routine: debug-logged, not a traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError | ssl.SSLError):
            log.debug("rlpulse http: %s went away: %s", client_address, exc)
            return
        log.warning("rlpulse http: error serving %s", client_address, exc_info=True)

    def finish_request(self, request: Any, client_address: Any) -> None:
        conn = _Conn(request, time.monotonic() + HEAD_TIMEOUT)
        self.app.connections.add(conn)
        try:
            tls = self.app.tls
            if tls is not None:
                request.settimeout(HEAD_TIMEOUT)
                try:
                    conn.sock = tls.wrap_socket(request, server_side=True)
                except (OSError, ValueError) as exc:
                    log.debug("rlpulse http: TLS handshake from %s failed: %s", client_address, exc)
                    return
            _RequestHandler(conn.sock, client_address, self, conn)
        finally:
            self.app.connections.discard(conn)
            if conn.sock is not request:
                conn.sock.close()


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
        self.connections: set[_Conn] = set()  # served by a thread
        self._waiting: dict[socket.socket, float] = {}  # accepted, no bytes yet -> deadline
        self._stop = threading.Event()
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
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._serve,
            args=(self._httpd, self._stop),
            name=f"rlpulse-http-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def _serve(self, httpd: _HTTPServer, stop: threading.Event) -> None:
        """The accept loop: new connections wait here, threadless, until they send a byte."""
        listener = httpd.socket
        listener.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(listener, selectors.EVENT_READ)
        resume = 0.0  # while out of descriptors: when to accept again
        try:
            while not stop.is_set():
                now = time.monotonic()
                if resume and now >= resume:
                    sel.register(listener, selectors.EVENT_READ)
                    resume = 0.0
                for key, _ in sel.select(POLL_INTERVAL):
                    sock = key.fileobj
                    if sock is listener:
                        if not self._guarded(self._accept, listener, sel):
                            sel.unregister(listener)
                            resume = time.monotonic() + ACCEPT_BACKOFF
                    elif sock in self._waiting:  # not evicted by an accept in this round
                        assert isinstance(sock, socket.socket)
                        self._drop(sel, sock, close=False)
                        if not self._guarded(self._hand_over, httpd, sock, key.data):
                            sock.close()  # e.g. no thread could be started for it
                self._guarded(self._reap, sel, time.monotonic())
        finally:
            for sock in list(self._waiting):
                sock.close()
            self._waiting.clear()
            sel.close()

    @staticmethod
    def _guarded(step: Callable[..., Any], *args: Any) -> Any:
        """One step of the accept loop; an error is logged and the loop goes on (False)."""
        try:
            return step(*args)
        except Exception:
            log.warning("rlpulse http: accept loop step failed (serving on)", exc_info=True)
            return False

    @staticmethod
    def _hand_over(httpd: _HTTPServer, sock: socket.socket, address: Any) -> bool:
        """A connection whose first bytes are here gets its thread."""
        httpd.process_request(sock, address)
        return True

    def _drop(self, sel: selectors.BaseSelector, sock: socket.socket, close: bool = True) -> None:
        """Stop watching a waiting socket (and close it)."""
        del self._waiting[sock]
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(sock)
        if close:
            sock.close()

    def _accept(self, listener: socket.socket, sel: selectors.BaseSelector) -> bool:
        """Take one connection; False when the process is out of file descriptors."""
        try:
            sock, address = listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return True
        except OSError as exc:
            if exc.errno in _OUT_OF_DESCRIPTORS:
                log.debug("rlpulse http: accept paused: %s", exc)
                return False
            raise
        live = [c for c in list(self.connections) if not c.evicted]
        if len(self._waiting) + len(live) >= MAX_CONNECTIONS and not self._evict(sel, live):
            sock.close()  # every slot is a scraper's request being served
            return True
        sel.register(sock, selectors.EVENT_READ, address)
        self._waiting[sock] = time.monotonic() + HEAD_TIMEOUT
        return True

    def _evict(self, sel: selectors.BaseSelector, live: list[_Conn]) -> bool:
        """Make room for a new connection (see the module docstring); False when none may go."""
        waiting = min(self._waiting.items(), key=lambda kv: kv[1], default=None)
        conn = min(live, key=_Conn.rank, default=None)
        if conn is not None and conn.rank()[0] == 3:
            conn = None  # a scraper's request in flight
        if waiting is not None and (conn is None or (0, waiting[1]) <= conn.rank()):
            self._drop(sel, waiting[0])
            return True
        if conn is None:
            return False
        conn.evicted = True
        conn.cut()
        return True

    def _reap(self, sel: selectors.BaseSelector, now: float) -> None:
        """Close connections whose handshake or request head is past its deadline."""
        for sock, deadline in list(self._waiting.items()):
            if deadline <= now:
                self._drop(sel, sock)
        for conn in list(self.connections):
            if conn.deadline <= now:
                conn.cut()

    def close(self) -> None:
        """Stop accepting, drop open connections and free the port."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        httpd.server_close()
        for conn in list(self.connections):
            conn.cut()

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
                conn.sock.close()
        for sock in list(self._waiting):
            sock.close()
        self.connections = set()
        self._waiting = {}
        httpd.socket.close()
