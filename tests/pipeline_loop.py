"""One pass of what the snapshot DAG and the live DAG do for one snapshot (collect, gate,
load, live marts, evaluate the alerts; with ``ingest``, the offsets-topic DAG's ingest and
load of the rebalances too), in the test process: the scenario tests run it in a
loop, with time compressed through settings, instead of waiting for Airflow's schedule."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from groupscope import pipeline
from groupscope.contract.cluster import ClusterConfig


class Loop:
    """One pass = what the snapshot DAG and the live DAG do for one snapshot."""

    def __init__(self, cluster: str, bootstrap: str, url: str, landing: Path, spark: Any,
                 channels: dict[str, Any], rules: Any, *, ingest: bool = False) -> None:
        self.cluster = ClusterConfig(cluster, {"bootstrap.servers": bootstrap})
        self.url, self.landing, self.spark = url, landing, spark
        self.channels, self.rules, self.ingest = channels, rules, ingest
        self.last: datetime | None = None
        self.snapshot_every = timedelta(seconds=30)
        self.java_classpath = ""  # kafka-clients' jars: share and streams groups too
        self.summaries: list[dict[str, Any]] = []
        self.seconds: dict[str, list[float]] = {}

    def once(self) -> dict[str, Any]:
        now = datetime.now(UTC)
        clock = time.monotonic()

        def step(name: str) -> None:  # seconds per step, printed at the end
            nonlocal clock
            self.seconds.setdefault(name, []).append(time.monotonic() - clock)
            clock = time.monotonic()

        pipeline.collect(self.cluster, self.landing, now, 10.0,
                         java_classpath=self.java_classpath)
        step("collect")
        pipeline.check_and_load(self.url, self.landing, self.cluster.name, now)
        step("check and load")
        pipeline.live_analytics(self.spark, self.url, self.landing, self.cluster.name, now)
        step("live marts")
        if self.ingest:
            pipeline.ingest(self.cluster, self.landing, now, 10.0, 60.0)
            pipeline.load_generations(self.url, self.landing, self.cluster.name, now)
            step("ingest")
        summary = self.evaluate(now)
        step("evaluate")
        self.last = now
        return summary

    def evaluate(self, now: datetime) -> dict[str, Any]:
        summary = pipeline.evaluate_alerts(self.url, self.cluster.name, self.rules,
                                           self.channels, now, self.snapshot_every,
                                           "http://grafana.local:3000")
        self.summaries.append(summary)
        return summary

    def run(self, passes: int) -> None:
        for _ in range(passes):
            self.once()
