"""Local service discovery: every started exporter registers itself as a Prometheus ``file_sd``
target, so a run on any port (a busy default port, ten trainers at once, a sweep) is scraped.

Where (``resolve``): ``start(targets_dir=)`` or ``RLPULSE_TARGETS_DIR`` (``off`` disables); else,
outside Kubernetes (which discovers pods itself), the directory ``rlpulse stack up`` watches,
``$XDG_STATE_HOME/rlpulse/targets`` (default ``~/.local/state/rlpulse/targets``), but only while
that stack runs: ``stack up`` leaves a ``WATCHER`` note there naming its Prometheus process and
scrape interval, which also sizes the wait for a run's last scrape.

One file per process (``<run_id>-<rank>-<pid>.json``, written atomically), its owner in
``__meta_rlpulse_*`` labels (shown on Prometheus' service-discovery page, dropped from the
series). The exporter removes it once its run has ended and the last scrape was taken; a run that
never said how it ended (killed, SIGTERM, ``close()``) leaves it, so Prometheus pages the dead
target, and the stack's ``sweep`` removes it later (``DEAD_KEEP``), or at ``stack up``/``down``.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import socket
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TARGETS_ENV = "RLPULSE_TARGETS_DIR"
OFF = ("off", "none", "no", "false", "0")
WATCHER = ".rlpulse-watcher"  # not *.json: Prometheus reads only the targets
SD_DELAY = 5.0  # Prometheus applies newly discovered targets every 5 s
DEAD_KEEP = 3600.0  # seconds a dead process's target stays (paging RLTargetDown) before a sweep
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def default_dir() -> Path:
    """The directory ``rlpulse stack up`` watches by default."""
    return default_dir_in(os.environ)


def default_dir_in(env: Mapping[str, str]) -> Path:
    """``default_dir`` in the environment ``env``."""
    state = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "rlpulse" / "targets"


@dataclass(frozen=True)
class Watcher:
    """The Prometheus that watches a targets directory (written by ``rlpulse stack up``)."""

    pid: int
    scrape_interval: float
    prometheus_url: str
    pushgateway_url: str = ""

    def alive(self) -> bool:
        """Whether that Prometheus process still runs."""
        return pid_alive(self.pid)


def write_watcher(directory: Path, watcher: Watcher) -> None:
    """Note (atomically) which Prometheus watches ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    _write_json(directory / WATCHER, watcher.__dict__)


def read_watcher(directory: Path) -> Watcher | None:
    """The live Prometheus watching ``directory``, if its note names one."""
    try:
        data = json.loads((directory / WATCHER).read_text())
        watcher = Watcher(
            int(data["pid"]),
            float(data["scrape_interval"]),
            str(data["prometheus_url"]),
            str(data.get("pushgateway_url", "")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return watcher if watcher.alive() else None


def remove_watcher(directory: Path, pid: int) -> None:
    """Remove the note if it still names ``pid`` (another stack may have taken the directory)."""
    try:
        if json.loads((directory / WATCHER).read_text()).get("pid") == pid:
            (directory / WATCHER).unlink()
    except (OSError, ValueError, AttributeError):
        pass


@dataclass(frozen=True)
class Where:
    """Where an exporter registers: ``directory`` (None: nowhere, ``why`` says why), the scrape
    interval of the Prometheus known to watch it, and whether that one runs on this machine."""

    directory: Path | None
    interval: float | None = None
    local: bool = False
    why: str = ""
    pushgateway: str = ""
    prometheus: str = ""  # the watching Prometheus' URL, when a stack's note names it

    def final_wait(self, cap: float) -> float:
        """The wait for a last scrape: discovery's delay and two intervals, at most ``cap``."""
        if self.interval is None:
            return cap
        return min(cap, SD_DELAY + 2 * self.interval + 1.0)


def resolve(setting: str | os.PathLike[str] | None, env: Mapping[str, str] = os.environ) -> Where:
    """Where to register (see the module): ``setting`` first, then the environment."""
    raw = os.fspath(setting) if setting is not None else env.get(TARGETS_ENV)
    if raw is not None and raw.strip() != "":
        if raw.strip().lower() in OFF:
            return Where(None, why=f"registration is off ({TARGETS_ENV}={raw})")
        directory = Path(raw).expanduser()
        watcher = read_watcher(directory)
        if watcher is None:
            return Where(directory)
        return Where(directory, watcher.scrape_interval, prometheus=watcher.prometheus_url)
    if env.get("KUBERNETES_SERVICE_HOST"):
        return Where(None, why="in Kubernetes the PodMonitor finds the pod")
    directory = default_dir_in(env)
    watcher = read_watcher(directory)
    if watcher is None:
        return Where(
            None,
            why="no `rlpulse stack up` runs on this machine to scrape it; "
            f"{TARGETS_ENV} names the directory your Prometheus watches",
        )
    return Where(
        directory,
        watcher.scrape_interval,
        True,
        pushgateway=watcher.pushgateway_url,
        prometheus=watcher.prometheus_url,
    )


def scraped_since(prometheus: str, instance: str, since: float, timeout: float) -> bool:
    """Wait up to ``timeout`` s until ``prometheus`` reports a successful scrape of ``instance``
    that began at or after ``since`` (epoch seconds); whether it did. Another scraper's scrape
    (a second Prometheus on the same port) does not count, nor does an unreachable API."""
    return _until(
        prometheus,
        timeout,
        lambda active: any(
            t["labels"].get("instance") == instance
            and t["health"] == "up"
            and _epoch(t["lastScrape"]) >= since
            for t in active
        ),
    )


def dropped(prometheus: str, instance: str, timeout: float) -> bool:
    """Wait up to ``timeout`` s until ``prometheus`` no longer scrapes ``instance`` (its file is
    gone and discovery applied that); whether it stopped. An ended run serves until then, so
    no scrape of it fails and its target never reads as down."""
    return _until(
        prometheus,
        timeout,
        lambda active: all(t["labels"].get("instance") != instance for t in active),
    )


def _until(prometheus: str, timeout: float, done: Callable[[list[Any]], bool]) -> bool:
    """Poll ``prometheus``' active targets until ``done(targets)`` or ``timeout`` s passed."""
    deadline = time.monotonic() + timeout
    url = f"{prometheus.rstrip('/')}/api/v1/targets?state=active"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=max(0.1, min(2.0, timeout))) as resp:
                if done(json.load(resp)["data"]["activeTargets"]):
                    return True
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _epoch(rfc3339: str) -> float:
    """Epoch seconds of a time as the Prometheus API writes it (nanosecond digits allowed)."""
    head, _, frac = rfc3339.rstrip("Z").partition(".")
    frac = "".join(c for c in frac if c.isdigit())[:6]
    stamp = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.UTC)
    return stamp.timestamp() + (float(f"0.{frac}") if frac else 0.0)


