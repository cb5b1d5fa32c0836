"""The rollout JSON endpoint over real HTTP(S): routes, filters, errors naming the parameter,
and rollout text that cannot run as HTML in a browser."""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest

from rlpulse.rollouts import Recorder, SamplingConfig
from rlpulse.rollouts.server import routes, serve
from rlpulse.runtime.http import Server
from tests.conftest import bcrypt_hash, self_signed

XSS = "<img src=x onerror=alert(1)>&lt;/script&gt;\x1b[2J"


@pytest.fixture
def data_dir(tmp_path):
    rec = Recorder("web", data_dir=tmp_path, sampling=SamplingConfig(per_step=100, seed=0))
    rec.record(
        step=[0, 0, 1, 1],
        rollout_ids=["a", "b", "c/with slash&x=1", "d"],
        responses=[XSS, "fine", "also fine", "nan reward"],
        rewards=[0.5, 2.0, -1.0, float("nan")],
        components={"format": [1.0, 0.0, 1.0, np.inf]},
        truncated=[False, True, False, False],
        errors=[None, None, "timeout", None],
    )
    rec.close()
    return tmp_path


@contextmanager
def running(data_dir, **kw: Any) -> Iterator[str]:
    srv = serve(data_dir, **kw)
    try:
        yield f"{'https' if kw.get('certfile') else 'http'}://127.0.0.1:{srv.port}"
    finally:
        srv.close()


def get(url: str | urllib.request.Request, **kw) -> tuple[int, Any, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10, **kw) as resp:
            return resp.status, resp.headers, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        body = err.read()
        return err.code, err.headers, json.loads(body) if body.startswith(b"{") else body


def status_of(url: str | urllib.request.Request, ctx: ssl.SSLContext) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10, context=ctx) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code


def ids(body: dict) -> list[str]:
    return [r["rollout_id"] for r in body["rollouts"]]


def test_routes_and_filters(data_dir):
    with running(data_dir) as base:
        status, _, body = get(f"{base}/runs")
        assert status == 200 and body == {"runs": ["web"]}
        assert ids(get(f"{base}/rollouts?run=web")[2]) == ["a", "b", "c/with slash&x=1", "d"]
        assert ids(get(f"{base}/rollouts?run=web&worst=1")[2]) == ["c/with slash&x=1"]
        assert ids(get(f"{base}/rollouts?run=web&step=0&best=1")[2]) == ["b"]
        assert ids(get(f"{base}/rollouts?run=web&truncated=1")[2]) == ["b"]
        assert ids(get(f"{base}/rollouts?run=web&errors=true")[2]) == ["c/with slash&x=1"]
        component = quote("format>0.5")
        assert ids(get(f"{base}/rollouts?run=web&component={component}")[2]) == [
            "a",
            "c/with slash&x=1",
        ]
        [d] = get(f"{base}/rollouts?run=web&nonfinite=1")[2]["rollouts"]
        assert d["reward"] == "nan" and d["components"] == {"format": "inf"}  # JSON has no NaN
        status, _, body = get(f"{base}/rollout?id={quote('c/with slash&x=1', safe='')}")
        assert status == 200 and body["run"] == "web" and body["rollout"]["error"] == "timeout"
        status, _, body = get(f"{base}/rollout?id=b&run=web")
        assert status == 200 and body["rollout"]["truncated"] is True


def test_a_step_range_and_a_time_range(data_dir):
    """The range a dashboard link carries: steps (inclusive) or recording times, in seconds or
    Grafana's milliseconds."""
    with running(data_dir) as base:
        rollouts = f"{base}/rollouts?run=web"
        assert ids(get(f"{rollouts}&step_min=1")[2]) == ["c/with slash&x=1", "d"]
        assert ids(get(f"{rollouts}&step_min=0&step_max=0")[2]) == ["a", "b"]
        assert ids(get(f"{rollouts}&step_min=-5&step_max=1&worst=1")[2]) == ["c/with slash&x=1"]
        assert ids(get(f"{rollouts}&step_max=-1")[2]) == []
        # an empty bound (a link whose template found no step) leaves that end open
        assert ids(get(f"{rollouts}&step_min=&step_max=0")[2]) == ["a", "b"]
        now_ms = int(time.time() * 1000)
        assert len(ids(get(f"{rollouts}&since=1&until={now_ms}")[2])) == 4
        assert ids(get(f"{rollouts}&since={now_ms + 60_000}")[2]) == []
        assert ids(get(f"{rollouts}&until={now_ms // 1000 - 60}")[2]) == []  # seconds


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("step_min=2&step_max=1", "step_min 2 is past the end"),
        ("step=1&step_min=0", "choose one of step and a step range"),
        ("step_max=9223372036854775808", "'step_max' is out of range"),
        ("step_min=x", "'step_min'"),
        ("since=20&until=10", "since 20.0 is past the end"),
        ("since=nan", "'since'"),
        ("until=-1", "'until'"),
        ("until=1e999", "'until'"),
    ],
)
def test_a_bad_range_is_a_400_naming_it(data_dir, query, needle):
    with running(data_dir) as base:
        status, _, body = get(f"{base}/rollouts?run=web&{query}")
    assert status == 400 and needle in body["error"], body


