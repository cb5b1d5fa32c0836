"""Offline tools for finished runs: log readers (``logs``), replay through the generated rules
(``replay``), and the local stack those rules run in (``stackrun``)."""
