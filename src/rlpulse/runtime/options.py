"""The exporter's options: its arguments, else the environment, else the defaults, checked once.

``Options.resolve`` is the one place the exporter reads the environment: ``RANK``,
``LOCAL_RANK``, ``RLPULSE_PORT``, ``RLPULSE_ADDR``, ``RLPULSE_RUN_ID``, ``RLPULSE_NODE``,
``RLPULSE_CERTFILE``, ``RLPULSE_KEYFILE``, ``RLPULSE_WEB_CONFIG``, ``RLPULSE_FINAL_WAIT``,
``RLPULSE_EXPECT_SCRAPE``, ``RLPULSE_PUSHGATEWAY``, ``RLPULSE_REFERENCE_BAND``,
``RLPULSE_DRIFT_REFERENCE`` and
``RLPULSE_TARGETS_DIR`` (read by ``rlpulse.runtime.discovery`` when the exporter starts). A
misspelt option or a port that is no port is a one-line ``TypeError``/``ValueError`` in the
caller's terms.
"""

from __future__ import annotations

import difflib
import inspect
import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlpulse.runtime import webconfig
from rlpulse.runtime.store import MAX_LABEL_CHARS

DEFAULT_PORT = 9400
FINAL_WAIT = 60.0  # seconds the end of a run waits for a last scrape, by default
FINAL_WAIT_ENV = "RLPULSE_FINAL_WAIT"
EXPECT_SCRAPE_ENV = "RLPULSE_EXPECT_SCRAPE"
PUSHGATEWAY_ENV = "RLPULSE_PUSHGATEWAY"
BAND_ENV = "RLPULSE_REFERENCE_BAND"
DRIFT_ENV = "RLPULSE_DRIFT_REFERENCE"


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not a number") from None


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