def test_errors_name_the_parameter(data_dir):
    with running(data_dir) as base:
        for path, needle in (
            ("/rollouts", "'run'"),
            ("/rollouts?run=web&worst=x", "'worst'"),
            ("/rollouts?run=web&worst=1&best=1", "exclude each other"),
            ("/rollouts?run=web&colour=red", "'colour'"),
            ("/rollouts?run=web&component=format~1", "format~1"),
            ("/rollouts?run=web&truncated=maybe", "'truncated'"),
            ("/rollout", "'id'"),
            ("/rollout?id=a&worst=1", "'worst'"),
        ):
            status, _, body = get(base + path)
            assert status == 400 and needle in body["error"], (path, body)
        status, _, body = get(f"{base}/rollouts?run=other")
        assert status == 404 and "'other'" in body["error"]
        status, _, body = get(f"{base}/rollout?id=a&run=other")
        assert status == 404 and "'other'" in body["error"]
        assert get(f"{base}/rollout?id=zzz")[0] == 404
        assert get(f"{base}/metrics")[0] == 404
        post = urllib.request.Request(f"{base}/rollouts?run=web", data=b"x", method="POST")
        assert get(post)[0] == 501  # read-only: only GET and HEAD exist


def test_rollout_text_cannot_run_in_a_browser(data_dir):
    with running(data_dir) as base, urllib.request.urlopen(f"{base}/rollout?id=a", timeout=10) as r:
        raw = r.read()
        headers = r.headers
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert raw.isascii() and not set(b"<>&") & set(raw)
    assert json.loads(raw)["rollout"]["response"] == XSS  # exact text once decoded


def test_tls_and_port_release(data_dir, tmp_path):
    cert, key = self_signed(tmp_path)
    with running(data_dir, certfile=cert, keyfile=key) as base:
        assert base.startswith("https://127.0.0.1:")
        ctx = ssl.create_default_context(cafile=str(cert))
        status, _, body = get(f"{base}/runs", context=ctx)
        assert status == 200 and body["runs"] == ["web"]
        with pytest.raises(OSError):  # plain HTTP to the TLS port: no answer
            urllib.request.urlopen(base.replace("https", "http") + "/runs", timeout=5)
        assert get(f"{base}/runs", context=ctx)[0] == 200  # the server is still fine
        port = int(base.rsplit(":", 1)[1])
    serve(data_dir, port=port).close()  # the port was freed


def test_its_own_server_takes_tls_and_basic_auth_from_a_web_config(data_dir, tmp_path):
    cert, key = self_signed(tmp_path)
    web = tmp_path / "web.yml"
    web.write_text(
        f"tls_server_config: {{cert_file: {cert}, key_file: {key}}}\n"
        f"basic_auth_users: {{reader: '{bcrypt_hash('s3cret', cost=4)}'}}\n"
    )
    ctx = ssl.create_default_context(cafile=cert)
    srv = serve(data_dir, web_config=web)
    try:
        for path in ("/runs", "/view?run=web", "/", "/viewer.css"):  # the viewer's pages too
            url = f"https://127.0.0.1:{srv.port}{path}"
            assert status_of(url, ctx) == 401
            for password, status in (("wrong", 401), ("s3cret", 200)):
                token = base64.b64encode(f"reader:{password}".encode()).decode()
                request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
                assert status_of(request, ctx) == status
    finally:
        srv.close()
    with pytest.raises(ValueError, match="not both"):
        serve(data_dir, certfile=cert, keyfile=key, web_config=web)


def test_routes_mount_on_another_server(data_dir):
    """What the exporter does when the endpoint is switched on: its /metrics plus these."""
    srv = Server("127.0.0.1", 0, routes(data_dir)).start()
    try:
        status, _, body = get(f"http://127.0.0.1:{srv.port}/rollouts?run=web&worst=2")
        assert status == 200 and ids(body) == ["c/with slash&x=1", "a"]
    finally:
        srv.close()
