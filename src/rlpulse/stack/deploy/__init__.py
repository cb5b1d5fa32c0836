"""Deployment files generated from the catalog and the alerts: Prometheus, Alertmanager,
docker-compose and Kubernetes."""
