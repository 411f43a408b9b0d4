"""Alerts end to end on real components: a Kafka broker of this module's own (so only its
groups are seen), the warehouse, Spark, Airflow's Slack and SMTP notifiers, and local
receivers: an HTTP webhook, an HTTP server standing in for Slack's endpoint, and a real SMTP
server (aiosmtpd).

One snapshot loop (collect, gate, load, live marts, evaluate: what the snapshot and live DAGs
run) serves every scenario, in phases, with time compressed through settings (snapshots every
few seconds, a 6 s session timeout, commits every second or every 9 s):

1. healthy: a consumer committing every second, a bursty committer (every 9 s, three snapshot
   intervals), a caught-up consumer on an idle topic, a read_committed consumer behind a
   transactional producer (the marker's lag of 1): nothing is sent;
2. kill -9 of the first consumer: exactly one firing notification per channel, naming it;
3. it stays stopped: no repeat;
4. it restarts and catches up: exactly one resolved notification per channel;
5. twenty groups stop at once: one grouped notification per channel;
6. the webhook receiver is down while they resolve: Slack and e-mail are delivered, the
   incident records the webhook's failure, and the webhook gets it once it is back;
7. the same evaluation again: nothing is sent twice.

(The webhook's retry in 6 waits its backoff, ``retry_initial``: 1 s here, passes are seconds
apart.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from conftest import _cluster, _running
from kafkautil import create_topic, produce_counts, wait_until
from pipeline_loop import Loop
from sqlalchemy import text

from groupscope.serve.alerting.airflow_channels import build_channels
from groupscope.serve.alerting.rules import load_rules
from groupscope_dev.kafka import DEFAULT_KAFKA_VERSION
from groupscope_dev.mailcatcher import MailCatcher
from groupscope_dev.webhookcatcher import WebhookCatcher

pytestmark = pytest.mark.integration

CLUSTER = "alerting"
MEMBER = Path(__file__).resolve().parents[1] / "member_process.py"


@pytest.fixture(scope="module")
def broker(services_dir: Path) -> Iterator[Any]:
    yield from _running(_cluster(services_dir, "alerting", 1, DEFAULT_KAFKA_VERSION))


class Producing(threading.Thread):
    """Keeps appending records to a topic (a few per second per partition)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.stopping = topic, threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            for partition in range(3):
                self.producer.produce(self.topic, b"x", partition=partition)
            self.producer.poll(0)
            time.sleep(0.3)
        self.producer.flush(10)


