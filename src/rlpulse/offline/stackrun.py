"""The generated stack run locally from the installed binaries (``rlpulse stack up|down|status``).

``up`` writes the generated Prometheus, Alertmanager and Grafana files into a directory, points
the receivers at local things (a placeholder PagerDuty routing key file written there, and an
*inbox*: a small HTTP server, also started in the background, that stands in for PagerDuty and
the warning webhook and appends every notification to ``inbox.jsonl``), then starts
``prometheus`` and ``prometheus-alertmanager`` (or ``alertmanager``) in the background with their
data and logs in the directory, and the rollout viewer (``rlpulse rollouts serve``) over the
rollout data directory, which the pages' and panels' rollout links open, and
``prometheus-pushgateway`` when installed, and waits until each answers ``/-/ready``. Pid files
in the directory let ``down`` stop exactly those processes; both commands are idempotent.

Prometheus watches the discovery directory (``rlpulse.runtime.discovery``): ``up`` notes there that
it does (so every trainer on this machine registers itself) and removes the targets of processes
that died while no stack ran; the inbox process sweeps dead processes' targets once they have
paged for ``discovery.DEAD_KEEP``; ``down`` removes the note and every dead process's target.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rlpulse.rollouts.paths import default_data_dir
from rlpulse.rollouts.server import VIEWER_PORT, VIEWER_URL
from rlpulse.runtime import discovery
from rlpulse.stack import config, generate
from rlpulse.stack.config import Config
from rlpulse.stack.knobs import seconds

DEFAULT_DIR = Path(".rlpulse/stack")
DIR_ENV = "RLPULSE_STACK_DIR"
INSTALL = "apt-get install -y prometheus prometheus-alertmanager"
SWEEP_EVERY = 30.0  # seconds between the inbox process's sweeps of dead processes' targets
PLACEHOLDER_KEY = "rlpulse-local-placeholder-routing-key\n"
GENERATED = ("prometheus/", "alertmanager/", "grafana/")
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
INBOX_FILE = "inbox.jsonl"
HEARTBEAT_PATH = "/heartbeat"  # where the inbox's checker takes the Watchdog's posts
MISSING = "RLWatchdogMissing"  # what the checker pages when the heartbeats stop
STARTUP_S = 150.0  # the checker's first page comes no sooner after the stack starts
REDACTED = "<redacted>"


class MissingBinary(FileNotFoundError):
    """A server binary is not installed; the message says how to install it."""


@dataclass(frozen=True)
class StackOptions:
    """What ``rlpulse stack up`` was asked for."""

    dir: Path = DEFAULT_DIR
    fast: bool = False
    config: Path | None = None
    pagerduty_url: str | None = None
    pagerduty_key_file: Path | None = None
    prometheus_port: int = 9090
    alertmanager_port: int = 9093
    inbox_port: int = 9095
    rollouts_port: int = VIEWER_PORT
    pushgateway_port: int = 9091
    targets_dir: Path = dataclasses.field(default_factory=discovery.default_dir)
    data_dir: Path | None = None  # the rollout stores the viewer reads (None: the default)


@dataclass(frozen=True)
class Service:
    """One background process of the stack."""

    name: str
    port: int
    argv: tuple[str, ...]
    ready_path: str

    @property
    def url(self) -> str:
        """Its base URL."""
        return f"http://127.0.0.1:{self.port}"


def find_binary(*names: str, env: str) -> str:
    """The path of the first of ``names`` on PATH (or of ``$env`` when set); MissingBinary else."""
    override = os.environ.get(env)
    for name in (override,) if override else names:
        path = shutil.which(name)
        if path:
            return path
    wanted = override or " or ".join(names)
    raise MissingBinary(f"{wanted} not found (on PATH or ${env}); install it with: {INSTALL}")


def stack_config(opts: StackOptions) -> Config:
    """The generator config for a local stack: the user's (``--config``, ``--fast``) with the
    receivers pointed at local files and the inbox, and Prometheus alerting this Alertmanager."""
    cfg = config.load(opts.config) if opts.config else Config()
    if opts.fast:
        cfg = config.fast(cfg)
    inbox = f"http://127.0.0.1:{opts.inbox_port}"
    key_file = opts.pagerduty_key_file or opts.dir / "secrets" / "pagerduty_routing_key"
    r = cfg.receivers
    receivers = dataclasses.replace(
        r,
        pagerduty=dataclasses.replace(
            r.pagerduty,
            url=opts.pagerduty_url or f"{inbox}/pagerduty",
            routing_key_file=str(key_file.resolve()),
        ),
        warning="webhook",
        info="none" if r.info == "none" else "webhook",
        webhook=dataclasses.replace(r.webhook, url=f"{inbox}/webhook"),
    )
    pushgateways = (f"127.0.0.1:{opts.pushgateway_port}",) if _pushgateway(opts) else ()
    scrape = dataclasses.replace(
        cfg.scrape,
        alertmanagers=(f"127.0.0.1:{opts.alertmanager_port}",),
        file_sd=(*cfg.scrape.file_sd, str(opts.targets_dir.resolve() / "*.json")),
        pushgateways=(*cfg.scrape.pushgateways, *pushgateways),
    )
    links = dataclasses.replace(  # Prometheus scrapes itself there; silence links open there
        cfg.links,
        prometheus_url=f"http://127.0.0.1:{opts.prometheus_port}",
        alertmanager_url=f"http://127.0.0.1:{opts.alertmanager_port}",
        rollouts_url=f"http://127.0.0.1:{opts.rollouts_port}"  # unless the config names one
        if cfg.links.rollouts_url == VIEWER_URL
        else cfg.links.rollouts_url,
    )
    # the Watchdog's heartbeats go to the inbox's checker unless the config names a service
    watchdog = cfg.watchdog
    if not watchdog.heartbeat_url:
        watchdog = dataclasses.replace(watchdog, heartbeat_url=f"{inbox}{HEARTBEAT_PATH}")
    return dataclasses.replace(
        cfg, receivers=receivers, scrape=scrape, links=links, watchdog=watchdog
    )


def write_files(opts: StackOptions, cfg: Config) -> None:
    """The generated Prometheus/Alertmanager/Grafana files and, when no key file is given, a
    placeholder routing key, under ``opts.dir``."""
    files = {p: t for p, t in generate.render(cfg).items() if p.startswith(GENERATED)}
    generate.write(files, opts.dir)
    (opts.dir / "prometheus" / "targets").mkdir(exist_ok=True)
    opts.targets_dir.mkdir(parents=True, exist_ok=True)  # watched from Prometheus' start
    if opts.pagerduty_key_file is None:
        key = opts.dir / "secrets" / "pagerduty_routing_key"
        key.parent.mkdir(mode=0o700, exist_ok=True)
        if not key.exists():
            key.write_text(PLACEHOLDER_KEY)
            key.chmod(0o600)
    elif not opts.pagerduty_key_file.is_file():
        raise FileNotFoundError(f"--pagerduty-key-file {opts.pagerduty_key_file}: no such file")


def placeholder_key_warning(opts: StackOptions) -> str:
    """A loud warning when the PagerDuty routing key is still the placeholder, or ""."""
    key = opts.pagerduty_key_file or opts.dir / "secrets" / "pagerduty_routing_key"
    try:
        placeholder = key.read_text().strip() == PLACEHOLDER_KEY.strip()
    except OSError:
        return ""
    if not placeholder:
        return ""
    where = (
        f"PagerDuty at {opts.pagerduty_url} will reject every page"
        if opts.pagerduty_url
        else "critical alerts reach only the local inbox, nobody is paged"
    )
    return (
        f"WARNING: the PagerDuty routing key in {key} is the placeholder: {where}. "
        "Put your Events API v2 routing key in that file or pass --pagerduty-key-file."
    )


def _checker_args(opts: StackOptions, d: Path) -> tuple[str, ...]:
    """The heartbeat checker's arguments: how long without a Watchdog before it pages, and
    where (PagerDuty's URL and routing key file, as Alertmanager's receiver has them). None
    when the config sends the heartbeats to a service of its own."""
    cfg = stack_config(opts)
    if cfg.watchdog.heartbeat_url != f"http://127.0.0.1:{opts.inbox_port}{HEARTBEAT_PATH}":
        return ()
    pd = cfg.receivers.pagerduty
    grace = config.seconds(cfg.watchdog.missing_after)
    return (f"{grace:g}", pd.url, pd.routing_key_file)


def _pushgateway(opts: StackOptions) -> str | None:
    """The Pushgateway binary, when installed and its port is free (or it already runs from
    ``opts.dir``): the stack runs it then, else goes without it (it is optional)."""
    try:
        binary = find_binary("prometheus-pushgateway", "pushgateway", env="RLPULSE_PUSHGATEWAY_BIN")
    except MissingBinary:
        return None
    mine = running_pid(opts.dir, "pushgateway") is not None
    return binary if mine or _port_free(opts.pushgateway_port) else None


def services(opts: StackOptions) -> list[Service]:
    """The processes (the Pushgateway when installed), with their command lines (binaries
    looked up now)."""
    for name in ("prometheus", "alertmanager", "inbox", "rollouts", "pushgateway"):
        port = getattr(opts, f"{name}_port")
        if not 0 < port < 65536:  # each is written into the others' config before they start
            raise ValueError(f"--{name}-port {port}: expected a port number in 1-65535")
    d = opts.dir.resolve()
    prometheus = find_binary("prometheus", env="RLPULSE_PROMETHEUS_BIN")
    alertmanager = find_binary(
        "prometheus-alertmanager", "alertmanager", env="RLPULSE_ALERTMANAGER_BIN"
    )
    data_dir = (opts.data_dir or default_data_dir()).expanduser().resolve()
    pushgateway = _pushgateway(opts)
    gateway = [
        Service(
            "pushgateway",
            opts.pushgateway_port,
            (
                pushgateway or "",
                f"--web.listen-address=127.0.0.1:{opts.pushgateway_port}",
                f"--persistence.file={d / 'data' / 'pushgateway.db'}",
            ),
            "/-/ready",
        )
    ]
    inbox = (
        sys.executable,
        "-m",
        "rlpulse.offline.stackrun",
        str(opts.inbox_port),
        str(d / INBOX_FILE),
    )
    return [
        *(gateway if pushgateway else []),
        Service(
            "rollouts",
            opts.rollouts_port,
            (
                *(sys.executable, "-m", "rlpulse.cli", "rollouts", "serve"),
                *("--data-dir", str(data_dir), "--port", str(opts.rollouts_port)),
            ),
            "/-/ready",
        ),
        Service(
            "inbox",
            opts.inbox_port,
            (*inbox, str(opts.targets_dir.resolve()), *_checker_args(opts, d)),
            "/-/ready",
        ),
        Service(
            "alertmanager",
            opts.alertmanager_port,
            (
                alertmanager,
                f"--config.file={d / 'alertmanager' / 'alertmanager.yml'}",
                f"--storage.path={d / 'data' / 'alertmanager'}",
                f"--web.listen-address=127.0.0.1:{opts.alertmanager_port}",
                "--cluster.listen-address=",
            ),
            "/-/ready",
        ),
        Service(
            "prometheus",
            opts.prometheus_port,
            (
                prometheus,
                f"--config.file={d / 'prometheus' / 'prometheus.yml'}",
                f"--storage.tsdb.path={d / 'data' / 'prometheus'}",
                f"--web.listen-address=127.0.0.1:{opts.prometheus_port}",
                "--enable-feature=exemplar-storage",
                "--web.enable-lifecycle",
                *_resend(opts),
            ),
            "/-/ready",
        ),
    ]


def _resend(opts: StackOptions) -> tuple[str, ...]:
    """Prometheus re-sends firing alerts every minute (an Alertmanager that was down, or not
    yet known at the first send, hears of them then); ``--fast`` makes it
    ``config.FAST_RESEND_S``."""
    if not opts.fast:
        return ()
    return (f"--rules.alert.resend-delay={config.FAST_RESEND_S:g}s",)


# ---- processes ----------------------------------------------------------------------------------


def _pid_file(d: Path, name: str) -> Path:
    return d / f"{name}.pid"


def running_pid(d: Path, name: str) -> int | None:
    """The pid of ``name`` started from directory ``d``, if that process is still alive (a pid
    reused by an unrelated process does not count)."""
    try:
        pid = int(_pid_file(d, name).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if not alive(pid):
        return None
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        cwd = os.readlink(f"/proc/{pid}/cwd")  # start() runs every service in d
    except OSError:
        return pid  # no /proc: trust the pid file
    return pid if str(d.resolve()) in args or cwd == str(d.resolve()) else None


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the Go servers bind
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def ready(url: str) -> bool:
    """Whether GET ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False


