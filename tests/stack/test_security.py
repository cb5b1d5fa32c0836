"""The endpoint's TLS and basic auth from an exporter-toolkit web config file.

Parsing errors name the key; over real HTTPS the exporter refuses wrong or missing credentials
(401) and unverified client certificates, for /metrics and for routes mounted next to it (the
rollout API); verified credentials are cached so a scrape does not pay bcrypt each time; and a
real Prometheus scrapes over TLS with ``basic_auth`` and ``tls_config`` while its jobs with a wrong
password or without one are refused.
"""

from __future__ import annotations

import base64
import logging
import ssl
import time
import urllib.error
import urllib.request
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.stackutil import api, prometheus, results, wait_for
from rlpulse.rollouts.server import routes as rollout_routes
from rlpulse.runtime import webconfig
from rlpulse.runtime.exporter import Exporter
from rlpulse.runtime.http import Request
from rlpulse.runtime.webconfig import BasicAuth, RateLimit, TokenBucket, WebConfigError
from rlpulse.stack import config as stack_config
from rlpulse.stack.deploy.prometheus import config as prometheus_config
from tests.conftest import Pki, bcrypt_hash, make_pki

USER = "prometheus"
PASSWORD = "scrape-password-\u00e9-7f2c"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def hashed() -> str:
    return bcrypt_hash(PASSWORD, cost=10)  # the cost htpasswd -B and exporter-toolkit's docs use


def write_config(d: Path, doc: Any, name: str = "web.yml") -> Path:
    path = d / name
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    return path


def tls_doc(pki: Pki, **extra: Any) -> dict[str, Any]:
    return {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key), **extra}


