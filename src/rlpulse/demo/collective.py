"""A simulated gradient all-reduce across data-parallel ranks, which can deadlock.

The demo trains one real rank; its peers are simulated. From ``hang_at_step`` on, a peer never
arrives at the collective, so ``all_reduce`` blocks on an event the way an NCCL all-reduce waits
for a rank that died silently: the process and its exporter stay up, training makes no progress.
"""

from __future__ import annotations

import threading

import numpy as np


class CollectiveAborted(RuntimeError):
    """The blocked collective was torn down (``abort()``), as a watchdog would."""


class PeerGroup:
    """All-reduce over one real rank and simulated peers that hold identical gradients."""

    def __init__(self, hang_at_step: int | None = None) -> None:
        self.hang_at_step = hang_at_step
        self.hanging = threading.Event()  # set while a call is blocked
        self._abort = threading.Event()

    def all_reduce(self, grad: np.ndarray, step: int) -> np.ndarray:
        """The mean gradient over ranks; blocks forever from ``hang_at_step`` on."""
        if self._abort.is_set():
            raise CollectiveAborted("collective aborted")
        if self.hang_at_step is not None and step >= self.hang_at_step:
            self.hanging.set()
            self._abort.wait()  # the missing peer never arrives
            raise CollectiveAborted(f"all_reduce at step {step} aborted: a peer never arrived")
        return grad

    def abort(self) -> None:
        """Unblock (and fail) a hanging or future collective."""
        self._abort.set()
