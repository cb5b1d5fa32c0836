"""Break-test regressions (issue 16, items 8 and 12): the local stack and the generator's
plumbing settings never leak a secret or let a setting inject into what Prometheus runs."""

from __future__ import annotations

import json
import re
import stat
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from rlpulse.offline.stackrun import REDACTED, Inbox
from rlpulse.stack import config

KEY = "R0UTING-KEY-0123456789abcdef"


def test_the_inbox_never_writes_a_routing_key_and_is_owner_only(tmp_path: Path) -> None:
    file = tmp_path / "inbox.jsonl"
    file.write_text("")
    file.chmod(0o644)  # as an older version left it
    inbox = Inbox(0, file)
    threading.Thread(target=inbox.serve_forever, daemon=True).start()
    try:
        event = {"routing_key": KEY, "event_action": "trigger", "payload": {"severity": "critical"}}
        req = urllib.request.Request(
            f"http://127.0.0.1:{inbox.server_address[1]}/pagerduty",
            data=json.dumps(event).encode(),
            headers={"Content-Type": "application/json"},
        )
        assert urllib.request.urlopen(req, timeout=10).status == 202
    finally:
        inbox.shutdown()
        inbox.server_close()
    text = file.read_text()
    assert KEY not in text
    assert json.loads(text)["body"]["routing_key"] == REDACTED
    assert stat.S_IMODE(file.stat().st_mode) == 0o600


ALIAS_BOMB = "\n".join(
    ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [
        f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]"
        for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    ]
)
BAD_PLUMBING = [
    ({"scrape": {"job_name": 'rlpulse"} or vector(1) or up{job="x'}}, "scrape.job_name"),
    ({"scrape": {"job_name": ""}}, "scrape.job_name"),
    ({"federation": {"job_name": "a b"}}, "federation.job_name"),
    ({"selectors": {"metrics": 'cluster="a'}}, "selectors.metrics"),
    ({"selectors": {"metrics": 'cluster="a"} or vector(1) or {x="'}}, "selectors.metrics"),
    ({"selectors": {"metrics": 'cluster="{{ .Values }}"'}}, "selectors.metrics"),
    ({"links": {"grafana_url": "http://g/{{ $labels.x }}"}}, "links.grafana_url"),
    ({"links": {"runbook_url": 'https://x/{{ printf "%s" }}'}}, "links.runbook_url"),
    ({"receivers": {"slack": {"channel": "#{{ .CommonLabels.x }}"}}}, "receivers.slack.channel"),
    ({"receivers": {"webhook": {"url": "http://in/{{ . }}"}}}, "receivers.webhook.url"),
    ({"receivers": {"pagerduty": {"url": "not a url"}}}, "receivers.pagerduty.url"),
]


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    path = tmp_path / "rlpulse.yaml"
    path.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB) < 600  # 9**9 strings once expanded
    with pytest.raises(config.ConfigError, match=r"rlpulse.yaml: line 2: YAML aliases") as err:
        config.load(path)
    assert len(str(err.value)) < 300


def test_a_config_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "rlpulse.yaml"
    path.write_bytes(b"scrape:\n  job_name: \xff\n")
    with pytest.raises(config.ConfigError, match=r"rlpulse.yaml: not UTF-8"):
        config.load(path)


@pytest.mark.parametrize(("doc", "where"), BAD_PLUMBING, ids=[w for _, w in BAD_PLUMBING])
def test_plumbing_that_would_inject_into_promql_or_templates_is_refused(
    doc: dict[str, Any], where: str
) -> None:
    with pytest.raises(config.ConfigError, match=re.escape(where)):
        config.from_dict(doc)


@pytest.mark.parametrize(
    "doc",
    [
        {"scrape": {"job_name": "team-a/rl.prod:v2"}},
        {"selectors": {"metrics": 'cluster="a", env=~"prod|stag\\"ing"'}},
        {"links": {"grafana_url": "https://grafana.example.com:3000/sub"}},
    ],
)
def test_inert_plumbing_is_accepted(doc: dict[str, Any]) -> None:
    config.from_dict(doc)
