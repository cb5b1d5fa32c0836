"""rlpulse: observability for reinforcement-learning training on Prometheus, Grafana, Alertmanager."""

__version__ = "0.1.0"
