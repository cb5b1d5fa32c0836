"""The JSON files detection keeps between runs (a reference band, pinned drift references):
one object tagged with its kind and format version, read with errors that name the file."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def read(path: str | os.PathLike[str], what: str, tag: str, version: int) -> Mapping[str, Any]:
    """The object in ``path`` tagged ``{tag: version}``; ``ValueError`` starting ``what path:``."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{what} {path}: {exc}") from None
    if not isinstance(data, dict) or data.get(tag) != version:
        kind = tag.replace("_", " ")
        raise ValueError(f"{what} {path}: not an {kind} file ({tag}: {version})")
    return data


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    """``value`` when it is a mapping; else ``ValueError`` at ``where``."""
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected a mapping")
    return value
