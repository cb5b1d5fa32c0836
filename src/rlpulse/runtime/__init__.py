"""The in-trainer runtime: the exporter and its one-job parts (recording calls, the store, the
HTTP endpoint, scrapes, collectors, workers, lifecycle, discovery). Nothing here imports the
generator (``rlpulse.stack``)."""