def target_file(directory: Path, run_id: str, rank: int) -> Path:
    """The file of this process's exporter of ``run_id``/``rank``."""
    return directory / f"{_UNSAFE.sub('_', run_id)}-{rank}-{os.getpid()}.json"


def register(directory: Path, address: str, run_id: str, rank: int, scheme: str = "http") -> Path:
    """Write this process's target file for ``address`` (``host:port``); its path."""
    labels = {
        "__meta_rlpulse_run_id": run_id,
        "__meta_rlpulse_rank": str(rank),
        "__meta_rlpulse_pid": str(os.getpid()),
        "__meta_rlpulse_started": str(_start_time(os.getpid())),
        "__meta_rlpulse_host": socket.gethostname(),
    }
    if scheme != "http":
        labels["__scheme__"] = scheme
    directory.mkdir(parents=True, exist_ok=True)
    path = target_file(directory, run_id, rank)
    _write_json(path, [{"targets": [address], "labels": labels}])
    return path


def sweep(
    directory: Path, keep: float = DEAD_KEEP, dead_since: dict[str, float] | None = None
) -> list[Path]:
    """Remove the target files of this machine's dead processes: at once when ``keep`` is 0,
    else once ``dead_since`` (a sweeper's memory of when it first saw each dead) is ``keep`` s
    old. Files of other machines (a shared directory) and of live processes stay."""
    now = time.monotonic()
    seen = dead_since if dead_since is not None else {}
    removed = []
    for path in sorted(directory.glob("*.json")):
        owner = _owner(path)
        if owner is None or pid_alive(owner[0], owner[1]):
            seen.pop(path.name, None)
            continue
        first = seen.setdefault(path.name, now)
        if now - first >= keep:
            path.unlink(missing_ok=True)
            seen.pop(path.name, None)
            removed.append(path)
    return removed


def _owner(path: Path) -> tuple[int, str] | None:
    """(pid, start time) of the process that wrote ``path`` on this machine, or None."""
    try:
        [group] = json.loads(path.read_text())
        labels = group["labels"]
        if labels.get("__meta_rlpulse_host") != socket.gethostname():
            return None
        return int(labels["__meta_rlpulse_pid"]), str(labels.get("__meta_rlpulse_started", ""))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def pid_alive(pid: int, started: str = "") -> bool:
    """Whether process ``pid`` runs (and, given its start time, is still the same process)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # another user's process: it exists
    stat = _stat(pid)
    if stat is not None and stat[0] == "Z":
        return False
    return not started or started == str(_start_time(pid))


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> str:
    stat = _stat(pid)
    return stat[19] if stat is not None and len(stat) > 19 else ""


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
