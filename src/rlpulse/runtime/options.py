"""The exporter's options: its arguments, else the environment, else the defaults, checked once.

``Options`` is the table: each field is one option (its type, environment variable, parser,
check, default and meaning, spelled once), and ``Options.resolve`` walks it. It is the one place
the exporter reads the environment (``RLPULSE_TARGETS_DIR`` is read by
``rlpulse.runtime.discovery`` when the exporter starts). A misspelt option or a port that is no
port is a one-line ``TypeError``/``ValueError`` in the caller's terms: the argument or the
environment variable it came from.
"""

from __future__ import annotations

import difflib
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from rlpulse.runtime import webconfig
from rlpulse.runtime.store import MAX_LABEL_CHARS

DEFAULT_PORT = 9400
FINAL_WAIT = 60.0  # seconds the end of a run waits for a last scrape, by default
FINAL_WAIT_ENV = "RLPULSE_FINAL_WAIT"
PUSHGATEWAY_ENV = "RLPULSE_PUSHGATEWAY"


def _text(raw: str, var: str) -> str | None:
    return raw or None


def _int(raw: str, var: str) -> int | None:
    if raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {var}={raw!r} is not an integer") from None


def _float(raw: str, var: str) -> float | None:
    raw = raw.strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"environment variable {var}={raw!r} is not a number") from None


def _flag(raw: str, var: str) -> bool:
    return raw.strip().lower() not in ("", "0", "false", "no")


def _port(value: object, where: str) -> int:
    """A port number (0: any free port) from an argument; a one-line error naming it else."""
    if isinstance(value, bool) or not isinstance(value, int):
        text = value.strip() if isinstance(value, str) else None
        if text is None or not text.isdigit():
            raise ValueError(f"rlpulse: {where}={value!r} is not a port number (0-65535)")
        value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError(f"rlpulse: {where}={value} is not a port number (0-65535)")
    return value


def _label(value: str, where: str) -> str:
    if len(value) > MAX_LABEL_CHARS:
        raise ValueError(
            f"rlpulse: {where} is {len(value)} characters long; at most "
            f"{MAX_LABEL_CHARS} (it labels every series): {value[:40]!r}..."
        )
    return value


def _web_config(path: str | os.PathLike[str], where: str) -> webconfig.WebConfig:
    try:
        return webconfig.load(path)
    except webconfig.WebConfigError as exc:
        if where == "web_config":
            raise
        raise webconfig.WebConfigError(f"{where}: {exc}") from None


def _copy(value: Mapping[str, Any], where: str) -> dict[str, Any]:
    return dict(value)


@dataclass(frozen=True)
class Option:
    """How one option is resolved: the argument if given (not None; for a text option read
    from the environment, not empty either), else ``env`` read by ``parse`` (None: unset), else
    the default (``derive``d from the options before it, or ``default``). A given
    value passes ``check(value, where)``, ``where`` naming the argument or the variable."""

    doc: str
    default: Any = None
    env: str | None = None
    parse: Callable[[str, str], Any] = _text
    check: Callable[[Any, str], Any] | None = None
    derive: Callable[[Mapping[str, Any]], Any] | None = None  # the default, from those before

    def resolve(self, name: str, argument: Any, before: Mapping[str, Any]) -> Any:
        """This option's value from its ``argument`` and the options resolved ``before`` it."""
        value, where = argument, name
        text = self.env is not None and self.parse is _text
        if self.env is not None and (argument is None or (text and argument == "")):
            raw = os.environ.get(self.env)
            value, where = (None if raw is None else self.parse(raw, self.env)), self.env
        if value is None:
            return self.derive(before) if self.derive else self.default
        return self.check(value, where) if self.check else value


def _option(doc: str, default: Any = None, **how: Any) -> dict[str, Option]:
    """A field's metadata: the field is resolved as ``Option(doc, default, **how)`` says."""
    return {"option": Option(doc, default, **how)}


def _run(before: Mapping[str, Any]) -> str:
    return f"run-{uuid.uuid4().hex[:8]}"


def _hostname(before: Mapping[str, Any]) -> str:
    return socket.gethostname()


def _node_level(before: Mapping[str, Any]) -> bool:
    """Node-level readings once per node: on local rank 0."""
    return bool(before["local_rank"] == 0)


