"""Reading a run's own alerts from Alertmanager's API v2, outbound (no port is opened).

What comes back is the decision that pages: past Prometheus' ``for``, routed, and neither
silenced nor inhibited by Alertmanager (``active=true&silenced=false&inhibited=false``). An
inhibited alert is the consequence of a cause alert on the same run that is itself firing; the
cause decides (its action, its onset), and a silence on the cause quiets its consequences too,
as it does for the page. The options are those of rlpulse's other outbound HTTP (Prometheus'
``basic_auth`` / ``authorization`` / ``tls_config`` fields): secrets only in files.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import http.client
import json
import logging
import math
import os
import re
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

ENV_PREFIX = "RLPULSE_ALERTMANAGER_"  # RLPULSE_ALERTMANAGER_URL, ..._PASSWORD_FILE, ...
MAX_ANSWER_BYTES = 4 << 20  # one run's alerts: a larger answer is refused, not read

log = logging.getLogger("rlpulse")


class AlertmanagerError(Exception):
    """A read that failed; ``reason`` is the label it is counted under."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True)
class Firing:
    """One active, unsilenced, uninhibited alert of the run."""

    name: str
    severity: str
    labels: Mapping[str, str]
    starts_at: float  # Unix time Alertmanager says it began
    fingerprint: str


@dataclass(frozen=True)
class Alertmanager:
    """Where a run reads its alerts, and how it authenticates."""

    url: str
    username: str = ""
    password_file: str = ""
    bearer_token_file: str = ""
    ca_file: str = ""  # CA that signed Alertmanager's certificate (https; empty: system CAs)
    cert_file: str = ""  # client certificate (mutual TLS)
    key_file: str = ""
    timeout: float = 5.0

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.url)
        if "@" in parts.netloc:
            raise ValueError(
                "rlpulse: the Alertmanager url may not hold credentials (user:password@): give "
                "username and password_file (RLPULSE_ALERTMANAGER_USERNAME, "
                "RLPULSE_ALERTMANAGER_PASSWORD_FILE) instead"
            )
        scheme = parts.scheme
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"rlpulse: Alertmanager url must be http(s)://host..., not {self.url!r}"
            )
        if bool(self.username) != bool(self.password_file):
            raise ValueError("rlpulse: Alertmanager username and password_file go together")
        if self.username and self.bearer_token_file:
            raise ValueError(
                "rlpulse: Alertmanager basic auth and bearer_token_file exclude each other"
            )
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("rlpulse: Alertmanager cert_file and key_file go together")
        if scheme == "http" and (self.ca_file or self.cert_file):
            raise ValueError("rlpulse: Alertmanager TLS options need an https:// url")
        if not self.timeout > 0:
            raise ValueError(f"rlpulse: Alertmanager timeout must be > 0, not {self.timeout}")

    @classmethod
    def of(cls, spec: Alertmanager | str | Mapping[str, Any]) -> Alertmanager:
        """From a URL, a mapping of these fields, or itself."""
        if isinstance(spec, Alertmanager):
            return spec
        if isinstance(spec, str):
            return cls(spec)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(spec) - known)
        if unknown:
            raise ValueError(
                f"rlpulse: unknown Alertmanager option(s) {unknown}; known: {sorted(known)}"
            )
        return cls(**spec)

    @classmethod
    def from_env(cls) -> Alertmanager | None:
        """``RLPULSE_ALERTMANAGER_URL`` and its options from the environment (None: unset)."""
        url = os.environ.get(ENV_PREFIX + "URL")
        if not url:
            return None
        opts: dict[str, Any] = {"url": url}
        for f in fields(cls):
            raw = os.environ.get(ENV_PREFIX + f.name.upper())
            if f.name != "url" and raw:
                opts[f.name] = float(raw) if f.name == "timeout" else raw
        return cls(**opts)

    def alerts(self, run_id: str) -> list[Firing]:
        """The run's alerts that would page now; raises ``AlertmanagerError``."""
        query = urllib.parse.urlencode(
            {
                "active": "true",
                "silenced": "false",
                "inhibited": "false",
                "unprocessed": "false",
                "filter": f'run_id="{_escape(run_id)}"',
            }
        )
        body = self._get(
            f"{urllib.parse.urlsplit(self.url).path.rstrip('/')}/api/v2/alerts?{query}"
        )
        if len(body) > MAX_ANSWER_BYTES:
            raise AlertmanagerError(
                "bad_answer", f"{self.url}: answer over {MAX_ANSWER_BYTES} bytes"
            )
        try:
            return [_firing(a) for a in json.loads(body)]
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise AlertmanagerError(
                "bad_answer", f"{self.url}: not an API v2 alert list ({exc})"
            ) from None

    def _get(self, path: str) -> bytes:
        """One GET with ``timeout`` seconds in total (connect, answer and body: a trickled answer
        is cut), redirects not followed (credentials never reach another origin)."""
        parts = urllib.parse.urlsplit(self.url)
        host, port = parts.hostname or "", parts.port
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(
                host, port, timeout=self.timeout, context=self._tls()
            )
        else:
            conn = http.client.HTTPConnection(host, port, timeout=self.timeout)
        headers = self._headers()
        cut = threading.Event()
        late = threading.Timer(self.timeout, _cut, (conn, cut))
        late.daemon = True
        late.start()
        try:
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            if resp.status != 200:
                moved = " (a redirect: not followed)" if 300 <= resp.status < 400 else ""
                raise AlertmanagerError(
                    f"http_{resp.status}", f"{self.url} answered {resp.status}{moved}"
                )
            body = resp.read(MAX_ANSWER_BYTES + 1)
            if cut.is_set():  # what was read is a part
                raise TimeoutError("cut")
            return body
        except (OSError, ssl.SSLError, http.client.HTTPException) as exc:
            detail = f"no full answer within {self.timeout:g} s" if cut.is_set() else str(exc)
            raise AlertmanagerError("unreachable", f"{self.url}: {detail}") from None
        finally:
            late.cancel()
            conn.close()

    def _headers(self) -> dict[str, str]:
        try:
            if self.username:
                password = _secret(self.password_file)
                token = base64.b64encode(f"{self.username}:{password}".encode()).decode()
                return {"Authorization": f"Basic {token}"}
            if self.bearer_token_file:
                return {"Authorization": f"Bearer {_secret(self.bearer_token_file)}"}
        except OSError as exc:
            raise AlertmanagerError(
                "credentials", f"cannot read a credentials file: {exc}"
            ) from None
        return {}

    def _tls(self) -> ssl.SSLContext | None:
        if not self.url.startswith("https"):
            return None
        try:
            ctx = ssl.create_default_context(cafile=self.ca_file or None)
            if self.cert_file:
                ctx.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise AlertmanagerError("credentials", f"cannot load the TLS files: {exc}") from None
        return ctx


