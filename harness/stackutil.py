"""Helpers shared by the tests that run the real Prometheus and Alertmanager on 127.0.0.1.

``Sink`` stands in for PagerDuty (Events API v2) or Slack: a real HTTP server that records every
JSON body POSTed to it. ``server`` runs a binary until its readiness URL answers; ``api`` and
``query`` talk to their HTTP APIs. Run as ``python -m harness.stackutil demo ARGS...``, it runs
``rlpulse demo ARGS`` with the fake NVML installed at the ``pynvml`` import, so the GPU series
exist on a machine without a GPU.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import promql_parser
import yaml

from rlpulse.offline.stackrun import ready

T = TypeVar("T")


def interruptible() -> None:
    """In a child process: Ctrl-C (SIGINT) raises KeyboardInterrupt even when this process was
    started in the background, where the shell ignores SIGINT and children inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that a socket listens on until the ``with`` ends."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


RLPULSE = str(Path(sys.executable).with_name("rlpulse"))  # the installed CLI


def rlpulse(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed ``rlpulse`` CLI (extra ``env`` on top of this process's)."""
    return subprocess.run(
        [RLPULSE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def api(url: str, data: Any = None, timeout: float = 10) -> Any:
    """GET (or POST ``data`` as JSON to) ``url``; the decoded JSON reply (None when empty)."""
    body = None if data is None else json.dumps(data).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        text = resp.read().decode()
    return json.loads(text) if text else None


def query(base: str, expr: str, at: float | None = None) -> dict[str, Any]:
    """A Prometheus instant query (at time ``at`` if given); the whole reply, also when
    Prometheus refuses the expression (status "error")."""
    params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
    try:
        return dict(api(f"{base}/api/v1/query?{urlencode(params)}"))
    except urllib.error.HTTPError as exc:  # 400/422: a refused expression
        try:
            return dict(json.loads(exc.read()))
        except ValueError:  # 503 while starting up: an OSError, "not yet" to wait_for
            raise exc from None


def results(base: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    """The result vector of an instant query that must succeed."""
    body = query(base, expr, at)
    assert body["status"] == "success", (expr, body)
    out: list[dict[str, Any]] = body["data"]["result"]
    return out


def metric_names(expr: str) -> set[str]:
    """Every metric a PromQL expression (Grafana variables expanded) selects, by name or by a
    ``__name__`` matcher."""
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            names.update(m.value for m in node.matchers.matchers if m.name == "__name__")

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def fixed_selectors(expr: str) -> set[str]:
    """Each series selector of a PromQL expression (Grafana variables expanded) reduced to its
    name and its fixed ``label="value"`` matchers: the series a run must export to feed it."""
    out: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            fixed = sorted(
                f'{m.name}="{m.value}"'
                for m in node.matchers.matchers
                if m.op == promql_parser.MatchOp.Equal and m.name != "__name__"
            )
            out.add(f"{node.name}{{{','.join(fixed)}}}")

    promql_parser.walk(promql_parser.parse(expr), visit)
    return out


def feeds(base: str, expr: str, at: float | None = None, **labels: str) -> bool:
    """Whether the series every selector of ``expr`` reads (its fixed matchers, plus
    ``labels``) exist in the Prometheus-compatible store at ``base``."""
    extra = [f'{k}="{v}"' for k, v in labels.items()]
    for sel in fixed_selectors(expr):
        name, _, inner = sel.partition("{")
        matchers = ",".join([m for m in [inner.rstrip("}")] if m] + extra)
        if not results(base, f"count({name}{{{matchers}}})", at):
            return False
    return True


def wait_for(probe: Callable[[], T | None], timeout: float, what: str, every: float = 0.25) -> T:
    """Poll ``probe`` until it returns something truthy; AssertionError naming ``what`` after
    ``timeout`` seconds. Connection errors count as "not yet"."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = probe()
        except OSError:
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def wait_for_data(base: str, expr: str, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Wait until ``expr`` returns a non-empty vector from the Prometheus at ``base``."""
    return wait_for(lambda: results(base, expr), timeout, f"data for {expr}", every=0.5)


@contextlib.contextmanager
def server(argv: Sequence[str], ready_url: str, timeout: float = 30) -> Iterator[Path]:
    """Run ``argv`` until the ``with`` ends; entered once ``ready_url`` answers 200. Yields the
    file its stdout and stderr go to (a file, not a pipe: a chatty server never blocks on a full
    pipe; its tail is in the AssertionError when it exits before getting ready)."""
    with tempfile.TemporaryDirectory(prefix="rlpulse-server-") as tmp:
        log_path = Path(tmp) / f"{Path(argv[0]).name}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout
            while not ready(ready_url):
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    err = log_path.read_text(errors="replace")
                    raise AssertionError(f"{argv[0]} did not get ready: {err[-3000:]}")
                time.sleep(0.1)
            yield log_path
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def prometheus(workdir: Path, config: dict[str, Any], flags: Sequence[str] = ()) -> Iterator[str]:
    """A real Prometheus running ``config`` (prometheus.yml as data) with extra command-line
    ``flags``; yields its base URL. Its log is copied to ``workdir / "prometheus.log"`` as the
    ``with`` ends."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is required (apt-get install prometheus)"
    path = workdir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    url = f"http://127.0.0.1:{free_port()}"
    argv = [
        binary,
        f"--config.file={path}",
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address={url.removeprefix('http://')}",
        *flags,
    ]
    with server(argv, f"{url}/-/ready") as log:
        try:
            yield url
        finally:
            shutil.copyfile(log, workdir / "prometheus.log")


def promtool() -> str:
    """The ``promtool`` binary (the Debian package ``prometheus``); the test fails without it."""
    path = shutil.which("promtool")
    assert path, "promtool (Debian package prometheus) is required"
    return path


def promtool_test_rules(folder: Path, names: list[str]) -> None:
    """``promtool test rules`` of each of ``names`` (relative to ``folder``), all at once (each
    takes seconds); fails naming the file and promtool's report."""
    procs = {
        name: subprocess.Popen(
            [promtool(), "test", "rules", name],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name in names
    }
    for name, proc in procs.items():
        text, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0 and "SUCCESS" in text, f"{name}:\n{text[-3000:]}"


@contextlib.contextmanager
def victoria_metrics(workdir: Path) -> Iterator[str]:
    """A real single-node VictoriaMetrics on a free port; yields its base URL (remote-write
    endpoint ``/api/v1/write``, Prometheus query API ``/api/v1/query``)."""
    binary = shutil.which("victoria-metrics")
    assert binary, "victoria-metrics is required (apt-get install victoria-metrics)"
    url = f"http://127.0.0.1:{free_port()}"
    argv = [
        binary,
        f"-storageDataPath={workdir}",
        f"-httpListenAddr={url.removeprefix('http://')}",
        "-search.latencyOffset=0s",  # answer with the newest samples (default: 30s behind)
        "-search.disableCache",
    ]
    with server(argv, f"{url}/health"):
        yield url


@dataclass(frozen=True)
class Received:
    """One request a ``Sink`` received."""

    time: float  # time.time() on arrival
    path: str
    body: dict[str, Any]


class Sink(ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1 that records every JSON body POSTed to it and answers like
    PagerDuty's Events API v2 (202)."""

    daemon_threads = True

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n))
                with sink._lock:
                    sink.received.append(Received(time.time(), self.path, body))
                self.send_response(202)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"status":"success","message":"Event processed"}')

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """Every JSON body so far, oldest first."""
        with self._lock:
            return [r.body for r in self.received]

    def wait(self, n: int, timeout: float = 20) -> list[dict[str, Any]]:
        """The bodies, once there are ``n`` of them (or ``timeout`` passed)."""
        deadline = time.monotonic() + timeout
        while len(self.bodies) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.bodies

    def events(self, **details: str) -> list[Received]:
        """The PagerDuty events whose ``payload.custom_details`` include ``details``."""
        with self._lock:
            got = list(self.received)
        return [
            r
            for r in got
            if details.items() <= r.body.get("payload", {}).get("custom_details", {}).items()
        ]


# ---- the demo with the fake NVML, in its own process --------------------------------------------


def demo_argv(*args: str) -> list[str]:
    """The command line running ``rlpulse demo ARGS`` with the fake NVML installed."""
    return [sys.executable, "-m", "harness.stackutil", "demo", *args]


def _demo_with_fake_nvml(args: Sequence[str]) -> int:
    from harness.fake_nvml import FakeGpu, FakeNvml
    from rlpulse.cli import main

    gpu = FakeGpu(util=85, mem_util=40, mem_used=30 << 30, temp_c=61, throttle=0x4)
    gpu.processes.append((os.getpid(), 12 << 30))
    sys.modules["pynvml"] = FakeNvml([gpu])  # type: ignore[assignment]
    return main(["demo", *args])


ROOT = Path(__file__).resolve().parent.parent

if __name__ == "__main__":
    if sys.argv[1:2] != ["demo"]:
        sys.exit("usage: python -m harness.stackutil demo [rlpulse demo arguments]")
    sys.exit(_demo_with_fake_nvml(sys.argv[2:]))