def start(svc: Service, d: Path) -> int:
    """Start ``svc`` in the background (own session, log in ``d``); its pid."""
    if not _port_free(svc.port):
        raise ValueError(
            f"{svc.name}: port 127.0.0.1:{svc.port} is already in use "
            f"(pass --{svc.name}-port, or stop what listens there)"
        )
    log_path = d / f"{svc.name}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            svc.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=d,
        )
    _pid_file(d, svc.name).write_text(f"{proc.pid}\n")
    return proc.pid


def wait_ready(svc: Service, d: Path, timeout: float = READY_TIMEOUT) -> None:
    """Block until ``svc`` answers its readiness URL; an error with its log tail if it exits."""
    deadline = time.monotonic() + timeout
    while not ready(svc.url + svc.ready_path):
        if running_pid(d, svc.name) is None:
            raise RuntimeError(
                f"{svc.name} exited during startup; {d / (svc.name + '.log')}:\n"
                + _log_tail(d / f"{svc.name}.log")
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"{svc.name} not ready at {svc.url} after {timeout:.0f}s")
        time.sleep(0.1)


def stop(d: Path, name: str, timeout: float = STOP_TIMEOUT) -> bool:
    """SIGTERM (then SIGKILL) the ``name`` process started from ``d``; whether one was running."""
    pid = running_pid(d, name)
    _pid_file(d, name).unlink(missing_ok=True)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    return True


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


