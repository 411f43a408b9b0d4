"""Airflow glue for alerting: the ``evaluate_alerts`` task, which checks the alert rules
(``GROUPSCOPE_ALERT_RULES`` on top of the built-in ones) against a cluster's newest marts and
sends what the incidents owe through the channels that have an Airflow connection
(``groupscope.serve.airflow_channels``). The work is ``groupscope.pipeline.evaluate_alerts``.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import task
from airflow.sdk.exceptions import AirflowFailException
from groupscope_airflow import SETTINGS, warehouse_url

from groupscope.settings import reveal

log = logging.getLogger(__name__)


def evaluate_alerts(cluster: str) -> Any:
    """The task (call it inside a DAG): its summary (incidents changed, notifications, the
    outcome per channel) is its XCom; no secret is in it."""

    # all_done: the collector and quality-gate rules must be checked even when the marts
    # could not be refreshed.
    @task(task_id="evaluate_alerts", trigger_rule="all_done")
    def evaluate() -> dict[str, Any]:
        from groupscope import pipeline
        from groupscope.serve.airflow_channels import build_channels
        from groupscope.serve.rules import RulesError, load_rules

        try:
            rules = load_rules(SETTINGS.alert_rules)
        except RulesError as exc:  # a bad file does not get better on a retry
            raise AirflowFailException(str(exc)) from None
        channels, skipped = build_channels(rules, reveal(SETTINGS.alert_webhook_url))
        for name, why in sorted(skipped.items()):
            log.info("alert channel %s is not used: %s", name, why)
        return pipeline.evaluate_alerts(warehouse_url(), cluster, rules, channels,
                                        datetime.now(UTC), SETTINGS.snapshot_every,
                                        SETTINGS.dashboard_url)

    return evaluate()
