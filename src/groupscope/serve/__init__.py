"""Serve: what operators receive and read: alerts (``alerting``), the CLI's reports
(``report``) and the Grafana dashboards and alert rules (``grafana``)."""
