"""The stack's own dead man's switch (``rlpulse stack up``): Alertmanager posts the always-firing
RLWatchdog to the inbox's heartbeat checker; when the posts stop (here Alertmanager is stopped,
which is also what Prometheus failing to reach it looks like from outside) the checker pages
PagerDuty (the inbox standing in for it) itself, and resolves when they are back."""

from __future__ import annotations

import time
from pathlib import Path

from harness.stackutil import api, wait_for
from rlpulse.offline import stackrun
from tests.stack.test_faults_support import local_stack


def _missing(d: Path, action: str) -> list[dict]:
    return [
        n
        for n in stackrun.notifications(d)
        if n["path"] == "/pagerduty"
        and n["body"]["payload"]["custom_details"].get("alertname") == stackrun.MISSING
        and n["body"]["event_action"] == action
    ]


def test_silent_alerting_pipeline_pages_through_another_path(tmp_path: Path) -> None:
    with local_stack(tmp_path, []) as stack:
        opts = stackrun.StackOptions(
            dir=tmp_path, fast=True, inbox_port=stack.services["inbox"].port
        )
        assert "heartbeat checker" in stackrun.dead_mans_switch(opts)
        am = stack.services["alertmanager"]
        watchdog = f"{am.url}/api/v2/alerts?filter=alertname%3D%22RLWatchdog%22"
        wait_for(lambda: api(watchdog) or None, 120, "the Watchdog in Alertmanager")
        time.sleep(8)  # past missing_after (5 s in the fast preset): heartbeats keep coming
        assert not _missing(tmp_path, "trigger")
        stack.stop("alertmanager")
        (page,) = wait_for(lambda: _missing(tmp_path, "trigger") or None, 60, "the page")
        assert page["body"]["payload"]["severity"] == "critical"
        assert "No Watchdog heartbeat" in page["body"]["payload"]["summary"]
        assert page["body"]["routing_key"] == stackrun.REDACTED  # the key was sent
        stack.restart("alertmanager")
        wait_for(lambda: _missing(tmp_path, "resolve") or None, 60, "the resolve")
        assert am.port == stack.services["alertmanager"].port
