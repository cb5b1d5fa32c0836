"""What the tests and the benchmarks both run: a local Prometheus/Alertmanager stack and its
helpers, the fake NVML, the real trainings with induced failures, the alert matrix, the on-call
drill, the real-log corpus and the documentation's code blocks. Not part of the package."""
