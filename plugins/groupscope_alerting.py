"""Airflow glue for alerting: the ``evaluate_alerts`` task, which checks the alert rules
(``GROUPSCOPE_ALERT_RULES`` on top of the built-in ones; a bad file: the last valid rules, and
an incident) against a cluster's newest marts and sends what the incidents owe through the
channels that have an Airflow connection (``groupscope.serve.alerting.airflow_channels``). The
work is ``groupscope.pipeline.alert_cycle``.

The task runs in two places: after ``live_marts`` in the live DAG (an alert as soon as a
snapshot's status is computed), and on its own cadence in the alerts DAG, so that a hung or
crashed Spark job delays the rules by a snapshot interval at most. Evaluations of a cluster
are serialised in the warehouse; running both is safe.

When the warehouse itself cannot be reached, the incidents cannot be evaluated (they live
there): the task then tells every channel straight, once per outage, and fails.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import task
from groupscope_airflow import SETTINGS, warehouse_url

from groupscope.settings import reveal


def evaluate_alerts(cluster: str) -> Any:
    """The task (call it inside a DAG): its summary (incidents changed, notifications, the
    outcome per channel) is its XCom; no secret is in it."""

    @task(task_id="evaluate_alerts")
    def evaluate() -> dict[str, Any]:
        from groupscope import pipeline
        from groupscope.serve.alerting.airflow_channels import build_channels

        fallback = reveal(SETTINGS.alert_webhook_url)
        return pipeline.alert_cycle(warehouse_url, cluster, SETTINGS.alert_rules,
                                    lambda rules: build_channels(rules, fallback),
                                    SETTINGS.snapshot_every, SETTINGS.dashboard_url,
                                    SETTINGS.alert_log.parent)

    return evaluate()