def _cut(conn: http.client.HTTPConnection, cut: threading.Event) -> None:
    """Abort a request past its deadline (from the timer's thread)."""
    cut.set()
    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _secret(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read().strip()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)")


def _epoch(text: str) -> float:
    m = _RFC3339.fullmatch(text)
    if m is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    zone = "+00:00" if m[3] == "Z" else m[3]
    stamp = datetime.datetime.fromisoformat(m[1] + zone).timestamp()
    return stamp + (float(f"0.{m[2][:6]}") if m[2] else 0.0)


def _firing(alert: Mapping[str, Any]) -> Firing:
    labels = {str(k): str(v) for k, v in alert["labels"].items()}
    return Firing(
        labels.get("alertname", ""),
        labels.get("severity", ""),
        labels,
        _epoch(alert["startsAt"]),
        str(alert.get("fingerprint", "")),
    )


class Poller:
    """A daemon thread reading ``source`` every ``interval`` seconds for ``run_id`` and handing
    each answer to ``seen`` (each failure to ``failed``); nothing it does reaches the trainer."""

    def __init__(
        self,
        source: Alertmanager,
        run_id: str,
        interval: float,
        seen: Callable[[list[Firing]], None],
        failed: Callable[[AlertmanagerError], None],
    ) -> None:
        self.check(interval)
        self.source, self.run_id, self.interval = source, run_id, interval
        self._seen, self._failed = seen, failed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlpulse-alerts", daemon=True)

    @staticmethod
    def check(interval: float) -> None:
        """``ValueError`` unless ``interval`` is a usable number of seconds."""
        if not (interval > 0 and math.isfinite(interval)):
            raise ValueError(f"rlpulse: the alert poll interval must be > 0 s, not {interval}")

    def start(self) -> Poller:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop polling (a read in flight ends within the source's timeout, unwaited)."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def poll(self) -> None:
        """One read, its answer or failure handed on; never raises."""
        try:
            alerts = self.source.alerts(self.run_id)
        except AlertmanagerError as exc:
            self._call(self._failed, exc)
            return
        except Exception as exc:  # a bug here must not end the thread silently
            self._call(self._failed, AlertmanagerError("bad_answer", repr(exc)))
            return
        self._call(self._seen, alerts)

    @staticmethod
    def _call(hook: Callable[[Any], None], arg: Any) -> None:
        try:
            hook(arg)
        except Exception:
            log.warning("rlpulse: acting on Alertmanager's answer failed", exc_info=True)
