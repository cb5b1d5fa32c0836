"""TLS and basic auth for the exporter's endpoint, from exporter-toolkit's web config file.

The file format is the one every Prometheus exporter reads with ``--web.config.file``::

    tls_server_config:
      cert_file: server.crt          # or inline: cert / key (PEM text)
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # with client_ca_file (or inline client_ca)
      min_version: TLS12
    http_server_config:
      headers: {X-Frame-Options: deny}
    basic_auth_users:
      alice: $2y$10$...              # bcrypt hashes (htpasswd -nBC 10 "" | tr -d ':\\n')
    rate_limit: {interval: 1s, burst: 20}

``load(path)`` validates it (``WebConfigError`` names the offending key); relative file names are
resolved against the config file's directory, as exporter-toolkit does. ``WebConfig.server_options``
gives what ``rlpulse.runtime.http.Server`` takes (TLS context, guard, headers). The file is read
once, when the exporter starts: restart it to pick up a change.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlpulse import safeyaml
from rlpulse.runtime import tempdirs
from rlpulse.runtime.http import Guard, Request, Response

ENV = "RLPULSE_WEB_CONFIG"

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
# Go's policies that accept a client certificate without verifying it: Python's ssl cannot, and
# exporter-toolkit's own docs call them insecure.
UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert")
# Go (IANA) names of the TLS 1.2 suites Go offers -> OpenSSL names. TLS 1.3 suites are not
# configurable, in Go as here.
CIPHER_SUITES = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}
# header -> allowed values (None: any single-line value), as exporter-toolkit accepts them
HEADERS: dict[str, tuple[str, ...] | None] = {
    "Content-Security-Policy": None,
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-Content-Type-Options": ("nosniff",),
    "X-XSS-Protection": None,
    "Strict-Transport-Security": None,
}
_TOP_KEYS = frozenset({"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"})
_TLS_KEYS = frozenset(
    {
        "cert_file",
        "key_file",
        "cert",
        "key",
        "client_ca_file",
        "client_ca",
        "client_auth_type",
        "min_version",
        "max_version",
        "cipher_suites",
        "prefer_server_cipher_suites",
        "client_allowed_sans",
        "curve_preferences",
    }
)
# accepted by exporter-toolkit, refused here with the reason (a security setting is never ignored)
_UNSUPPORTED = {
    "tls_server_config.client_allowed_sans": "not supported by rlpulse; use a dedicated client CA",
    "tls_server_config.curve_preferences": "not supported by rlpulse (OpenSSL's defaults apply)",
}
_BCRYPT = re.compile(r"^\$2[aby]\$(0[4-9]|[12]\d|3[01])\$[./A-Za-z0-9]{53}$")
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
REALM = "rlpulse"


class WebConfigError(ValueError):
    """A bad web config file; the message names the file and the offending key."""


@dataclass(frozen=True)
class TLSServerConfig:
    """``tls_server_config``: file names resolved, PEM text for the inline forms."""

    cert_file: Path | None = None
    key_file: Path | None = None
    cert: str | None = None
    key: str | None = None
    client_ca_file: Path | None = None
    client_ca: str | None = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True


@dataclass(frozen=True)
class RateLimit:
    """``rate_limit``: a token bucket in front of every request (``interval`` 0: off)."""

    interval: float
    burst: int


@dataclass(frozen=True)
class WebConfig:
    """A validated web config file."""

    path: Path
    tls: TLSServerConfig | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    rate_limit: RateLimit | None = None

    def ssl_context(self) -> ssl.SSLContext | None:
        """The server TLS context (``None`` without ``tls_server_config``)."""
        return None if self.tls is None else _context(self.tls, self.path)

    def guard(self) -> Guard | None:
        """The request check for ``rlpulse.runtime.http.Server`` (rate limit, then basic auth)."""
        checks: list[Guard] = []
        if self.rate_limit is not None and self.rate_limit.interval > 0:
            checks.append(TokenBucket(self.rate_limit))
        if self.users:
            checks.append(BasicAuth(self.users))
        if not checks:
            return None
        if len(checks) == 1:
            return checks[0]

        def guard(request: Request) -> Response | None:
            for check in checks:
                refused = check(request)
                if refused is not None:
                    return refused
            return None

        return guard

    def server_options(self) -> dict[str, Any]:
        """Keyword arguments for ``rlpulse.runtime.http.Server``: ``tls``, ``guard`` and
        ``headers``."""
        return {"tls": self.ssl_context(), "guard": self.guard(), "headers": dict(self.headers)}


# ---- loading --------------------------------------------------------------------------------


def load(path: str | os.PathLike[str]) -> WebConfig:
    """Read and validate a web config file (an empty file: plain HTTP, no auth)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise WebConfigError(f"web config {p}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise WebConfigError(f"web config {p}: not UTF-8 text (byte {exc.start})") from None
    try:
        doc = safeyaml.load(text)
    except yaml.YAMLError as exc:
        raise WebConfigError(f"web config {p}: not valid YAML: {exc}") from None
    return parse(doc, p)


def parse(doc: Any, path: Path) -> WebConfig:
    """Validate an already parsed document; ``path`` names it in errors and anchors file names."""
    errors = _Errors(path)
    if doc is None:
        doc = {}
    top = errors.mapping(doc, "", _TOP_KEYS)
    cfg = WebConfig(
        path=path,
        tls=_tls(top["tls_server_config"], errors) if "tls_server_config" in top else None,
        users=_users(top.get("basic_auth_users"), errors),
        headers=_http(top.get("http_server_config"), errors),
        rate_limit=_rate_limit(top["rate_limit"], errors) if "rate_limit" in top else None,
    )
    if cfg.tls is not None:
        cfg.ssl_context()  # files that do not load are a config error now, not at the first scrape
    return cfg


class _Errors:
    """Raises ``WebConfigError`` naming the file and a dotted key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, why: str) -> WebConfigError:
        return WebConfigError(f"web config {self.path}: {key}: {why}")

    def mapping(self, value: Any, key: str, allowed: set[str] | frozenset[str]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key or "top level", f"must be a mapping, got {type(value).__name__}")
        for k in value:
            if not isinstance(k, str) or k not in allowed:
                where = f"{key}.{k}" if key else str(k)
                raise self.fail(
                    where, f"unknown key (expected one of {', '.join(sorted(allowed))})"
                )
        return value

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(key, "must be a non-empty string")
        return value

    def file(self, value: Any, key: str) -> Path:
        p = Path(self.string(value, key))
        p = p if p.is_absolute() else self.path.parent / p
        if not p.is_file():
            raise self.fail(key, f"no such file: {p}")
        return p

    def choice(self, value: Any, key: str, choices: Mapping[str, object]) -> str:
        if not isinstance(value, str) or value not in choices:
            raise self.fail(key, f"{value!r} is not one of {', '.join(choices)}")
        return str(value)


def _tls(raw: Any, errors: _Errors) -> TLSServerConfig:
    where = "tls_server_config"
    d = errors.mapping(raw, where, _TLS_KEYS)
    for key, why in _UNSUPPORTED.items():
        if key.rpartition(".")[2] in d:
            raise errors.fail(key, why)
    opts: dict[str, Any] = {}
    for name, inline in (("cert", "cert"), ("key", "key"), ("client_ca", "client_ca")):
        file_key = f"{name}_file"
        if d.get(file_key) is not None and d.get(inline) is not None:
            raise errors.fail(f"{where}.{inline}", f"set either {inline} or {file_key}, not both")
        if d.get(file_key) is not None:
            opts[file_key] = errors.file(d[file_key], f"{where}.{file_key}")
        elif d.get(inline) is not None:
            opts[inline] = errors.string(d[inline], f"{where}.{inline}")
    for name in ("cert", "key"):
        if name not in opts and f"{name}_file" not in opts:
            raise errors.fail(f"{where}.{name}_file", "missing (or the inline form)")
    auth = d.get("client_auth_type", "NoClientCert")
    if auth in UNVERIFIED_CLIENT_AUTH:
        raise errors.fail(
            f"{where}.client_auth_type",
            f"{auth} accepts unverified client certificates; use RequireAndVerifyClientCert",
        )
    opts["client_auth_type"] = errors.choice(auth, f"{where}.client_auth_type", CLIENT_AUTH)
    has_ca = "client_ca_file" in opts or "client_ca" in opts
    if CLIENT_AUTH[auth] != ssl.CERT_NONE and not has_ca:
        raise errors.fail(f"{where}.client_ca_file", f"required by client_auth_type {auth}")
    if CLIENT_AUTH[auth] == ssl.CERT_NONE and has_ca:
        raise errors.fail(
            f"{where}.client_auth_type", "a client CA is set but client certificates are not asked"
        )
    for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        opts[name] = errors.choice(d.get(name, default), f"{where}.{name}", TLS_VERSIONS)
    if TLS_VERSIONS[opts["min_version"]] > TLS_VERSIONS[opts["max_version"]]:
        raise errors.fail(f"{where}.min_version", "is above max_version")
    suites = d.get("cipher_suites") or []
    if not isinstance(suites, list):
        raise errors.fail(f"{where}.cipher_suites", "must be a list")
    for i, suite in enumerate(suites):
        errors.choice(suite, f"{where}.cipher_suites[{i}]", CIPHER_SUITES)
    opts["cipher_suites"] = tuple(suites)
    prefer = d.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise errors.fail(f"{where}.prefer_server_cipher_suites", "must be true or false")
    opts["prefer_server_cipher_suites"] = prefer
    return TLSServerConfig(**opts)


def _users(raw: Any, errors: _Errors) -> dict[str, bytes]:
    where = "basic_auth_users"
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise errors.fail(where, "must be a mapping of user name to bcrypt hash")
    users = {}
    for user, hashed in raw.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise errors.fail(f"{where}.{user!r}", "a user name is a non-empty string without ':'")
        if not isinstance(hashed, str) or not _BCRYPT.match(hashed):
            raise errors.fail(
                f"{where}.{user}",
                "not a bcrypt hash ($2a$/$2b$/$2y$, cost 04-31), e.g. from htpasswd -nBC 10",
            )
        users[user] = hashed.encode("ascii")
    return users


def _http(raw: Any, errors: _Errors) -> dict[str, str]:
    where = "http_server_config"
    d = errors.mapping(raw, where, {"http2", "headers"})
    if not isinstance(d.get("http2", True), bool):  # HTTP/1.1 is served either way
        raise errors.fail(f"{where}.http2", "must be true or false")
    headers = errors.mapping(d.get("headers"), f"{where}.headers", set(HEADERS))
    out = {}
    for name, value in headers.items():
        key = f"{where}.headers.{name}"
        if value is None or value == "":
            continue  # unset, as exporter-toolkit treats a blank value
        if not isinstance(value, str) or "\r" in value or "\n" in value:
            raise errors.fail(key, "must be a single-line string")
        if not value.isascii():  # HTTP sends header values as Latin-1 at best: refuse at load
            raise errors.fail(key, "must be ASCII text")
        allowed = HEADERS[name]
        if allowed is not None and value.lower() not in allowed:
            raise errors.fail(key, f"{value!r} is not one of {', '.join(allowed)}")
        out[name] = value
    return out


def go_duration(text: str) -> float:
    """Seconds in a Go duration (``1s``, ``500ms``, ``1m30s``, ``0``)."""
    if text == "0":
        return 0.0
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a duration (e.g. 1s, 500ms, 1m30s)")
    return sum(float(n) * _GO_UNITS[u] for n, u in parts)


def _rate_limit(raw: Any, errors: _Errors) -> RateLimit:
    where = "rate_limit"
    d = errors.mapping(raw, where, {"interval", "burst"})
    try:
        interval = go_duration(str(d.get("interval", "0")))
    except ValueError as exc:
        raise errors.fail(f"{where}.interval", str(exc)) from None
    burst = d.get("burst", 0)
    if not isinstance(burst, int) or isinstance(burst, bool) or burst < 0:
        raise errors.fail(f"{where}.burst", "must be a whole number ≥ 0")
    if interval > 0 and burst == 0:
        raise errors.fail(f"{where}.burst", "must be ≥ 1 when interval is set")
    return RateLimit(interval, burst)


# ---- TLS ------------------------------------------------------------------------------------


def _context(tls: TLSServerConfig, path: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[tls.min_version]
    ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    where = f"web config {path}: tls_server_config"
    try:
        if tls.cert_file is not None and tls.key_file is not None:
            ctx.load_cert_chain(tls.cert_file, tls.key_file)
        else:
            _load_inline_chain(ctx, tls)
    except (ssl.SSLError, OSError) as exc:
        raise WebConfigError(f"{where}: the certificate and key do not load: {exc}") from None
    ctx.verify_mode = CLIENT_AUTH[tls.client_auth_type]
    if ctx.verify_mode != ssl.CERT_NONE:
        try:
            if tls.client_ca_file is not None:
                ctx.load_verify_locations(cafile=str(tls.client_ca_file))
            else:
                ctx.load_verify_locations(cadata=tls.client_ca)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise WebConfigError(f"{where}.client_ca_file: does not load: {exc}") from None
    if tls.cipher_suites:
        try:
            ctx.set_ciphers(":".join(CIPHER_SUITES[s] for s in tls.cipher_suites))
        except ssl.SSLError as exc:
            raise WebConfigError(f"{where}.cipher_suites: {exc}") from None
    if tls.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    return ctx


def _load_inline_chain(ctx: ssl.SSLContext, tls: TLSServerConfig) -> None:
    """``ssl`` loads certificates only from files: write the inline PEM to a private temporary
    directory (mode 0700), load it, and delete it at once."""
    with tempdirs.temporary_dir("tls") as tmp:
        paths = []
        for name, text, given in (
            ("cert.pem", tls.cert, tls.cert_file),
            ("key.pem", tls.key, tls.key_file),
        ):
            if given is not None:
                paths.append(str(given))
                continue
            p = Path(tmp) / name
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(text or "")
            paths.append(str(p))
        ctx.load_cert_chain(paths[0], paths[1])


# ---- request checks -------------------------------------------------------------------------


def _unauthorized() -> Response:
    return Response(
        b"Unauthorized\n", status=401, headers={"WWW-Authenticate": f'Basic realm="{REALM}"'}
    )


def credentials(header: str | None) -> tuple[str, bytes] | None:
    """``(user, password)`` from an ``Authorization: Basic …`` header, or ``None``."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
        user, sep, password = raw.partition(b":")
        return (user.decode("utf-8"), password) if sep else None
    except (binascii.Error, UnicodeDecodeError):
        return None


class BasicAuth:
    """Checks basic-auth credentials against bcrypt hashes.

    A bcrypt check costs ~100 ms (cost 10), so a verified (user, password) is remembered — as a
    keyed hash, never the password — and Prometheus' next scrapes cost one HMAC. Wrong passwords
    and unknown users always pay the full bcrypt cost (an unknown user is checked against a dummy
    hash of the same cost, so timing does not tell which users exist); comparisons are constant
    time. A bcrypt check holds a core (and the GIL) for tens of ms, so the endpoint runs at most
    ``BCRYPT_RATE`` per second (burst ``BCRYPT_BURST``) and answers 429 past that, and both
    refusals come after ``FAILURE_DELAY``: a flood of wrong passwords cannot starve the trainer.
    Credentials found wrong are remembered too (``MAX_WRONG``): clients re-sending them spend
    no budget, so they cannot keep a scraper's first check waiting on 429s.
    """

    def __init__(self, users: Mapping[str, bytes]) -> None:
        self._budget = TokenBucket(RateLimit(1.0 / BCRYPT_RATE, BCRYPT_BURST))
        self._users = dict(users)
        self._key = secrets.token_bytes(32)
        self._verified: dict[str, bytes] = {}
        self._wrong: dict[bytes, None] = {}  # keyed hashes of credentials found wrong (bounded)
        cost = max(int(h[4:6]) for h in self._users.values()) if self._users else 10
        self._dummy = _bcrypt().hashpw(secrets.token_bytes(16), _bcrypt().gensalt(cost))

    def __call__(self, request: Request) -> Response | None:
        creds = credentials(request.headers.get("Authorization"))
        if creds is None:
            return _unauthorized()
        if self._remembered(*creds):
            return None
        if self._digest(*creds) in self._wrong:  # re-sent: refused again without a bcrypt check
            time.sleep(FAILURE_DELAY)
            return _unauthorized()
        refused = self._budget(request)
        if refused is None and self._verify(*creds):
            return None
        time.sleep(FAILURE_DELAY)  # a flood's threads wait here without the GIL
        return refused or _unauthorized()

    def check(self, user: str, password: bytes) -> bool:
        """Whether ``password`` is ``user``'s."""
        return self._remembered(user, password) or self._verify(user, password)

    def _digest(self, user: str, password: bytes) -> bytes:
        return hmac.new(self._key, user.encode() + b"\0" + password, hashlib.sha256).digest()

    def _remembered(self, user: str, password: bytes) -> bool:
        known = self._verified.get(user)
        return known is not None and hmac.compare_digest(known, self._digest(user, password))

    def _verify(self, user: str, password: bytes) -> bool:
        """The bcrypt check; a success is remembered."""
        digest = self._digest(user, password)
        hashed = self._users.get(user)
        ok = _checkpw(password, hashed if hashed is not None else self._dummy)
        if ok and hashed is not None:
            self._verified[user] = digest
            return True
        self._wrong[digest] = None
        if len(self._wrong) > MAX_WRONG:
            self._wrong.pop(next(iter(self._wrong)), None)
        return False


def _bcrypt() -> Any:
    try:
        import bcrypt
    except ImportError:
        raise WebConfigError(
            "basic_auth_users needs the bcrypt package (an rlpulse dependency): pip install bcrypt"
        ) from None
    return bcrypt


def _checkpw(password: bytes, hashed: bytes) -> bool:
    try:  # bcrypt reads 72 bytes; hashing tools (htpasswd, Go) truncate longer passwords too
        return bool(_bcrypt().checkpw(password[:72], hashed))
    except ValueError:
        return False


BCRYPT_RATE = 2.0  # bcrypt checks per second for credentials not yet verified
BCRYPT_BURST = 4
MAX_WRONG = 1024  # wrong credentials remembered (the oldest forgotten first)
FAILURE_DELAY = 0.5  # seconds before a wrong password (or one past the budget) is answered


class TokenBucket:
    """``rate_limit``: ``burst`` requests at once, refilled one per ``interval``; else 429."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = limit
        self._clock = clock
        self._tokens = float(limit.burst)
        self._stamp = clock()
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Response | None:
        with self._lock:
            now = self._clock()
            refill = (now - self._stamp) / self._limit.interval
            self._tokens = min(float(self._limit.burst), self._tokens + refill)
            self._stamp = now
            if self._tokens >= 1:
                self._tokens -= 1
                return None
        return Response(b"Too Many Requests\n", status=429, headers={"Retry-After": "1"})