# ---- commands -----------------------------------------------------------------------------------


def up(opts: StackOptions) -> list[Service]:
    """Generate into ``opts.dir`` and make sure every process runs and is ready; a running
    one is reloaded (SIGHUP) instead of restarted. The inbox, which only Alertmanager calls,
    moves to a free port when its own is taken."""
    if running_pid(opts.dir, "inbox") is None and not _port_free(opts.inbox_port):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            opts = dataclasses.replace(opts, inbox_port=s.getsockname()[1])
    svcs = services(opts)  # a missing binary fails before anything is written
    cfg = stack_config(opts)
    d = opts.dir
    state = _state(d)
    pids = {svc.name: running_pid(d, svc.name) for svc in svcs}
    for svc in svcs:
        if pids[svc.name] is not None and state.get(svc.name, {}).get("port") != svc.port:
            raise ValueError(
                f"{svc.name} already runs from {d} on port {state.get(svc.name, {}).get('port')}; "
                f"run `rlpulse stack down --dir {d}` first to change ports"
            )
    d.mkdir(parents=True, exist_ok=True)
    write_files(opts, cfg)
    for svc in svcs:
        pid = pids[svc.name]
        if pid is None:
            if svc.name == "inbox":  # a fresh inbox lists this session's notifications only
                (d / INBOX_FILE).unlink(missing_ok=True)
            start(svc, d)
        elif svc.name in ("prometheus", "alertmanager"):
            os.kill(pid, signal.SIGHUP)  # re-read the regenerated configuration
    for svc in svcs:
        wait_ready(svc, d)
    _save_state(d, svcs, opts.targets_dir)
    if pids["prometheus"] is None:  # runs that died while no stack ran paged nobody: let go
        discovery.sweep(opts.targets_dir, keep=0)
    prometheus = next(s for s in svcs if s.name == "prometheus")
    gateway = [s.url for s in svcs if s.name == "pushgateway"]
    discovery.write_watcher(
        opts.targets_dir,
        discovery.Watcher(
            running_pid(d, "prometheus") or 0,
            seconds(cfg.scrape.interval),
            prometheus.url,
            gateway[0] if gateway else "",
        ),
    )
    return svcs


