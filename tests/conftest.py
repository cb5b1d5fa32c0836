"""Shared test helpers: scraping an exporter over real HTTP and parsing the exposition."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from prometheus_client.parser import text_string_to_metric_families

from rlpulse.offline.logs import read_log
from rlpulse.offline.replay.timeline import Timeline, build
from rlpulse.runtime.exporter import Exporter

# Property tests draw the same examples on every run (CI, a fresh clone): a submission never
# fails at random. HYPOTHESIS_PROFILE=explore draws new ones and is kept out of CI.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Exporters register for Prometheus only where a test asks (tests/*/test_discovery*.py): the
# machine's own discovery directory is never touched, and no test's run waits for a scraper
# another test's stack would bring.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="rlpulse-test-state-")
os.environ["RLPULSE_TARGETS_DIR"] = "off"


TIERS = ("unit", "stack", "e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test carries its folder's marker: ``-m "unit or stack"`` is the fast tier."""
    for item in items:
        tier = item.path.parent.name
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))


def scrape(url: str, accept: str | None = None) -> str:
    """GET ``url`` and return the body as text."""
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read().decode()


def scrape_as_prometheus(url: str) -> str:
    """GET ``url`` with the header Prometheus sends on every scrape."""
    req = urllib.request.Request(url, headers={"X-Prometheus-Scrape-Timeout-Seconds": "10"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read().decode()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """{(sample name, labels): value} of a text-format scrape."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(text: str, name: str, /, **labels: str) -> float:
    """The one sample called ``name`` whose labels include ``labels``."""
    hits = [
        v
        for (n, lbls), v in samples(text).items()
        if n == name and set(labels.items()) <= set(lbls)
    ]
    assert len(hits) == 1, f"{name}{labels}: {len(hits)} samples"
    return hits[0]


def replay_jsonl(path: Path, rows: list[dict[str, Any]]) -> Timeline:
    """``rows`` written to ``path`` as JSONL and replayed as a TRL run (a minute a step, scraped
    every 15 s): the series Prometheus would have stored."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return build(
        read_log(path),
        run_id="run",
        framework="trl",
        job="rlpulse",
        scrape_interval=15.0,
        step_seconds=60.0,
    )


def promtool_check_metrics(text: str) -> subprocess.CompletedProcess[str]:
    """Run the real ``promtool check metrics`` on a scrape."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool is required (apt-get install prometheus)"
    return subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )


def self_signed(folder: Path) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 and its key, made by the real openssl."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


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


def fork_child_exits_0(before: str, child: str, timeout: float = 60) -> None:
    """Run ``before`` in a fresh interpreter, fork, run ``child`` in the child (it ends with
    ``os._exit(code)``) and assert the child exited 0."""
    code = "\n".join(
        [
            "import os",
            textwrap.dedent(before),
            "pid = os.fork()",
            "if pid == 0:",
            textwrap.indent(textwrap.dedent(child), "    "),
            "_, status = os.waitpid(pid, 0)",
            'print("child", os.waitstatus_to_exitcode(status))',
        ]
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, check=True
    )
    assert "child 0" in out.stdout, out.stderr


def quiet_exporter(run_id: str, **options: Any) -> Exporter:
    """An exporter on a free port without hardware collectors (GPU, host), not started."""
    return Exporter(port=0, run_id=run_id, gpu=False, host=False, **options)


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    """A started exporter on a free port, without hardware collectors."""
    exp = quiet_exporter("test-run").start()
    yield exp
    exp.close()