def _empty(before: Mapping[str, Any]) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Options:
    """What one exporter runs with: the arguments of ``resolve``, in resolution order."""

    rank: int = field(metadata=_option("the global rank", 0, env="RANK", parse=_int))
    local_rank: int = field(metadata=_option("the node's rank", 0, env="LOCAL_RANK", parse=_int))
    port: int = field(
        metadata=_option(
            "the base port; the port served is it plus the local rank (0: any free port)",
            DEFAULT_PORT,
            env="RLPULSE_PORT",
            parse=_int,
            check=_port,
        )
    )
    run_id: str = field(
        metadata=_option(
            "the run (labels every series)", env="RLPULSE_RUN_ID", check=_label, derive=_run
        )
    )
    node: str = field(metadata=_option("the node's name", env="RLPULSE_NODE", derive=_hostname))
    addr: str = field(metadata=_option("the address to serve on", "0.0.0.0", env="RLPULSE_ADDR"))
    certfile: str | None = field(metadata=_option("a TLS certificate file", env="RLPULSE_CERTFILE"))
    keyfile: str | None = field(
        metadata=_option("the certificate's key file", env="RLPULSE_KEYFILE")
    )
    web_config: webconfig.WebConfig | None = field(
        metadata=_option("a web config file (TLS, auth)", env=webconfig.ENV, check=_web_config)
    )
    final_wait: float = field(
        metadata=_option(
            "seconds the end waits for a last scrape", FINAL_WAIT, env=FINAL_WAIT_ENV, parse=_float
        )
    )
    expect_scrape: bool = field(
        metadata=_option("a scraper will come", False, env="RLPULSE_EXPECT_SCRAPE", parse=_flag)
    )
    push_gateway: str | None = field(
        metadata=_option("the Pushgateway an unscraped end goes to", env=PUSHGATEWAY_ENV)
    )
    targets_dir: str | os.PathLike[str] | None = field(
        metadata=_option("the file_sd directory (rlpulse.runtime.discovery)")
    )
    strict: bool = field(metadata=_option("bad input raises (for tests)", False))
    gpu: bool = field(metadata=_option("read GPUs at scrape time", derive=_node_level))
    host: bool = field(metadata=_option("read the host at scrape time", derive=_node_level))
    process: bool = field(metadata=_option("read this process at scrape time", True))
    label_cap: int = field(metadata=_option("values kept per user-data label", 64))
    unmapped_cap: int = field(metadata=_option("unmapped logged keys kept", 256))
    nvml: Any = field(metadata=_option("the NVML module to read GPUs with (tests)"))
    collector_timeout: float = field(
        metadata=_option("seconds a scrape-time reading may take", 0.5)
    )
    collector_ttl: float = field(metadata=_option("seconds a scrape-time reading is reused", 1.0))
    config: Mapping[str, Any] = field(metadata=_option("the run's hyperparameters", derive=_empty))
    metadata: Mapping[str, Any] = field(
        metadata=_option("the run's rl_run_info labels", derive=_empty)
    )
    rollouts: Mapping[str, Any] = field(
        metadata=_option("rlpulse.rollouts.Recorder's options", check=_copy, derive=_empty)
    )
    key_map: Mapping[str, Any] | str | os.PathLike[str] | None = field(
        metadata=_option("the user's own key map (a mapping or a file)")
    )
    reference_band: str | os.PathLike[str] | None = field(
        metadata=_option("a reference band to compare with", env="RLPULSE_REFERENCE_BAND")
    )
    drift_reference: str | os.PathLike[str] | None = field(
        metadata=_option("an earlier run's drift references", env="RLPULSE_DRIFT_REFERENCE")
    )

    @property
    def tls(self) -> bool:
        """Whether the endpoint serves HTTPS."""
        return bool(self.certfile) or (
            self.web_config is not None and self.web_config.tls is not None
        )

    @classmethod
    def resolve(cls, port: int | None = None, **arguments: Any) -> Options:
        """The options from arguments (the fields above), the environment and defaults;
        ``TypeError`` for an unknown option, ``ValueError`` for a bad environment value, an
        over-long run id or a certificate given twice."""
        check_names(arguments)
        given = {"port": port, **arguments}
        values: dict[str, Any] = {}
        for f in fields(cls):
            values[f.name] = f.metadata["option"].resolve(f.name, given.get(f.name), values)
        base, local = values["port"], values["local_rank"]
        if base and not 0 < base + local < 65536:
            raise ValueError(f"rlpulse: port {base} + local rank {local} is no TCP port")
        web = values["web_config"]
        if values["certfile"] and web is not None and web.tls is not None:
            raise ValueError(
                f"rlpulse: both certfile ({values['certfile']}) and tls_server_config in web "
                f"config {web.path}: give the certificate in one place"
            )
        return cls(**values | {"port": base + local if base else 0})


def option_names() -> list[str]:
    """The keyword options ``Options.resolve`` takes."""
    return [f.name for f in fields(Options) if f.name != "port"]


def check_names(given: Mapping[str, Any], extra: tuple[str, ...] = ()) -> None:
    """``TypeError`` naming an unknown option, with the nearest known one."""
    known = [*option_names(), "port", *extra]
    for name in given:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise TypeError(f"rlpulse: unknown option {name!r}{hint}")
