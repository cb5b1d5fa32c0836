"""The HTTP endpoint: negotiation, gzip, routes and guard, TLS, shutdown, and a real Prometheus."""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.stackutil import api, prometheus, results, wait_for_data
from rlpulse import catalog
from rlpulse.runtime.exporter import Exporter
from rlpulse.runtime.exposition import OPENMETRICS, TEXT
from rlpulse.runtime.http import (
    PortInUseError,
    Request,
    Response,
    Server,
    accepts_gzip,
    tls_context,
    wants_openmetrics,
)
from tests.conftest import promtool_check_metrics, self_signed

PROMETHEUS_2_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


@pytest.mark.parametrize(
    ("accept", "openmetrics"),
    [
        (None, False),
        ("*/*", False),
        ("text/plain;version=0.0.4", False),
        ("application/openmetrics-text; version=1.0.0", True),
        (PROMETHEUS_2_ACCEPT, True),
        ("text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5", False),
        ("application/openmetrics-text;q=0,text/plain", False),
        ("application/json", False),
        ("application/openmetrics-text;q=bogus", False),
    ],
)
def test_content_negotiation(accept: str | None, openmetrics: bool) -> None:
    assert wants_openmetrics(accept) is openmetrics


@pytest.mark.parametrize(
    ("header", "gzip_ok"),
    [
        (None, False),
        ("gzip", True),
        ("deflate, gzip;q=0.5", True),
        ("gzip;q=0", False),
        ("*", True),
    ],
)
def test_accept_encoding(header: str | None, gzip_ok: bool) -> None:
    assert accepts_gzip(header) is gzip_ok


def _get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


@pytest.fixture
def busy_exporter() -> Iterator[Exporter]:
    """A started exporter with enough series for gzip to matter."""
    exp = Exporter(port=0, addr="127.0.0.1", run_id="http", gpu=False, host=False)
    for i in range(50):
        exp.set("rl_hyperparameter", float(i), name=f"h{i}")
    exp.observe_rollouts(latency_seconds=[0.2, 3.0], rollout_ids=["a", "b"])
    exp.start()
    yield exp
    exp.close()