class BurstyCommitter(threading.Thread):
    """Consumes continuously but commits only every ``every_s`` seconds: its position, or with
    ``processed`` the offset after the last record it got (what frameworks that commit what
    they processed do: after a transaction the marker stays uncommitted, a lag of 1)."""

    def __init__(self, bootstrap: str, group: str, topic: str, every_s: float,
                 processed: bool = False, **config: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", **config})
        self.topic, self.every_s, self.stopping = topic, every_s, threading.Event()
        self.processed, self.commits = processed, 0

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        last = time.monotonic()
        done: dict[int, int] = {}
        while not self.stopping.is_set():
            message = self.consumer.poll(0.1)
            if message is not None and message.error() is None:
                done[message.partition()] = message.offset() + 1
            if time.monotonic() - last >= self.every_s:
                try:
                    if self.processed:
                        if done:
                            self.consumer.commit(offsets=[
                                TopicPartition(self.topic, p, o) for p, o in done.items()],
                                asynchronous=False)
                            self.commits += 1
                    else:
                        self.consumer.commit(asynchronous=False)
                        self.commits += 1
                except Exception:  # nothing consumed yet
                    pass
                last = time.monotonic()
        self.consumer.close()


def _member(bootstrap: str, group: str, topic: str, *config: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, str(MEMBER), bootstrap, group, topic, *config],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def _wait_assigned(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("ASSIGNED"), line


RULES = """
keep_firing_for: 0s
repeat_interval: 4h
retry_initial: 1s  # a failed channel's retry after 1 s, not 30 s: time compressed
channels:
  - {name: webhook, kind: webhook, connection: alerting_webhook}
  - {name: slack, kind: slack, connection: alerting_slack}
  - {name: email, kind: email, connection: alerting_smtp, to: [oncall@example.com]}
"""


def _texts(receivers: dict[str, Any]) -> dict[str, list[str]]:
    return {"webhook": receivers["webhook"].texts, "slack": receivers["slack"].texts,
            "email": [str(m.get_body(preferencelist=("html",)).get_content())
                      for m in receivers["email"].mails()]}


def test_alerts_end_to_end(broker: Any, postgres: Any, warehouse_engine: Any, spark: Any,
                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bootstrap = broker.bootstrap
    webhook, slack = WebhookCatcher(), WebhookCatcher()
    webhook.start()
    slack.start()
    mail = MailCatcher(tmp_path / "mail")
    mail.start()
    monkeypatch.setenv("AIRFLOW_CONN_ALERTING_WEBHOOK", json.dumps(
        {"conn_type": "http", "password": f"http://127.0.0.1:{webhook.port}/hook"}))
    monkeypatch.setenv("AIRFLOW_CONN_ALERTING_SLACK", json.dumps(
        {"conn_type": "slackwebhook", "host": f"http://127.0.0.1:{slack.port}",
         "password": "/services/T000/B000/secret"}))
    monkeypatch.setenv(*mail.connection("alerting_smtp", "oncall@example.com"))
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(RULES)
    rules = load_rules(rules_file)
    built = build_channels(rules)
    channels, skipped = built.channels, built.skipped
    assert sorted(channels) == ["email", "slack", "webhook"], skipped
    receivers = {"webhook": webhook, "slack": slack, "email": mail}

    for topic in ("orders", "bursty", "idle", "txn", "fleet"):
        create_topic(bootstrap, topic, 3)
    produce_counts(bootstrap, "idle", [5, 5, 5])
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "alerting-txn"})
    txn.init_transactions(10)
    txn.begin_transaction()
    for partition in range(3):
        txn.produce("txn", b"t", partition=partition)
    txn.commit_transaction(10)
    producers = [Producing(bootstrap, "orders"), Producing(bootstrap, "bursty"),
                 Producing(bootstrap, "fleet")]
    for p in producers:
        p.start()

    fast_config = ("enable.auto.commit=true", "auto.commit.interval.ms=1000",
                   "session.timeout.ms=6000", "heartbeat.interval.ms=1000")
    payments = _member(bootstrap, "payments", "orders", *fast_config)
    idle = _member(bootstrap, "idle-reader", "idle", *fast_config)
    txn_reader = BurstyCommitter(bootstrap, "txn-reader", "txn", every_s=1.0, processed=True,
                                 **{"isolation.level": "read_committed"})
    bursty = BurstyCommitter(bootstrap, "bursty-committer", "bursty", every_s=9.0)
    for committer in (bursty, txn_reader):
        committer.start()
    members = [payments, idle]
    loop = Loop(CLUSTER, bootstrap, postgres.url, tmp_path / "landing", spark, channels,
                rules)
    began = time.monotonic()

    def phase(name: str) -> None:  # where the time goes, in the output of a failure
        print(f"[{time.monotonic() - began:6.1f} s] {name}, {len(loop.summaries)} passes",
              flush=True)

    try:
        for process in members:
            _wait_assigned(process)
        wait_until(lambda: bursty.commits >= 1 and txn_reader.commits >= 1, 60,
                   "the first commits of the bursty and transactional readers")

        # 1. Healthy: every group is judged, nothing is sent.
        phase("1. Healthy")
        loop.run(5)  # a pass takes about as long as the bursty committer's pause: 4+ bursts
        with warehouse_engine.connect() as conn:
            statuses = dict(conn.execute(text(
                "SELECT group_id, status FROM mart.group_status WHERE cluster = :c AND "
                "snapshot_ts = (SELECT max(snapshot_ts) FROM mart.group_status "
                "WHERE cluster = :c)"), {"c": CLUSTER}).fetchall())
        assert statuses == {"payments": "OK", "idle-reader": "OK", "txn-reader": "OK",
                            "bursty-committer": "OK"}, statuses
        assert _texts(receivers) == {"webhook": [], "slack": [], "email": []}

        # 2. kill -9: no LeaveGroup; the coordinator drops the member after its session.
        phase("2. kill -9")
        payments.send_signal(signal.SIGKILL)
        payments.wait()
        wait_until(lambda: loop.once()["firing"] >= 1 and all(_texts(receivers).values()),
                   120, "a firing notification on every channel")
        fired = _texts(receivers)
        for channel, texts in fired.items():
            assert len(texts) == 1, (channel, texts)
            assert "[FIRING] cluster alerting" in texts[0], texts[0]
            assert "payments" in texts[0] and "STOPPED" in texts[0], texts[0]
        assert "Members: 0 (Empty since" in fired["webhook"][0]
        assert webhook.bodies[0]["incidents"][0]["group"] == "payments"

        # 3. It stays stopped: no repeat.
        phase("3. It stays stopped")
        loop.run(2)
        assert {k: len(v) for k, v in _texts(receivers).items()} == \
            {"webhook": 1, "slack": 1, "email": 1}

        # 4. It comes back and catches up: one resolved message per channel.
        phase("4. It comes back and catches up")
        payments = _member(bootstrap, "payments", "orders", *fast_config)
        members.append(payments)
        _wait_assigned(payments)
        wait_until(lambda: loop.once()["firing"] == 0
                   and all(len(t) == 2 for t in _texts(receivers).values()),
                   120, "a resolved notification on every channel")
        for channel, texts in _texts(receivers).items():
            assert "[RESOLVED] cluster alerting, group payments" in texts[1], (channel, texts[1])
            assert "is over after" in texts[1]
        loop.run(1)
        assert all(len(t) == 2 for t in _texts(receivers).values())

        # 5. Twenty groups stop at once (a deployment shut their consumers down; their topic
        phase("5. Twenty groups stop at once")
        #    keeps growing).
        fleet = [f"fleet-{n:02d}" for n in range(20)]
        fleet_members = [BurstyCommitter(bootstrap, group, "fleet", every_s=1.0)
                         for group in fleet]
        for member in fleet_members:
            member.start()
        wait_until(lambda: all(m.commits >= 2 for m in fleet_members), 90,
                   "every fleet group's commits")
        loop.run(2)  # snapshots that see their members
        for member in fleet_members:
            member.stopping.set()
        for member in fleet_members:
            member.join(30)
        wait_until(lambda: loop.once()["firing"] >= 20
                   and all(len(t) == 3 for t in _texts(receivers).values()),
                   120, "one grouped notification per channel")
        loop.run(1)
        grouped = {k: v[2] for k, v in _texts(receivers).items()}
        assert {k: len(v) for k, v in _texts(receivers).items()} == \
            {"webhook": 3, "slack": 3, "email": 3}
        for channel, message in grouped.items():
            assert all(group in message for group in fleet), (channel, message)
        assert len(webhook.bodies[2]["incidents"]) >= 20

        # 6. The webhook is down while they resolve (the groups are deleted).
        phase("6. The webhook is down while they resolve")
        webhook.stop()
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures need it
        for future in admin.delete_consumer_groups(fleet, request_timeout=10).values():
            future.result(timeout=30)
        # Deleted: two complete snapshots in a row without them (one could be a coordinator
        # handing them over, which lists nothing for a while).
        loop.once()
        assert len(slack.texts) == 3
        loop.once()
        assert len(slack.texts) == 4 and len(mail.mails()) == 4
        assert "[RESOLVED] cluster alerting: " in slack.texts[3]
        with warehouse_engine.connect() as conn:
            failed = conn.execute(text(
                "SELECT count(*), min(error) FROM ops.alert_deliveries d "
                "JOIN ops.alert_incidents i USING (incident_id) WHERE i.cluster = :c "
                "AND d.channel = 'webhook' AND d.state = 'failed'"), {"c": CLUSTER}).one()
        assert failed[0] >= 20 and "webhook post failed" in failed[1], failed
        assert "127.0.0.1" not in failed[1] and "/hook" not in failed[1]  # no URL leaks
        webhook.start()
        loop.once()
        assert len(webhook.texts) == 4 and webhook.texts[3].startswith("[RESOLVED]")

        # 7. The same evaluation again sends nothing.
        phase("7. The same evaluation again sends nothing")
        before = {k: len(v) for k, v in _texts(receivers).items()}
        assert loop.last is not None
        loop.evaluate(loop.last)
        loop.evaluate(loop.last)
        assert {k: len(v) for k, v in _texts(receivers).items()} == before

        # Never a false alarm from the bursty, idle and transactional groups.
        with warehouse_engine.connect() as conn:
            noisy = conn.execute(text(
                "SELECT DISTINCT group_id FROM ops.alert_incidents WHERE cluster = :c "
                "AND group_id IN ('bursty-committer', 'idle-reader', 'txn-reader')"),
                {"c": CLUSTER}).fetchall()
            txn_lag = conn.execute(text(
                "SELECT max(lag) FROM mart.partition_lag WHERE cluster = :c "
                "AND group_id = 'txn-reader' AND snapshot_ts = (SELECT max(snapshot_ts) "
                "FROM mart.partition_lag WHERE cluster = :c)"), {"c": CLUSTER}).scalar_one()
        assert noisy == []
        assert txn_lag == 1  # the marker's lag was there, and judged OK
        assert bursty.commits >= 8
    finally:
        print("median seconds per pass step: " + ", ".join(
            f"{name} {sorted(values)[len(values) // 2]:.1f}"
            for name, values in loop.seconds.items()), flush=True)
        bursty.stopping.set()
        txn_reader.stopping.set()
        for p in producers:
            p.stopping.set()
        for process in members:
            if process.poll() is None:
                process.kill()
                process.wait()
        mail.stop()
        webhook.stop()
        slack.stop()
