"""Break-test regressions (issue 16, items 5 and 12): a wrong-password flood runs a bounded
number of bcrypt checks, and a web config that could only fail later is refused at load."""

from __future__ import annotations

import base64
import threading
from email.message import Message
from pathlib import Path

import pytest

from rlpulse.runtime import webconfig
from rlpulse.runtime.http import Request
from rlpulse.runtime.webconfig import BCRYPT_BURST, BasicAuth, WebConfigError
from tests.conftest import bcrypt_hash

CLIENTS, ATTEMPTS = 8, 10


def _request(user: str, password: str) -> Request:
    headers = Message()
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    headers["Authorization"] = f"Basic {token}"
    return Request("GET", "/metrics", {}, headers, ("127.0.0.1", 1))


def test_a_wrong_password_flood_runs_a_bounded_number_of_bcrypt_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(webconfig, "FAILURE_DELAY", 0.0)
    checks = []
    real = webconfig._checkpw

    def counted(password: bytes, hashed: bytes) -> bool:
        checks.append(password)
        return real(password, hashed)

    monkeypatch.setattr(webconfig, "_checkpw", counted)
    auth = BasicAuth({"prom": bcrypt_hash("right", cost=4).encode()})
    statuses: list[int] = []

    def flood() -> None:
        for _ in range(ATTEMPTS):
            refused = auth(_request("prom", "wrong"))
            statuses.append(0 if refused is None else refused.status)

    threads = [threading.Thread(target=flood) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(
        f"\n{CLIENTS * ATTEMPTS} wrong passwords: {len(checks)} bcrypt checks, "
        f"{statuses.count(429)} answered 429, {statuses.count(401)} 401"
    )
    assert 0 not in statuses
    assert len(checks) <= BCRYPT_BURST + 2  # the bucket refills 2/s; the flood takes well under 1 s
    # past the budget 429; a wrong password already checked is refused (401) without a check
    assert statuses.count(429) + statuses.count(401) == CLIENTS * ATTEMPTS


def test_verified_credentials_pass_while_the_budget_is_spent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(webconfig, "FAILURE_DELAY", 0.0)
    auth = BasicAuth({"prom": bcrypt_hash("right", cost=4).encode()})
    assert auth(_request("prom", "right")) is None  # verified once, then remembered
    for _ in range(3 * BCRYPT_BURST):
        auth(_request("prom", "wrong"))
    assert auth(_request("prom", "wrong")) is not None
    assert auth(_request("prom", "right")) is None


def test_a_header_value_outside_ascii_is_refused_at_load(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text(
        "http_server_config:\n  headers:\n    Content-Security-Policy: \"default-src '→'\"\n"
    )
    with pytest.raises(WebConfigError, match=r"web config .*web.yml: .*Content-Security-Policy"):
        webconfig.load(web)


def test_a_web_config_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_bytes(b"basic_auth_users:\n  prom: \xff\xfe\n")
    with pytest.raises(WebConfigError, match=r"web config .*web.yml: not UTF-8"):
        webconfig.load(web)
