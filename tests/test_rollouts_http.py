"""The rollout JSON endpoint over real HTTP(S): routes, filters, errors naming the parameter,
and rollout text that cannot run as HTML in a browser."""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.error
import urllib.request
from urllib.parse import quote

import numpy as np
import pytest

from rlpulse.rollouts import Recorder, SamplingConfig
from rlpulse.rollouts.server import make_wsgi_app, serve

XSS = "<img src=x onerror=alert(1)>&lt;/script&gt;\x1b[2J"


@pytest.fixture
def data_dir(tmp_path):
    rec = Recorder("web", data_dir=tmp_path, sampling=SamplingConfig(per_step=100, seed=0))
    rec.record(
        step=[0, 0, 1, 1],
        rollout_ids=["a", "b", "c/with slash", "d"],
        responses=[XSS, "fine", "also fine", "nan reward"],
        rewards=[0.5, 2.0, -1.0, float("nan")],
        components={"format": [1.0, 0.0, 1.0, np.inf]},
        truncated=[False, True, False, False],
        errors=[None, None, "timeout", None],
    )
    rec.close()
    return tmp_path


def get(url: str, **kw) -> tuple[int, dict, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10, **kw) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read())


def test_routes_and_filters(data_dir):
    with serve(data_dir) as srv:
        assert srv.addr == "127.0.0.1"
        base = srv.url
        status, _, body = get(f"{base}/runs")
        assert status == 200 and body == {"runs": ["web"]}
        _, _, body = get(f"{base}/rollouts?run=web")
        assert [r["rollout_id"] for r in body["rollouts"]] == ["a", "b", "c/with slash", "d"]
        _, _, body = get(f"{base}/rollouts?run=web&worst=1")
        assert [r["rollout_id"] for r in body["rollouts"]] == ["c/with slash"]
        _, _, body = get(f"{base}/rollouts?run=web&step=0&best=1")
        assert [r["rollout_id"] for r in body["rollouts"]] == ["b"]
        _, _, body = get(f"{base}/rollouts?run=web&truncated=1")
        assert [r["rollout_id"] for r in body["rollouts"]] == ["b"]
        _, _, body = get(f"{base}/rollouts?run=web&errors=true")
        assert [r["rollout_id"] for r in body["rollouts"]] == ["c/with slash"]
        _, _, body = get(f"{base}/rollouts?run=web&component={quote('format>0.5')}")
        assert [r["rollout_id"] for r in body["rollouts"]] == ["a", "c/with slash"]
        _, _, body = get(f"{base}/rollouts?run=web&nonfinite=1")
        [d] = body["rollouts"]
        assert d["reward"] == "nan" and d["components"] == {"format": "inf"}  # JSON has no NaN
        status, _, body = get(f"{base}/rollouts/{quote('c/with slash', safe='')}")
        assert status == 200 and body["run"] == "web" and body["rollout"]["error"] == "timeout"
        status, _, body = get(f"{base}/rollouts/b?run=web")
        assert status == 200 and body["rollout"]["truncated"] is True


def test_errors_name_the_parameter(data_dir):
    with serve(data_dir) as srv:
        for query, needle in (
            ("", "'run'"),
            ("run=web&worst=x", "'worst'"),
            ("run=web&worst=1&best=1", "exclude each other"),
            ("run=web&colour=red", "'colour'"),
            ("run=web&component=format~1", "format~1"),
            ("run=web&truncated=maybe", "'truncated'"),
        ):
            status, _, body = get(f"{srv.url}/rollouts?{query}")
            assert status == 400 and needle in body["error"], (query, body)
        status, _, body = get(f"{srv.url}/rollouts?run=other")
        assert status == 404 and "'other'" in body["error"]
        status, _, _ = get(f"{srv.url}/rollouts/zzz")
        assert status == 404
        status, _, _ = get(f"{srv.url}/metrics")
        assert status == 404
        req = urllib.request.Request(f"{srv.url}/rollouts?run=web", data=b"x", method="POST")
        status, _, _ = get(req)  # type: ignore[arg-type]
        assert status == 405


def test_rollout_text_cannot_run_in_a_browser(data_dir):
    with (
        serve(data_dir) as srv,
        urllib.request.urlopen(f"{srv.url}/rollouts/a", timeout=10) as resp,
    ):
        raw = resp.read()
        headers = resp.headers
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert raw.isascii() and not set(b"<>&") & set(raw)
    assert json.loads(raw)["rollout"]["response"] == XSS  # exact text once decoded


def test_tls_and_port_release(data_dir, tmp_path):
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    srv = serve(data_dir, certfile=str(cert), keyfile=str(key))
    try:
        assert srv.url.startswith("https://127.0.0.1:")
        ctx = ssl.create_default_context(cafile=str(cert))
        status, _, body = get(f"{srv.url}/runs", context=ctx)
        assert status == 200 and body["runs"] == ["web"]
        with pytest.raises(OSError):  # plain HTTP to the TLS port: no answer
            urllib.request.urlopen(srv.url.replace("https", "http") + "/runs", timeout=5)
        status, _, _ = get(f"{srv.url}/runs", context=ctx)  # the server is still fine
        assert status == 200
    finally:
        srv.close()
    again = serve(data_dir, port=srv.port)  # the port was freed
    again.close()


def test_wsgi_app_for_mounting(data_dir):
    app = make_wsgi_app(data_dir)
    seen = {}

    def start_response(status, headers):
        seen["status"], seen["headers"] = status, dict(headers)

    body = b"".join(
        app(
            {"REQUEST_METHOD": "GET", "PATH_INFO": "/rollouts", "QUERY_STRING": "run=web&worst=2"},
            start_response,
        )
    )
    assert seen["status"] == "200 OK" and seen["headers"]["X-Content-Type-Options"] == "nosniff"
    assert [r["rollout_id"] for r in json.loads(body)["rollouts"]] == ["c/with slash", "a"]
    b"".join(app({"REQUEST_METHOD": "DELETE", "PATH_INFO": "/rollouts"}, start_response))
    assert seen["status"].startswith("405")