def get(
    url: str,
    ca: Path,
    auth: tuple[str, str] | None = None,
    client: tuple[Path, Path] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """GET over HTTPS trusting ``ca``; (status, headers, body), HTTP errors included."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        ctx.load_cert_chain(*map(str, client))
    headers = {}
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


# ---- parsing --------------------------------------------------------------------------------

FAKE_HASH = "$2y$10$" + "a" * 53


def _bad_docs(pki: Pki) -> list[tuple[Any, str]]:
    """(document, the key its error must name)."""
    cert = tls_doc(pki)
    return [
        ({"tls_server_confg": cert}, "tls_server_confg: unknown key"),
        ({"tls_server_config": {**cert, "certfile": "x"}}, "tls_server_config.certfile"),
        ({"tls_server_config": {"cert_file": str(pki.server_cert)}}, "tls_server_config.key_file"),
        ({"tls_server_config": {**cert, "cert_file": "nope.crt"}}, "tls_server_config.cert_file"),
        (
            {"tls_server_config": {**cert, "key_file": str(pki.ca)}},  # the wrong key
            "tls_server_config: the certificate and key do not load",
        ),
        (
            {"tls_server_config": {**cert, "cert": "PEM"}},
            "tls_server_config.cert: set either cert or cert_file",
        ),
        (
            {"tls_server_config": {**cert, "client_auth_type": "Sometimes"}},
            "tls_server_config.client_auth_type: 'Sometimes' is not one of",
        ),
        (
            {"tls_server_config": {**cert, "client_auth_type": "RequireAnyClientCert"}},
            "tls_server_config.client_auth_type: RequireAnyClientCert accepts unverified",
        ),
        (
            {"tls_server_config": {**cert, "client_auth_type": "RequireAndVerifyClientCert"}},
            "tls_server_config.client_ca_file: required",
        ),
        (
            {"tls_server_config": {**cert, "client_ca_file": str(pki.ca)}},
            "tls_server_config.client_auth_type: a client CA is set",
        ),
        (
            {"tls_server_config": {**cert, "min_version": "TLS13", "max_version": "TLS12"}},
            "tls_server_config.min_version: is above max_version",
        ),
        (
            {"tls_server_config": {**cert, "min_version": "SSL3"}},
            "tls_server_config.min_version: 'SSL3'",
        ),
        (
            {"tls_server_config": {**cert, "cipher_suites": ["TLS_RSA_WITH_RC4_128_SHA"]}},
            "tls_server_config.cipher_suites[0]",
        ),
        (
            {"tls_server_config": {**cert, "client_allowed_sans": ["a"]}},
            "tls_server_config.client_allowed_sans: not supported",
        ),
        ({"basic_auth_users": {"alice": "plaintext-password"}}, "basic_auth_users.alice: not a"),
        ({"basic_auth_users": {"a:b": FAKE_HASH}}, "basic_auth_users.'a:b'"),
        ({"basic_auth_users": ["alice"]}, "basic_auth_users: must be a mapping"),
        ({"http_server_config": {"http2": "yes"}}, "http_server_config.http2"),
        (
            {"http_server_config": {"headers": {"X-Frame-Options": "allow"}}},
            "http_server_config.headers.X-Frame-Options: 'allow'",
        ),
        (
            {"http_server_config": {"headers": {"X-Evil": "1"}}},
            "http_server_config.headers.X-Evil: unknown key",
        ),
        (
            {"http_server_config": {"headers": {"Content-Security-Policy": "a\r\nSet-Cookie: x"}}},
            "http_server_config.headers.Content-Security-Policy: must be a single-line",
        ),
        ({"rate_limit": {"interval": "fast", "burst": 1}}, "rate_limit.interval: 'fast'"),
        ({"rate_limit": {"interval": "1s"}}, "rate_limit.burst"),
        (["tls_server_config"], "top level: must be a mapping"),
    ]


def test_bad_config_errors_name_the_file_and_the_key(tmp_path: Path, pki: Pki) -> None:
    for i, (doc, expected) in enumerate(_bad_docs(pki)):
        path = write_config(tmp_path, doc, f"web{i}.yml")
        with pytest.raises(WebConfigError) as err:
            webconfig.load(path)
        assert str(err.value).startswith(f"web config {path}: "), err.value
        assert expected in str(err.value), (doc, str(err.value))
        if "plaintext-password" in str(doc):
            assert "plaintext-password" not in str(err.value)  # a value is never echoed


def test_unreadable_and_non_yaml_files(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match="cannot read it"):
        webconfig.load(tmp_path / "missing.yml")
    (tmp_path / "bad.yml").write_text("basic_auth_users: [unclosed")
    with pytest.raises(WebConfigError, match="not valid YAML"):
        webconfig.load(tmp_path / "bad.yml")


def test_empty_file_is_plain_http_without_auth(tmp_path: Path) -> None:
    (tmp_path / "web.yml").write_text("")
    cfg = webconfig.load(tmp_path / "web.yml")
    assert cfg.server_options() == {"tls": None, "guard": None, "headers": {}}


def test_relative_files_resolve_against_the_config_directory(tmp_path: Path, pki: Pki) -> None:
    d = tmp_path / "conf"
    d.mkdir()
    for src in (pki.server_cert, pki.server_key):
        (d / src.name).write_bytes(src.read_bytes())
    doc = {"tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"}}
    cfg = webconfig.load(write_config(d, doc))
    assert cfg.tls is not None and cfg.tls.cert_file == d / "server.crt"


def test_inline_pem_and_tls_options_build_a_context(tmp_path: Path, pki: Pki) -> None:
    doc = {
        "tls_server_config": {
            "cert": pki.server_cert.read_text(),
            "key": pki.server_key.read_text(),
            "client_ca": pki.ca.read_text(),
            "client_auth_type": "VerifyClientCertIfGiven",
            "min_version": "TLS13",
            "cipher_suites": ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"],
        }
    }
    ctx = webconfig.load(write_config(tmp_path, doc)).ssl_context()
    assert ctx is not None
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    assert ctx.verify_mode == ssl.CERT_OPTIONAL
    assert [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"] == [
        "ECDHE-ECDSA-AES128-GCM-SHA256"
    ]
    assert not list(tmp_path.glob("rlpulse-tls-*"))  # the inline key was not left on disk


def test_go_durations() -> None:
    assert webconfig.go_duration("1m30s") == 90
    assert webconfig.go_duration("250ms") == 0.25
    assert webconfig.go_duration("0") == 0
    for bad in ("", "1", "1x", "s1", "1s junk"):
        with pytest.raises(ValueError):
            webconfig.go_duration(bad)


# ---- basic auth without HTTP ----------------------------------------------------------------


def _request(authorization: str | None) -> Request:
    headers = Message()
    if authorization is not None:
        headers["Authorization"] = authorization
    return Request("GET", "/metrics", {}, headers, ("127.0.0.1", 1))


def test_authorization_header_parsing() -> None:
    good = base64.b64encode(b"u:p:with:colons").decode()
    assert webconfig.credentials(f"Basic {good}") == ("u", b"p:with:colons")
    assert webconfig.credentials(f"basic  {good} ") == ("u", b"p:with:colons")
    no_colon = "Basic " + base64.b64encode(b"nocolon").decode()
    not_utf8 = "Basic " + base64.b64encode(b"\xff:x").decode()
    for bad in (None, "", "Bearer x", "Basic", "Basic !!!", no_colon, not_utf8):
        assert webconfig.credentials(bad) is None, bad


def test_verified_credentials_are_cached_wrong_ones_always_pay_bcrypt(hashed: str) -> None:
    auth = BasicAuth({USER: hashed.encode()})
    secret = PASSWORD.encode()

    def timed(user: str, password: bytes, n: int = 1) -> tuple[bool, float]:
        t0 = time.perf_counter()
        for _ in range(n):
            ok = auth.check(user, password)
        return ok, (time.perf_counter() - t0) / n

    ok_first, first = timed(USER, secret)
    ok_cached, cached = timed(USER, secret, n=1000)
    ok_wrong, wrong = timed(USER, b"wrong", n=3)
    ok_unknown, unknown = timed("mallory", secret, n=3)
    ok_long, _ = timed(USER, secret + b"x" * 100)  # past bcrypt's 72 bytes: no crash, refused
    assert (ok_first, ok_cached, ok_wrong, ok_unknown, ok_long) == (True, True, False, False, False)
    assert cached < first / 100, (first, cached)
    assert wrong > first / 3 and unknown > first / 3, (first, wrong, unknown)  # no fast refusal
    assert auth.check(USER, secret)  # a wrong attempt did not evict the good one
    print(
        f"\nbasic auth (bcrypt cost 10): first check {first * 1e3:.1f} ms, cached "
        f"{cached * 1e6:.1f} us, wrong password {wrong * 1e3:.1f} ms, unknown user "
        f"{unknown * 1e3:.1f} ms"
    )


def test_guard_answers_401_with_a_challenge(hashed: str) -> None:
    auth = BasicAuth({USER: hashed.encode()})
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert auth(_request(f"Basic {token}")) is None
    for header in (None, "Basic " + base64.b64encode(f"{USER}:nope".encode()).decode()):
        refused = auth(_request(header))
        assert refused is not None and refused.status == 401
        assert refused.headers["WWW-Authenticate"] == 'Basic realm="rlpulse"'


def test_rate_limit_is_a_token_bucket() -> None:
    now = [0.0]
    bucket = TokenBucket(RateLimit(interval=1.0, burst=2), clock=lambda: now[0])
    req = _request(None)
    assert [bucket(req) is None for _ in range(3)] == [True, True, False]
    refused = bucket(req)
    assert refused is not None and refused.status == 429
    now[0] = 1.0
    assert bucket(req) is None and bucket(req) is not None


# ---- over real HTTPS ------------------------------------------------------------------------


def test_https_with_basic_auth_guards_metrics_and_mounted_rollout_routes(
    tmp_path: Path, pki: Pki, hashed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = {
        "tls_server_config": tls_doc(pki),
        "basic_auth_users": {USER: hashed},
        "http_server_config": {"headers": {"X-Frame-Options": "deny"}},
    }
    monkeypatch.setenv(webconfig.ENV, str(write_config(tmp_path, doc)))
    exp = Exporter(port=0, addr="127.0.0.1", run_id="secure", gpu=False, host=False)
    exp.mount(rollout_routes(tmp_path / "rollouts"))
    exp.start()
    try:
        assert exp.url.startswith("https://127.0.0.1:")
        base = exp.url.removesuffix("/metrics")
        status, headers, body = get(exp.url, pki.ca, (USER, PASSWORD))
        assert status == 200 and b'rl_run_info{run_id="secure"' in body
        assert headers["X-Frame-Options"] == "deny"
        for auth in (None, (USER, "wrong"), ("root", PASSWORD)):
            for path in ("/metrics", "/runs", "/rollouts?run=x", "/"):
                status, headers, body = get(base + path, pki.ca, auth)
                assert status == 401, (path, auth, status)
                assert headers["WWW-Authenticate"] == 'Basic realm="rlpulse"'
                assert body == b"Unauthorized\n"
        status, _, body = get(base + "/runs", pki.ca, (USER, PASSWORD))
        assert (status, body) == (200, b'{"runs": []}')
        with pytest.raises(OSError):  # plain HTTP on the TLS port
            urllib.request.urlopen(exp.url.replace("https:", "http:"), timeout=5)
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):  # other CA
            urllib.request.urlopen(exp.url, timeout=5, context=ssl.create_default_context())
    finally:
        exp.close()


def test_required_client_certificates(tmp_path: Path, pki: Pki) -> None:
    doc = {
        "tls_server_config": tls_doc(
            pki, client_auth_type="RequireAndVerifyClientCert", client_ca_file=str(pki.ca)
        )
    }
    exp = Exporter(
        port=0, addr="127.0.0.1", gpu=False, host=False, web_config=write_config(tmp_path, doc)
    ).start()
    try:
        status, _, _ = get(exp.url, pki.ca, client=(pki.client_cert, pki.client_key))
        assert status == 200
        with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
            get(exp.url, pki.ca)  # no client certificate: the handshake is refused
        with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
            get(exp.url, pki.ca, client=(pki.server_cert, pki.server_key))  # not for clients
        status, _, _ = get(exp.url, pki.ca, client=(pki.client_cert, pki.client_key))
        assert status == 200  # refused handshakes left the server fine
    finally:
        exp.close()


def test_a_bad_web_config_fails_at_construction_not_open(tmp_path: Path, pki: Pki) -> None:
    path = write_config(tmp_path, {"basic_auth_users": {"alice": "not-a-hash"}})
    with pytest.raises(WebConfigError, match=r"basic_auth_users\.alice"):
        Exporter(port=0, gpu=False, host=False, web_config=path)
    both = write_config(tmp_path, {"tls_server_config": tls_doc(pki)}, "tls.yml")
    with pytest.raises(ValueError, match="give the certificate in one place"):
        Exporter(port=0, gpu=False, host=False, web_config=both, certfile=str(pki.server_cert))


def test_mounting_routes_without_auth_on_all_interfaces_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    exp = Exporter(port=0, gpu=False, host=False)  # default bind: 0.0.0.0
    with caplog.at_level(logging.WARNING, logger="rlpulse"):
        exp.mount(rollout_routes(tmp_path))
        Exporter(port=0, addr="127.0.0.1", gpu=False, host=False).mount(rollout_routes(tmp_path))
    warned = [r.getMessage() for r in caplog.records if "without basic auth" in r.getMessage()]
    assert len(warned) == 1 and "0.0.0.0" in warned[0]


# ---- a real Prometheus ----------------------------------------------------------------------


def test_real_prometheus_scrapes_over_tls_with_basic_auth(
    tmp_path: Path, pki: Pki, hashed: str
) -> None:
    basic = write_config(
        tmp_path, {"tls_server_config": tls_doc(pki), "basic_auth_users": {USER: hashed}}
    )
    mutual = write_config(
        tmp_path,
        {
            "tls_server_config": tls_doc(
                pki, client_auth_type="RequireAndVerifyClientCert", client_ca_file=str(pki.ca)
            ),
            "basic_auth_users": {USER: hashed},
        },
        "mtls.yml",
    )
    exporters = {
        name: Exporter(port=0, addr="127.0.0.1", run_id=name, gpu=False, host=False, web_config=p)
        for name, p in (("basic", basic), ("mtls", mutual))
    }
    for exp in exporters.values():
        exp.log({"rl_entropy": 0.5}, step=7)
        exp.start()
    (tmp_path / "pw").write_text(PASSWORD)
    (tmp_path / "wrong").write_text("not-the-password")
    client = {"cert_file": str(pki.client_cert), "key_file": str(pki.client_key)}

    def job(name: str, target: str, password: str | None, **tls: str) -> dict[str, Any]:
        """The scrape job `rlpulse generate` writes for these settings (scrape.* config)."""
        scrape: dict[str, Any] = {
            "job_name": name,
            "interval": "3s",  # a bcrypt check and a TLS handshake take over 1 s on a busy machine
            "timeout": "3s",
            "scheme": "https",
            "ca_file": str(pki.ca),
            "static_targets": [f"127.0.0.1:{exporters[target].port}"],
            "file_sd": [],
            **tls,
        }
        if password is not None:
            scrape |= {"username": USER, "password_file": str(tmp_path / password)}
        generated = prometheus_config(stack_config.from_dict({"scrape": scrape}))
        return dict(generated["scrape_configs"][0])

    jobs = [
        job("good", "basic", "pw"),
        job("wrong-password", "basic", "wrong"),
        job("no-auth", "basic", None),
        job("mtls-good", "mtls", "pw", **client),
        job("mtls-no-cert", "mtls", "pw"),
    ]
    config = {"global": {"scrape_interval": "3s", "scrape_timeout": "3s"}, "scrape_configs": jobs}
    try:
        with prometheus(tmp_path, config) as prom:

            def settled() -> dict[str, dict[str, Any]] | None:
                active = api(f"{prom}/api/v1/targets")["data"]["activeTargets"]
                targets = {t["scrapePool"]: t for t in active}
                done = len(targets) == len(jobs) and "unknown" not in (
                    t["health"] for t in targets.values()
                )
                return targets if done else None

            targets = wait_for(settled, 60, "every scrape job to have been tried")
            health = {name: t["health"] for name, t in targets.items()}
            assert health == {
                "good": "up",
                "wrong-password": "down",
                "no-auth": "down",
                "mtls-good": "up",
                "mtls-no-cert": "down",
            }, {n: t["lastError"] for n, t in targets.items()}
            for name in ("wrong-password", "no-auth"):
                assert "401 Unauthorized" in targets[name]["lastError"], targets[name]
            # TLS 1.3 checks the client's certificate after the client's side of the handshake:
            # the refusal reads as a TLS alert, or as a reset when the request was already sent
            refused = targets["mtls-no-cert"]["lastError"].lower()
            assert "tls" in refused or "connection reset by peer" in refused, refused
            steps = wait_for(
                lambda: (lambda r: r if len(r) == 2 else None)(results(prom, "rl_step")),
                30,
                "rl_step from both authenticated jobs",
            )
            assert {(r["metric"]["job"], r["value"][1]) for r in steps} == {
                ("good", "7"),
                ("mtls-good", "7"),
            }
        log = (tmp_path / "prometheus.log").read_text()
        assert "scrape" in log and PASSWORD not in log  # its own log never holds the password
    finally:
        for exp in exporters.values():
            exp.close()


# ---- any document: a WebConfig or a WebConfigError, nothing else ------------------------------

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.binary(max_size=4),
)
_KEYS = st.one_of(
    st.sampled_from(sorted(webconfig._TOP_KEYS | webconfig._TLS_KEYS | {"headers", "http2"})),
    st.sampled_from(["interval", "burst", "alice", "X-Frame-Options", "min_version"]),
    st.text(max_size=8),
    st.integers(),
)
_DOCS = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(doc=_DOCS)
def test_any_document_parses_or_fails_with_a_web_config_error(doc: Any) -> None:
    try:
        webconfig.parse(doc, Path("/nonexistent/web.yml"))
    except WebConfigError as exc:
        assert str(exc).startswith("web config /nonexistent/web.yml: ")
