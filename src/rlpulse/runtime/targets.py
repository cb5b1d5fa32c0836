"""Prometheus ``file_sd`` target files for a multi-node job, from a host list or the launcher,
or written by each exporter itself (:func:`register`, for processes a scheduler such as Ray
places on ports and nodes chosen at run time).

Each node runs one exporter per local rank on ``base_port + local_rank``; one target group per
node. The exporters label their own series with ``node`` and ``local_rank``, so the groups add only
the labels a user asks for (a target label ``node`` would clash with the exported one).
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_RANGE = re.compile(r"^(?P<prefix>[^\[\]]*)\[(?P<body>[^\]]+)\](?P<suffix>.*)$")
MAX_HOSTS = 65536  # far beyond any job's node count; a typo like gpu[0-99999999] stops here


def expand_hostlist(spec: str) -> list[str]:
    """Expand a Slurm-style host list: ``gpu[01-03,07],login1`` → gpu01 gpu02 gpu03 gpu07 login1."""
    hosts: list[str] = []
    for part in _split_top(spec):
        m = _RANGE.match(part)
        if not m:
            hosts.append(part)
            continue
        for item in m["body"].split(","):
            lo, _, hi = item.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()) or int(hi or lo) < int(lo):
                raise ValueError(f"host list {spec!r}: bad range {item!r}")
            if int(hi or lo) - int(lo) >= MAX_HOSTS:
                raise ValueError(f"host list {spec!r}: range {item!r} is over {MAX_HOSTS} hosts")
            width = len(lo)
            for n in range(int(lo), int(hi or lo) + 1):
                hosts.extend(expand_hostlist(f"{m['prefix']}{n:0{width}d}{m['suffix']}"))
                if len(hosts) > MAX_HOSTS:
                    raise ValueError(f"host list {spec!r}: over {MAX_HOSTS} hosts")
    return hosts


def _split_top(spec: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in spec:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"[": 1, "]": -1}.get(ch, 0)
        cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


@dataclass(frozen=True)
class Node:
    """One host and how many exporter processes (local ranks) it runs."""

    host: str
    ranks: int


def read_hostfile(path: Path, default_ranks: int) -> list[Node]:
    """DeepSpeed/MPI-style hostfile: ``host [slots=N]`` per line, ``#`` comments."""
    nodes = []
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        host, *rest = line.split()
        ranks = default_ranks
        for field in rest:
            key, _, val = field.partition("=")
            if key not in ("slots", "max_slots") or not val.isdigit():
                raise ValueError(f"{path}:{lineno}: cannot read {field!r} (expected slots=N)")
            if key == "slots":
                ranks = int(val)
        nodes.append(Node(host, ranks))
    return nodes


def nodes_from_env(env: Mapping[str, str], default_ranks: int) -> list[Node]:
    """Hosts from Slurm (``SLURM_JOB_NODELIST``) and ranks per node from the launcher."""
    spec = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not spec:
        raise ValueError(
            "no host list: pass --hosts or --hostfile, or run inside a Slurm job "
            "(SLURM_JOB_NODELIST)"
        )
    ranks = default_ranks
    for key in ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", "SLURM_GPUS_ON_NODE"):
        raw = env.get(key, "")
        if raw:
            head = raw.split("(")[0].split(",")[0]
            if not head.isdigit():
                raise ValueError(f"{key}={raw!r} is not a number of ranks")
            ranks = int(head)
            break
    return [Node(h, ranks) for h in expand_hostlist(spec)]


# what the exporter's series (run_id ... node) or Prometheus (job, instance) already label
OWN_LABELS = frozenset({"run_id", "rank", "local_rank", "node", "job", "instance"})


def _check_labels(labels: Mapping[str, str] | None) -> None:
    """Refuse target labels Prometheus would clash with the exporter's own (it renames the
    exported ones to ``exported_*``, and the alerts and dashboards would lose them)."""
    clash = set(labels or {}) & OWN_LABELS
    if clash:
        raise ValueError(
            f"target label(s) {sorted(clash)} would clash with the exporter's own labels"
        )


