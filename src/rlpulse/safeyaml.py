"""YAML for rlpulse's own small files (configs, web configs, key maps): safe, and bounded.

No aliases (``*name`` could expand a few hundred bytes into gigabytes), at most ``MAX_DEPTH``
levels of nesting (deeper ends Python's recursion), integers of at most ``MAX_INT_DIGITS`` digits
and files of at most ``MAX_CHARS`` characters (PyYAML reads a 50 MB scalar for over a minute).
A file past a limit raises ``LimitError`` (a ``yaml.YAMLError``) naming the line and column.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_CHARS = 4 << 20
MAX_DEPTH = 64
MAX_INT_DIGITS = 64


class LimitError(yaml.YAMLError):
    """A file past one of this module's limits; the message names where."""


def _at(mark: Any, what: str) -> LimitError:
    return LimitError(f"line {mark.line + 1}: {what} (column {mark.column + 1})")


class Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` within the limits above."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise _at(self.peek_event().start_mark, "YAML aliases (*name) are not allowed")
        if self._depth >= MAX_DEPTH:
            raise _at(self.peek_event().start_mark, f"nested deeper than {MAX_DEPTH} levels")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: Any) -> Any:
        if sum(c.isdigit() for c in node.value) > MAX_INT_DIGITS:
            raise _at(node.start_mark, f"a number longer than {MAX_INT_DIGITS} digits")
        return super().construct_yaml_int(node)


Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)


def load(text: str) -> Any:
    """The document in ``text``; ``LimitError`` past a limit, ``yaml.YAMLError`` if invalid."""
    if len(text) > MAX_CHARS:
        raise LimitError(f"{len(text)} characters; at most {MAX_CHARS}")
    return yaml.load(text, Loader=Loader)