def test_gzip_and_formats_over_http(busy_exporter: Exporter) -> None:
    url = busy_exporter.url
    status, headers, plain = _get(url)
    assert status == 200 and headers["Content-Type"] == TEXT
    assert "Content-Encoding" not in headers
    assert promtool_check_metrics(plain.decode()).returncode == 0

    status, headers, packed = _get(url, **{"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip" and "Accept-Encoding" in headers["Vary"]
    assert len(packed) < len(plain) / 3
    assert gzip.decompress(packed).count(b"\n") == plain.count(b"\n")

    accept = {"Accept": PROMETHEUS_2_ACCEPT, "Accept-Encoding": "gzip"}
    status, headers, packed = _get(url, **accept)
    assert headers["Content-Type"] == OPENMETRICS
    assert gzip.decompress(packed).endswith(b"# EOF\n")


def test_head_index_and_not_found(busy_exporter: Exporter) -> None:
    base = busy_exporter.url.rsplit("/", 1)[0]
    conn = http.client.HTTPConnection("127.0.0.1", busy_exporter.port, timeout=10)
    conn.request("HEAD", "/metrics")
    resp = conn.getresponse()
    assert resp.status == 200 and int(resp.headers["Content-Length"]) > 0 and resp.read() == b""
    conn.close()
    assert b"/metrics" in _get(base + "/")[2]
    status, _, body = _get(base + "/nope")
    assert status == 404 and b"/nope" in body


def _server(**kwargs: Any) -> Server:
    return Server("127.0.0.1", 0, **kwargs).start()


def test_routes_guard_and_handler_errors() -> None:
    seen: list[Request] = []

    def guard(req: Request) -> Response | None:
        seen.append(req)
        if req.headers.get("Authorization") != "Bearer ok":
            return Response(b"no\n", status=401, headers={"WWW-Authenticate": "Bearer"})
        return None

    def boom(req: Request) -> Response:
        raise RuntimeError("handler bug")

    server = _server(routes={"/boom": boom}, guard=guard)
    server.route("/json", lambda req: Response(json.dumps(req.query).encode(), "application/json"))
    try:
        base = f"http://127.0.0.1:{server.port}"
        status, headers, _ = _get(base + "/json?x=1")
        assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
        status, headers, body = _get(base + "/json?x=1", Authorization="Bearer ok")
        assert status == 200 and json.loads(body) == {"x": ["1"]}
        assert headers["Content-Type"] == "application/json"
        assert _get(base + "/boom", Authorization="Bearer ok")[0] == 500
        assert _get(base + "/json", Authorization="Bearer ok")[0] == 200  # still serving
        assert seen[0].path == "/json" and seen[0].client[0] == "127.0.0.1"
    finally:
        server.close()


def test_port_in_use_names_the_port() -> None:
    server = _server()
    try:
        with pytest.raises(PortInUseError, match=rf"port {server.port} on 127.0.0.1"):
            Server("127.0.0.1", server.port).start()
    finally:
        server.close()


def test_close_drops_keepalive_connections_and_frees_the_port() -> None:
    server = _server(routes={"/x": lambda req: Response(b"x")})
    port = server.port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/x")
    assert conn.getresponse().read() == b"x"  # the connection stays open (HTTP/1.1)
    started = time.monotonic()
    server.close()
    assert time.monotonic() - started < 5
    with pytest.raises((http.client.HTTPException, OSError)):
        conn.request("GET", "/x")
        conn.getresponse()
    again = Server("127.0.0.1", port).start()
    again.close()


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return self_signed(tmp_path_factory.mktemp("tls"))


def test_tls_handshake_does_not_block_other_clients(cert: tuple[str, str]) -> None:
    server = _server(routes={"/x": lambda req: Response(b"secure")}, tls=tls_context(*cert))
    stalled = socket.create_connection(("127.0.0.1", server.port))  # never says hello
    try:
        ctx = ssl.create_default_context(cafile=cert[0])
        url = f"https://127.0.0.1:{server.port}/x"
        with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
            assert resp.read() == b"secure"
        with pytest.raises(OSError):  # plain HTTP on the TLS port: the handshake fails, reset
            urllib.request.urlopen(url.replace("https", "http"), timeout=5)
    finally:
        stalled.close()
        server.close()


def test_real_prometheus_scrapes_openmetrics_with_gzip(tmp_path: Path) -> None:
    run_id = 'prom "quoted" \\ é'  # series labels with escapes survive the round trip
    exp = Exporter(port=0, addr="127.0.0.1", run_id=run_id, gpu=False, host=False)
    exp.log({"rl_entropy": 1.25, "rl_loss": float("nan")}, step=4)
    rollout = catalog.get("rl_rollout_duration_seconds").name
    exp.observe(rollout, [0.2, 3.0], exemplars=["r-1", "r 2 é"])
    exp.start()
    assert exp._server is not None
    asked: list[tuple[str, str]] = []
    exp._server.guard = lambda req: asked.append(
        (req.headers.get("Accept", ""), req.headers.get("Accept-Encoding", ""))
    )
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [
            {"job_name": "rl", "static_configs": [{"targets": [f"127.0.0.1:{exp.port}"]}]}
        ],
    }
    try:
        with prometheus(tmp_path, config, ["--enable-feature=exemplar-storage"]) as base:
            entropy = wait_for_data(base, "rl_entropy")
            target = api(f"{base}/api/v1/targets")["data"]["activeTargets"][0]
            assert target["health"] == "up" and target["lastError"] == ""
            assert entropy[0]["value"][1] == "1.25" and entropy[0]["metric"]["run_id"] == run_id
            assert results(base, "rl_loss")[0]["value"][1] == "NaN"
            now = time.time()
            params = {"query": f"{rollout}_bucket", "start": now - 600, "end": now + 60}
            found = api(f"{base}/api/v1/query_exemplars?{urllib.parse.urlencode(params)}")["data"]
            ids = {e["labels"]["rollout_id"] for series in found for e in series["exemplars"]}
            assert ids == {"r-1", "r 2 é"}  # (Prometheus 2.42 keeps escapes in exemplar labels)
            accept, encoding = asked[0]
            assert wants_openmetrics(accept) and accepts_gzip(encoding)
    finally:
        exp.close()


def test_a_client_hanging_up_mid_response_is_not_a_traceback(
    capfd: pytest.CaptureFixture[str],
) -> None:
    exp = Exporter(port=0, addr="127.0.0.1", gpu=False, host=False).start()
    try:
        exp.log({f"custom/{i}": float(i) for i in range(200)})
        for _ in range(20):
            with socket.create_connection(("127.0.0.1", exp.port)) as s:
                s.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.5)
        assert "Traceback" not in capfd.readouterr().err
        assert "rl_run_info" in urllib.request.urlopen(exp.url, timeout=10).read().decode()
    finally:
        exp.close()
