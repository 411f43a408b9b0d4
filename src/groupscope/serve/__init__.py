"""Serve: what operators receive and read (alerts, reports; dashboards next)."""