def file_sd(
    nodes: Sequence[Node], base_port: int, labels: Mapping[str, str] | None = None
) -> list[dict[str, object]]:
    """The ``file_sd`` document: one target group per node."""
    _check_labels(labels)
    if not 0 < base_port < 65536:
        raise ValueError(f"base port {base_port} is not a TCP port")
    groups: list[dict[str, object]] = []
    for node in nodes:
        if node.ranks < 1 or base_port + node.ranks - 1 > 65535:
            raise ValueError(f"{node.host}: {node.ranks} ranks from port {base_port} do not fit")
        targets = [f"{node.host}:{base_port + r}" for r in range(node.ranks)]
        groups.append({"targets": targets, "labels": dict(labels or {})})
    return groups


def write(path: Path, groups: list[dict[str, object]]) -> None:
    """Write atomically, so Prometheus never reads a half-written file (its folder made first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(groups, indent=2) + "\n")
    tmp.replace(path)


# ---- self-registration: one file per exporter, for processes placed by a scheduler (Ray) -------

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_WILDCARD = ("", "0.0.0.0", "::")


def target_path(directory: Path | str, run_id: str, rank: int) -> Path:
    """The file of one exporter: ``<run_id>-<rank>.json`` (other characters become ``_``)."""
    return Path(directory) / f"{_UNSAFE.sub('_', run_id)}-{rank}.json"


def write_target(
    directory: Path | str,
    run_id: str,
    rank: int,
    address: str,
    labels: Mapping[str, str] | None = None,
) -> Path:
    """Write (atomically) the one-target group of ``address`` (``host:port``); its path.

    ``labels`` are target labels: the exporter's own series already carry ``run_id``, ``rank``,
    ``local_rank`` and ``node``, so those names are refused (Prometheus would rename the
    exported ones to ``exported_*``). ``__scheme__`` and ``__metrics_path__`` are allowed.
    """
    _check_labels(labels)
    path = target_path(directory, run_id, rank)
    write(path, [{"targets": [address], "labels": dict(labels or {})}])
    return path


def unregister(directory: Path | str, run_id: str, rank: int) -> bool:
    """Remove one exporter's file (a driver cleaning up after a killed worker); whether it was
    there."""
    try:
        target_path(directory, run_id, rank).unlink()
    except FileNotFoundError:
        return False
    return True


class Registration:
    """One exporter's file_sd entry; removed by ``close()`` or when the exporter closes."""

    def __init__(self, path: Path, address: str) -> None:
        self.path = path
        self.address = address
        self._pid = os.getpid()

    def close(self) -> None:
        """Remove the file (once; a no-op in a forked child and when it is already gone)."""
        if os.getpid() == self._pid:
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> Registration:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Registration({str(self.path)!r}, {self.address!r})"


def address_of(exporter: Any, host: str | None = None) -> str:
    """``host:port`` where Prometheus reaches a started exporter: ``host``, else its bind
    address, or this machine's host name when it listens on all interfaces."""
    addr = exporter.options.addr
    host = host or (addr if addr not in _WILDCARD else socket.gethostname())
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6
    return f"{host}:{exporter.port}"


def register(
    directory: Path | str,
    exporter: Any,
    labels: Mapping[str, str] | None = None,
    *,
    host: str | None = None,
) -> Registration:
    """Announce a started ``Exporter`` to Prometheus' ``file_sd`` (``directory/*.json``).

    Writes ``<run_id>-<rank>.json`` holding ``host:port`` and removes it when the exporter closes
    (``close()``, interpreter exit, SIGTERM; a SIGKILLed process leaves it, see
    :func:`unregister`). ``host`` is the address Prometheus reaches the process at: by default
    the exporter's bind address, or this machine's host name when it listens on all interfaces.
    An HTTPS exporter gets ``__scheme__: https``. A registered exporter expects Prometheus: the
    end of its run waits for a last scrape (``Exporter.end``) even if none came yet. It replaces
    the exporter's own registration (``rlpulse.runtime.discovery``), so no target is scraped twice.
    """
    if not exporter.serving:
        raise ValueError("register() needs a started exporter (its port is known once serving)")
    address = address_of(exporter, host)
    labels = dict(labels or {})
    if exporter.tls:
        labels.setdefault("__scheme__", "https")
    Path(directory).mkdir(parents=True, exist_ok=True)
    if exporter.registered is not None:  # this registration replaces the automatic one
        exporter.unregister()
    reg = Registration(
        write_target(directory, exporter.run_id, exporter.rank, address, labels), address
    )
    exporter.on_close(reg.close)
    exporter.expect_scrape = True
    return reg