def down(d: Path) -> list[str]:
    """Stop whatever ``up`` started from ``d`` (Prometheus first), then remove its note in the
    discovery directory and every dead process's target there; the names that were running."""
    pid = running_pid(d, "prometheus")
    targets = _state(d).get("targets_dir")
    names = ("prometheus", "alertmanager", "pushgateway", "inbox", "rollouts")
    stopped = [name for name in names if stop(d, name)]
    if targets:
        discovery.remove_watcher(Path(targets), pid or 0)
        discovery.sweep(Path(targets), keep=0)
    (d / "stack.json").unlink(missing_ok=True)
    return stopped


def _state(d: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((d / "stack.json").read_text())
    except (OSError, ValueError):
        return {}
    return data


def _save_state(d: Path, svcs: Sequence[Service], targets: Path) -> None:
    state: dict[str, Any] = {s.name: {"port": s.port, "url": s.url} for s in svcs}
    state["targets_dir"] = str(targets.resolve())
    (d / "stack.json").write_text(json.dumps(state, indent=2) + "\n")


def status(d: Path) -> dict[str, dict[str, Any]]:
    """Per service of the stack in ``d``: its url, pid (None when stopped) and readiness."""
    out = {}
    for name, info in _state(d).items():
        if not isinstance(info, dict):
            continue
        pid = running_pid(d, name)
        out[name] = {
            **info,
            "pid": pid,
            "ready": pid is not None and ready(info["url"] + "/-/ready"),
        }
    return out


def notifications(d: Path) -> list[dict[str, Any]]:
    """Every notification the inbox of the stack in ``d`` received, oldest first."""
    try:
        lines = (d / INBOX_FILE).read_text().splitlines()
    except OSError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def describe(note: dict[str, Any]) -> str:
    """One line for an inbox notification (a PagerDuty event or a webhook batch)."""
    body = note.get("body", {})
    if note.get("path") == "/pagerduty":
        details = body.get("payload", {}).get("custom_details", {})
        return (
            f"PagerDuty {body.get('event_action')}: {details.get('alertname')} "
            f"run {details.get('run_id')} ({body.get('payload', {}).get('severity')})"
        )
    labels = body.get("commonLabels", {})
    return (
        f"webhook {body.get('status')}: {labels.get('alertname')} run {labels.get('run_id')} "
        f"({labels.get('severity')})"
    )


# ---- the inbox ----------------------------------------------------------------------------------


class Inbox(ThreadingHTTPServer):
    """Answers POSTs like PagerDuty's Events API v2 and appends each JSON body to a file."""

    daemon_threads = True

    def __init__(self, port: int, file: Path, checker: Checker | None = None) -> None:
        self.file = file
        self.checker = checker
        inbox = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._reply(200 if self.path == "/-/ready" else 404, b"ok\n")

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    data = json.loads(body)
                except ValueError:
                    self._reply(400, b'{"status":"invalid event"}')
                    return
                if self.path == HEARTBEAT_PATH and inbox.checker is not None:
                    inbox.checker.beat()
                else:
                    inbox.record(self.path, data)
                self._reply(202, b'{"status":"success","message":"Event processed"}')

            def _reply(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", port), Handler)

    def record(self, path: str, body: Any) -> None:
        """Append one notification, its routing key redacted, to the inbox file (owner-only:
        a notification carries alert text) and print its one-line description."""
        if isinstance(body, dict) and "routing_key" in body:
            body = {**body, "routing_key": REDACTED}  # a real key (--pagerduty-key-file) too
        note = {"time": time.time(), "path": path, "body": body}
        fd = os.open(self.file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(fd, 0o600)  # also a file an older version left world-readable
        with open(fd, "a") as f:
            f.write(json.dumps(note) + "\n")
        print(describe(note), flush=True)


class Checker:
    """A dead man's switch for the stack itself: the Watchdog alert, always firing, comes from
    Prometheus through Alertmanager every ``watchdog.interval``; when none came for ``grace``
    seconds (Prometheus stopped evaluating or cannot reach Alertmanager, or Alertmanager cannot
    deliver) it pages PagerDuty itself, not through Alertmanager, and resolves that page when
    the heartbeats are back."""

    def __init__(self, grace: float, url: str, key_file: str) -> None:
        self.grace, self.url, self.key_file = grace, url, key_file
        # a pipeline that never sends is noticed too, once Prometheus has had time to resend
        # what it could not deliver while Alertmanager was starting (it retries every minute)
        self.last = time.monotonic() + max(STARTUP_S - grace, 0.0)
        self.paged = False
        self._lock = threading.Lock()

    def beat(self) -> None:
        with self._lock:
            self.last = time.monotonic()
            resolve, self.paged = self.paged, False
        if resolve:
            self._send("resolve", "Watchdog heartbeats are back: alerts are delivered again.")

    def check(self) -> None:
        """Page once when the heartbeats have stopped for ``grace`` seconds."""
        with self._lock:
            quiet = time.monotonic() - self.last
            if quiet < self.grace or self.paged:
                return
            self.paged = True
        self._send(
            "trigger",
            f"No Watchdog heartbeat from Alertmanager for {quiet:.0f} s: Prometheus stopped "
            "evaluating rules or cannot reach Alertmanager, or Alertmanager cannot deliver. "
            "Alerts are not reaching anyone.",
        )

    def _send(self, action: str, summary: str) -> None:
        try:
            key = Path(self.key_file).read_text().strip()
        except OSError:
            key = ""
        event = {
            "routing_key": key,
            "event_action": action,
            "dedup_key": f"rlpulse-{MISSING}",
            "client": "rlpulse stack heartbeat checker",
            "payload": {
                "summary": summary,
                "source": "rlpulse stack",
                "severity": "critical",
                "custom_details": {"alertname": MISSING, "run_id": "", "description": summary},
            },
        }
        req = urllib.request.Request(
            self.url,
            json.dumps(event).encode(),
            {"Content-Type": "application/json"},
            method="POST",
        )
        try:
            urllib.request.urlopen(req, timeout=10).close()
        except (OSError, urllib.error.URLError) as exc:
            print(f"heartbeat checker: cannot page {self.url}: {exc}", file=sys.stderr)

    def run(self) -> None:
        while True:
            time.sleep(min(1.0, self.grace / 4))
            self.check()


def _serve_inbox(argv: Sequence[str]) -> None:
    port, path = int(argv[0]), Path(argv[1])
    threading.Thread(target=_sweep_forever, args=(Path(argv[2]),), daemon=True).start()
    checker = None
    if len(argv) >= 6:
        checker = Checker(float(argv[3]), argv[4], argv[5])
        threading.Thread(target=checker.run, name="rlpulse-heartbeat", daemon=True).start()
    Inbox(port, path, checker).serve_forever()


def dead_mans_switch(opts: StackOptions) -> str:
    """What watches the stack itself, as ``stack up`` says it."""
    cfg = stack_config(opts)
    w = cfg.watchdog
    if not _checker_args(opts, opts.dir):
        return f"Alertmanager posts RLWatchdog every {w.interval} to {w.heartbeat_url}"
    return (
        f"Alertmanager posts RLWatchdog every {w.interval} to the inbox's heartbeat checker, "
        f"which pages {cfg.receivers.pagerduty.url} itself (not through Alertmanager) after "
        f"{w.missing_after} without one"
    )


def _sweep_forever(targets: Path) -> None:
    """Remove dead processes' targets once they have paged for ``discovery.DEAD_KEEP``."""
    dead_since: dict[str, float] = {}
    while True:
        time.sleep(SWEEP_EVERY)
        try:
            discovery.sweep(targets, discovery.DEAD_KEEP, dead_since)
        except OSError as exc:
            print(f"rlpulse stack: sweeping {targets} failed: {exc}", file=sys.stderr, flush=True)


def iter_urls(svcs: Sequence[Service]) -> Iterator[tuple[str, str]]:
    """(what, URL) pairs worth opening for a running stack."""
    by = {s.name: s for s in svcs}
    yield "Prometheus", by["prometheus"].url
    yield "Prometheus alerts", by["prometheus"].url + "/alerts"
    yield "Alertmanager", by["alertmanager"].url
    yield "Notifications inbox (PagerDuty and webhook stand-in)", by["inbox"].url
    yield "Rollout viewer", by["rollouts"].url + "/"
    if "pushgateway" in by:
        yield (
            "Pushgateway (short runs registered nowhere: RLPULSE_PUSHGATEWAY)",
            by["pushgateway"].url,
        )


if __name__ == "__main__":
    _serve_inbox(sys.argv[1:])
