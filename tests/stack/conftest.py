"""Fixtures shared by the stack tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlpulse.runtime import workers
from rlpulse.runtime.exporter import Exporter


@pytest.fixture
def hub() -> Iterator[workers.WorkerHub]:
    """A started exporter (no GPU, host or process collectors) serving its worker hub."""
    exp = Exporter(port=0, run_id="workers", gpu=False, host=False, process=False).start()
    hub = workers.serve(exp)
    yield hub
    hub.close()
    exp.close()
