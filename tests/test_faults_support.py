"""Helpers for the security, hostile-input and fault tests: real Prometheus and Alertmanager
processes that can be stopped and restarted on the same port and data directory, a throwaway
PKI, and polling. (No tests here; the Alertmanager stand-ins come from test_stack_alertmanager.)
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from rlpulse.stack import config as stack_config
from tests.test_stack_alertmanager import _write as write_alertmanager_config

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(probe: Callable[[], T | None], timeout: float = 30.0, every: float = 0.2) -> T:
    """The first truthy ``probe()`` result; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            got = probe()
        except OSError as exc:  # the process is not listening (yet)
            last, got = exc, None
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"gave up after {timeout}s (last error: {last})")


def get_json(url: str, data: Any = None) -> Any:
    body = None if data is None else json.dumps(data).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read().decode()
    return json.loads(text) if text else None


class Process:
    """A real server binary on a fixed 127.0.0.1 port; ``stop``/``start`` keep port and data."""

    binary_names: tuple[str, ...] = ()
    ready_path = "/-/ready"

    def __init__(self, workdir: Path) -> None:
        binary = next(filter(None, map(shutil.which, self.binary_names)), None)
        assert binary, f"{self.binary_names[0]} is required (Debian package)"
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"{self.binary_names[0]}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def args(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> Process:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, *self.args()], stdout=log, stderr=subprocess.STDOUT
            )
        wait_for(self._ready, timeout=30)
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.binary} exited:\n{self.log.read_text()[-3000:]}")
        with urllib.request.urlopen(self.url + self.ready_path, timeout=2) as resp:
            return resp.status == 200

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
        self.proc = None


class Prometheus(Process):
    """``prometheus`` with a given prometheus.yml (as data) and flags."""

    binary_names = ("prometheus",)

    def __init__(self, workdir: Path, config: dict[str, Any], flags: Sequence[str] = ()) -> None:
        super().__init__(workdir)
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.flags = list(flags)

    def args(self) -> list[str]:
        return [
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            *self.flags,
        ]

    def api(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode(params)
        return get_json(f"{self.url}/api/v1/{path}?{query}")["data"]

    def query(self, promql: str, **params: Any) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=promql, **params)["result"]
        return result

    def targets(self) -> list[dict[str, Any]]:
        active: list[dict[str, Any]] = self.api("targets")["activeTargets"]
        return active


class Alertmanager(Process):
    """``prometheus-alertmanager`` running the generated config for ``cfg``."""

    binary_names = ("prometheus-alertmanager", "alertmanager")

    def __init__(self, workdir: Path, cfg: stack_config.Config) -> None:
        super().__init__(workdir)
        self.config_path = write_alertmanager_config(workdir, cfg)

    def args(self) -> list[str]:
        return [
            f"--config.file={self.config_path}",
            f"--storage.path={self.workdir / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",
        ]


@dataclass(frozen=True)
class Pki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(d: Path) -> Pki:
    """Certificates signed by a throwaway CA (EC P-256: fast to make)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req", "-x509", *ec, "-days", "1", "-subj", "/CN=rlpulse test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"),
    )  # fmt: skip
    for name, ext in (
        ("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ):
        (d / f"{name}.ext").write_text(ext)
        _openssl(
            "req", *ec, "-subj", f"/CN=rlpulse test {name}",
            "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"),
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", str(d / f"{name}.csr"), "-days", "1",
            "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"), "-CAcreateserial",
            "-extfile", str(d / f"{name}.ext"), "-out", str(d / f"{name}.crt"),
        )  # fmt: skip
    return Pki(d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt", d / "client.key")


def bcrypt_hash(password: str, cost: int = 10) -> str:
    import bcrypt

    return str(bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode())