@dataclass(frozen=True)
class Options:
    """What one exporter runs with (see ``resolve`` for the arguments)."""

    port: int  # the port to serve: the base port plus the local rank (0: any free port)
    run_id: str
    rank: int
    local_rank: int
    node: str
    addr: str
    certfile: str | None
    keyfile: str | None
    web_config: webconfig.WebConfig | None
    final_wait: float
    expect_scrape: bool
    push_gateway: str | None
    targets_dir: str | os.PathLike[str] | None = None
    strict: bool = False
    gpu: bool = False
    host: bool = False
    process: bool = True
    label_cap: int = 64
    unmapped_cap: int = 256
    nvml: Any = None
    collector_timeout: float = 0.5
    collector_ttl: float = 1.0
    config: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    rollouts: Mapping[str, Any] = field(default_factory=dict)
    key_map: Mapping[str, Any] | str | os.PathLike[str] | None = None
    reference_band: str | os.PathLike[str] | None = None
    drift_reference: str | os.PathLike[str] | None = None

    @property
    def tls(self) -> bool:
        """Whether the endpoint serves HTTPS."""
        return bool(self.certfile) or (
            self.web_config is not None and self.web_config.tls is not None
        )

    @classmethod
    def resolve(
        cls,
        port: int | None = None,
        *,
        run_id: str | None = None,
        rank: int | None = None,
        local_rank: int | None = None,
        node: str | None = None,
        addr: str | None = None,
        config: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        strict: bool = False,
        gpu: bool | None = None,
        host: bool | None = None,
        process: bool = True,
        certfile: str | None = None,
        keyfile: str | None = None,
        web_config: str | os.PathLike[str] | None = None,
        label_cap: int = 64,
        unmapped_cap: int = 256,
        nvml: Any = None,
        collector_timeout: float = 0.5,
        collector_ttl: float = 1.0,
        rollouts: Mapping[str, Any] | None = None,
        key_map: Mapping[str, Any] | str | os.PathLike[str] | None = None,
        final_wait: float | None = None,
        expect_scrape: bool | None = None,
        push_gateway: str | None = None,
        targets_dir: str | os.PathLike[str] | None = None,
        reference_band: str | os.PathLike[str] | None = None,
        drift_reference: str | os.PathLike[str] | None = None,
    ) -> Options:
        """The options from arguments, the environment and defaults; ``ValueError`` for a bad
        environment value, an over-long run id or a certificate given twice.

        ``gpu`` and ``host`` default to local rank 0 (node-level readings once per node).
        """
        rank_ = rank if rank is not None else (_env_int("RANK") or 0)
        local = local_rank if local_rank is not None else (_env_int("LOCAL_RANK") or 0)
        base = _port(port) if port is not None else _env_int("RLPULSE_PORT")
        base = DEFAULT_PORT if base is None else _port(base, "RLPULSE_PORT")
        if base and not 0 < base + local < 65536:
            raise ValueError(f"rlpulse: port {base} + local rank {local} is no TCP port")
        run = run_id or os.environ.get("RLPULSE_RUN_ID") or f"run-{uuid.uuid4().hex[:8]}"
        if len(run) > MAX_LABEL_CHARS:
            raise ValueError(
                f"rlpulse: {'run_id' if run_id else 'RLPULSE_RUN_ID'} is {len(run)} characters "
                "long; at most "
                f"{MAX_LABEL_CHARS} (it labels every series): {run[:40]!r}..."
            )
        cert = certfile or os.environ.get("RLPULSE_CERTFILE") or None
        web_path = web_config or os.environ.get(webconfig.ENV) or None
        try:
            web = webconfig.load(web_path) if web_path else None
        except webconfig.WebConfigError as exc:
            if web_config:
                raise
            raise webconfig.WebConfigError(f"{webconfig.ENV}: {exc}") from None
        if cert and web is not None and web.tls is not None:
            raise ValueError(
                f"rlpulse: both certfile ({cert}) and tls_server_config in web config "
                f"{web.path}: give the certificate in one place"
            )
        return cls(
            port=base + local if base else 0,
            run_id=run,
            rank=rank_,
            local_rank=local,
            node=node or os.environ.get("RLPULSE_NODE") or socket.gethostname(),
            addr=addr or os.environ.get("RLPULSE_ADDR") or "0.0.0.0",
            certfile=cert,
            keyfile=keyfile or os.environ.get("RLPULSE_KEYFILE") or None,
            web_config=web,
            final_wait=final_wait
            if final_wait is not None
            else _env_float(FINAL_WAIT_ENV, FINAL_WAIT),
            expect_scrape=expect_scrape
            if expect_scrape is not None
            else _env_flag(EXPECT_SCRAPE_ENV),
            push_gateway=push_gateway or os.environ.get(PUSHGATEWAY_ENV) or None,
            targets_dir=targets_dir,
            strict=strict,
            gpu=local == 0 if gpu is None else gpu,
            host=local == 0 if host is None else host,
            process=process,
            label_cap=label_cap,
            unmapped_cap=unmapped_cap,
            nvml=nvml,
            collector_timeout=collector_timeout,
            collector_ttl=collector_ttl,
            config=config or {},
            metadata=metadata or {},
            rollouts=dict(rollouts or {}),
            key_map=key_map,
            reference_band=reference_band or os.environ.get(BAND_ENV) or None,
            drift_reference=drift_reference or os.environ.get(DRIFT_ENV) or None,
        )


def _port(value: object, where: str = "port") -> int:
    """A port number (0: any free port) from an argument; a one-line error naming it else."""
    if isinstance(value, bool) or not isinstance(value, int):
        text = value.strip() if isinstance(value, str) else None
        if text is None or not text.isdigit():
            raise ValueError(f"rlpulse: {where}={value!r} is not a port number (0-65535)")
        value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError(f"rlpulse: {where}={value} is not a port number (0-65535)")
    return value


def option_names() -> list[str]:
    """The keyword options ``Options.resolve`` takes."""
    return [p for p in inspect.signature(Options.resolve).parameters if p != "port"]


def check_names(given: Mapping[str, Any], extra: tuple[str, ...] = ()) -> None:
    """``TypeError`` naming an unknown option, with the nearest known one."""
    known = [*option_names(), "port", *extra]
    for name in given:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise TypeError(f"rlpulse: unknown option {name!r}{hint}")
