"""Every panel and variable query of every dashboard, with Grafana's macros expanded exactly
(groupscope.serve.grafana.macros), run as ``grafana_reader`` against a warehouse filled by the
real pipeline: real consumer groups on a real Kafka (among them ``'; drop table x; --``, a
unicode name and one of 249 characters, each with members that consumed and committed), the
collector's snapshots (share and streams groups included: a real share consumer in a hostile
group, a Kafka Streams application on the streams protocol), the offsets topic ingest, the
quality gate, ``warehouse load``, the lag, rebalance and skew jobs on Spark, and the alert
evaluation - the functions the DAGs call.

Each query returns rows and the columns its panel needs (a share or streams group's own panels
with a group of that kind); with each group, hostile ones
included, as the variable value it runs without error and without effect (a table ``x``
survives). The reader cannot write, cannot read the marts or raw tables, and is stopped by its
statement timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from conftest import unique
from kafkautil import commit_offsets, create_topic, create_word_count_topics, wait_until
from psycopg import errors

from groupscope import pipeline, warehouse
from groupscope.analyze.io import Interval
from groupscope.analyze.jobs import JobArgs
from groupscope.kafka.java_admin import JavaAdmin
from groupscope.serve.alerting.rules import load_rules
from groupscope.serve.grafana import READER_ROLE
from groupscope.serve.grafana.dashboards import build_all
from groupscope.serve.grafana.macros import expand
from groupscope_dev.kafka import KafkaCluster, kafka_libs
from groupscope_dev.kinds import (
    WORD_COUNT_INPUT,
    JavaProcesses,
    share_consumer,
    streams_instance,
)
from groupscope_dev.postgres import LocalPostgres

pytestmark = pytest.mark.integration

HOSTILE = ["'; drop table x; --", "grüße-消费者-🚀-ø", ("long-" + "g" * 244)[:249]]
MAIN = HOSTILE[0]  # the group every group panel must show rows for: hostile on purpose
# Groups with committed offsets only: a backslash before a quote (safe only while the reader's
# standard_conforming_strings is on) and a double quote (Grafana's sqlstring turns it into \",
# so such a group matches nothing in a panel, but its queries must still parse).
COMMIT_ONLY = ["x\\' OR true --", 'a"b']
# A share group (KIP-932) of one real share consumer, hostile too (a streams application's id
# names its internal topics, so it cannot be).
SHARE = "q'ueue ünï 队列 --"
# The panels of one kind (their titles' prefix) run with a group of that kind.
SHARE_PANELS, STREAMS_PANELS = "Share group:", "Streams group:"
JAVA_CLASSPATH = str(kafka_libs("4.3.1"))
# Panels that cannot have rows here, with the reason. Nothing else may come back empty.
NO_ROWS_EXPECTED = {
    # A coordinator moves when the broker leading its __consumer_offsets partition changes:
    # the test Kafka has one broker, so there is nowhere to move to. tests/integration/
    # test_coordinators.py moves a coordinator on the three-broker cluster and checks that
    # these two panels show the move, as grafana_reader.
    ("groupscope-coordinators", "Coordinator moves per hour"),
    ("groupscope-coordinators", "Coordinator moves"),
    # Every group here keeps up (a loss is forecast only for one that falls behind):
    # tests/integration/test_alert_causes.py draws this panel from a real forecast.
    ("groupscope-group", "Time until data loss (forecast)"),
}
NUMERIC = {"int2", "int4", "int8", "float4", "float8", "numeric"}
TIME = {"timestamp", "timestamptz"}
TIME_PANELS = {"timeseries", "state-timeline", "status-history"}
VALUE_PANELS = {"stat", "gauge", "bargauge", "barchart", "piechart"}


# -- the workload ------------------------------------------------------------------------------

class Member(threading.Thread):
    """A real member: consumes, and every half second commits its position less ``behind``."""

    def __init__(self, bootstrap: str, group: str, topic: str, behind: int = 0,
                 strategy: str = "range") -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "partition.assignment.strategy": strategy,
            "client.id": f"gq-{len(group)}"})
        self.topic, self.behind = topic, behind
        self.commits = 0
        self.assigned = threading.Event()  # its first assignment arrived (maybe empty)
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.consumer.subscribe([self.topic],
                                    on_assign=lambda _consumer, _partitions: self.assigned.set())
            last = 0.0
            while not self.stop_event.is_set():
                self.consumer.poll(0.1)
                owned = self.consumer.assignment()
                if owned and time.monotonic() - last >= 0.5:
                    positions = self.consumer.position(owned)
                    wanted = [TopicPartition(tp.topic, tp.partition, tp.offset - self.behind)
                              for tp in positions if tp.offset - self.behind > 0]
                    if wanted:
                        self.consumer.commit(offsets=wanted, asynchronous=False)
                        self.commits += 1
                    last = time.monotonic()
            self.consumer.close()
        except BaseException as exc:  # reported by the fixture
            self.error = exc


def _churn(bootstrap: str, group: str, topic: str, cycles: int) -> None:
    """A member joins, consumes, commits and leaves, ``cycles`` times: two rebalances each
    (a rebalance storm, more than the built-in rule's 10 an hour)."""
    for _ in range(cycles):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        deadline = time.monotonic() + 20
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.05)
        consumer.poll(0.05)
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        consumer.close()


def _produce(bootstrap: str, topics: dict[str, int], per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for topic, partitions in topics.items():
        for p in range(partitions):
            for i in range(per_partition):
                producer.produce(topic, value=b"%d" % i, partition=p)
    assert producer.flush(30) == 0


@dataclass
class Filled:
    database: str
    url: str
    reader_url: str
    cluster: str
    time_from: datetime
    time_to: datetime
    streams_app: str
    sleep: dict[str, Any] = field(default_factory=dict)


def _sleep_as_reader(reader_url: str, out: dict[str, Any]) -> None:
    """pg_sleep(11) as the reader, in the background while the fixture works (10 s saved)."""
    started = time.monotonic()
    try:
        with psycopg.connect(reader_url) as conn:
            conn.execute("SELECT pg_sleep(11)")
        out["error"] = None
    except psycopg.Error as exc:
        out["error"] = exc
    out["seconds"] = time.monotonic() - started


@pytest.fixture(scope="module")
def filled(kafka: KafkaCluster, postgres: LocalPostgres, spark: Any,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Filled]:
    database = unique("gq").replace("-", "_")
    url = postgres.create_database(database)
    reader_url = postgres.database_url(database, READER_ROLE, "grafana-reader")
    sleep: dict[str, Any] = {}
    sleeper = threading.Thread(target=_sleep_as_reader, args=(reader_url, sleep), daemon=True)
    sleeper.start()
    bootstrap = kafka.bootstrap
    cluster = unique("gq")
    landing = tmp_path_factory.mktemp("gq-landing")
    config = pipeline.cluster_config(cluster, {"bootstrap.servers": bootstrap})
    orders, single = unique("gq-orders"), unique("gq-single")
    create_topic(bootstrap, orders, 2)
    create_topic(bootstrap, single, 1)
    # WordCountDemo's topics are the run's, not this module's: nothing is produced to its
    # input here (test_group_kinds counts every record there).
    create_word_count_topics(bootstrap)
    topics = {orders: 2, single: 1}
    # The new kinds first: their JVMs start while the rest is set up.
    streams_app = unique("gq-wordcount")
    kind_logs = tmp_path_factory.mktemp("gq-kinds")
    kinds = JavaProcesses(kind_logs)
    share_consumer(kinds, bootstrap, orders, SHARE, "share")
    streams_instance(kinds, bootstrap, streams_app, "streams", kind_logs / "state")
    _produce(bootstrap, topics, 30)
    engine = warehouse.engine_for(url)
    warehouse.migrate(engine)
    with engine.begin() as conn:  # as the owner, as anyone could have made it
        conn.exec_driver_sql("CREATE TABLE public.x (v int); INSERT INTO public.x VALUES (1)")
    # MAIN: two range members behind on both partitions, a third joins later (a rebalance,
    # an idle member, eager advice); the unicode group lags on the single-partition topic;
    # the long one keeps up; the churn group storms.
    members = [Member(bootstrap, MAIN, orders, behind=3), Member(bootstrap, MAIN, orders, 3),
               Member(bootstrap, HOSTILE[1], single, behind=5),
               Member(bootstrap, HOSTILE[2], orders)]
    for m in members:
        m.start()
    for group in COMMIT_ONLY:
        commit_offsets(bootstrap, group, {(orders, 0): 1})
    stamps: list[datetime] = []
    try:
        wait_until(lambda: all(m.commits for m in members) or any(m.error for m in members),
                   60, "every member's first commit")
        # The reader's timed sleep is over first: starting this process's JVM holds the GIL,
        # which would delay the sleeper thread's measure.
        sleeper.join(30)
        _wait_for_the_kinds(bootstrap, streams_app)
        for i in range(4):
            if i == 2:
                late = Member(bootstrap, MAIN, orders, behind=3)
                late.start()
                members.append(late)
                # With 2 partitions and 3 range members one is idle and never commits: wait for
                # the rebalance to hand out the assignment, whoever gets the empty share.
                wait_until(lambda m=late: m.assigned.is_set() or m.error, 60,
                           "the late member's assignment")
                _churn(bootstrap, unique("gq-churn"), single, 7)
            _produce(bootstrap, topics, 20)
            time.sleep(0.7)  # the members commit what they read, less their lag
            ts = datetime.now(UTC)
            pipeline.collect(config, landing, ts, 15.0, java_classpath=JAVA_CLASSPATH)
            stamps.append(ts)
            time.sleep(1.0)
    finally:
        kinds.stop_all()
        for m in members:
            m.stop_event.set()
        for m in members:
            m.join(30)
    assert not [m.error for m in members if m.error]
    now = datetime.now(UTC)
    pipeline.ingest(config, landing, now, 15.0, 60.0)
    ids = pipeline.gate_landed(url, landing, cluster, now)
    assert pipeline.load(url, landing, cluster, ids, now) == len(stamps)
    end = stamps[-1] + timedelta(microseconds=1)
    lag = JobArgs(landing, cluster, Interval(stamps[0], end), url, timedelta(hours=1))
    pipeline.analytics(spark, lag, "lag")
    hours = Interval(*pipeline.analytics_interval(stamps[0], end, hourly=True))
    for kind in ("rebalance", "skew"):
        pipeline.analytics(spark, JobArgs(landing, cluster, hours, url, timedelta(hours=1)),
                           kind)
    pipeline.gate_marts(url, cluster, stamps[0], end, now)
    rules_file = landing / "rules.yaml"
    rules_file.write_text("rules:\n  - {name: lag_records_high, threshold: 0, for: 0s}\n")
    summary = pipeline.evaluate_alerts(url, cluster, load_rules(rules_file), {}, now,
                                       timedelta(seconds=30), "http://grafana.invalid")
    assert summary["firing"] + summary["pending"] > 0, summary
    engine.dispose()
    yield Filled(database, url, reader_url, cluster, stamps[0] - timedelta(hours=1),
                 now + timedelta(minutes=1), streams_app, sleep)
    postgres.drop_database(database)


def _wait_for_the_kinds(bootstrap: str, streams_app: str) -> None:
    """Until the share consumer holds its partitions and the Streams application is Stable
    with its tasks (the broker creates its internal topics first), asked of Kafka's Java
    Admin client in this process: the snapshots must see both from the first."""
    java = JavaAdmin.open({"bootstrap.servers": bootstrap}, JAVA_CLASSPATH, 15)

    def ready() -> bool:
        share = java.describe_share_groups([SHARE]).get(SHARE)
        streams = java.describe_streams_groups([streams_app]).get(streams_app)
        return (not isinstance(share, Exception) and share is not None
                and any(m.assignment for m in share.members)
                and not isinstance(streams, Exception) and streams is not None
                and streams.state == "Stable"
                and any(t for m in streams.members for t in m.tasks if not t.target))

    try:
        wait_until(ready, 120, "the share consumer and the Streams application")
    finally:
        java.close()


# -- the queries -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Query:
    dashboard: str
    title: str
    panel_type: str
    sql: str
    format: str


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or [])


def _queries() -> list[Query]:
    found = []
    for uid, dashboard in build_all().items():
        for panel in _panels(dashboard["panels"]):
            for target in panel.get("targets") or []:
                if target.get("rawSql"):
                    found.append(Query(uid, panel["title"], panel["type"], target["rawSql"],
                                       target.get("format", "time_series")))
        for variable in dashboard["templating"]["list"]:
            if variable.get("type") == "query":
                query = variable["query"]
                sql = query if isinstance(query, str) else (query.get("rawSql")
                                                              or query.get("query"))
                found.append(Query(uid, f"variable {variable['name']}", "variable", sql,
                                   "table"))
    return found


QUERIES = _queries()


def _run(conn: psycopg.Connection[Any], sql: str) -> tuple[list[tuple[str, str]], list[Any]]:
    with conn.cursor() as cursor:
        cursor.execute(sql.encode())  # bytes: run as sent, '%' and all
        names = [(c.name, _type_name(conn, c.type_code)) for c in cursor.description or []]
        return names, cursor.fetchall()


def _type_name(conn: psycopg.Connection[Any], oid: int) -> str:
    info = conn.adapters.types.get(oid)
    return info.name if info else str(oid)


@pytest.fixture(scope="module")
def reader(filled: Filled) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(filled.reader_url, autocommit=True) as conn:
        yield conn


def _variables(reader: psycopg.Connection[Any], filled: Filled, group: str) -> dict[str, Any]:
    """The variables as Grafana would set them: the cluster, the group, and *All* topics
    (every value the topic variable's query offers for that group)."""
    topic_sql = next(q.sql for q in QUERIES if q.title == "variable topic")
    variables: dict[str, Any] = {"cluster": filled.cluster, "group": group}
    _, rows = _run(reader, _expand(topic_sql, filled, variables))
    variables["topic"] = [r[0] for r in rows]
    return variables


def _group_for(query: Query, filled: Filled) -> str:
    """The group a group panel must show rows for: one of its kind for a kind's own panels."""
    if query.title.startswith(SHARE_PANELS):
        return SHARE
    if query.title.startswith(STREAMS_PANELS):
        return filled.streams_app
    return MAIN


def _expand(sql: str, filled: Filled, variables: dict[str, Any]) -> str:
    return expand(sql, time_from=filled.time_from, time_to=filled.time_to,
                  variables={k: v for k, v in variables.items() if k in sql})


def test_the_reader_role_names_agree() -> None:
    assert READER_ROLE == warehouse.READER_ROLE
    assert f"ROLE {READER_ROLE}" in warehouse.reader_role_sql()


def test_the_group_variable_offers_every_real_group(reader: psycopg.Connection[Any],
                                                    filled: Filled) -> None:
    sql = next(q.sql for q in QUERIES if q.title == "variable group")
    _, rows = _run(reader, _expand(sql, filled, {"cluster": filled.cluster}))
    groups = [r[0] for r in rows]
    assert set(HOSTILE + COMMIT_ONLY + [SHARE, filled.streams_app]) <= set(groups), groups
    assert any(g.startswith("gq-churn") for g in groups)


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: f"{q.dashboard}:{q.title}")
def test_every_query_returns_what_its_panel_needs(query: Query, reader: psycopg.Connection[Any],
                                                  filled: Filled) -> None:
    variables = _variables(reader, filled, _group_for(query, filled))
    sql = _expand(query.sql, filled, variables)
    columns, rows = _run(reader, sql)
    if (query.dashboard, query.title) in NO_ROWS_EXPECTED:
        assert not rows or query.panel_type in VALUE_PANELS, "allowlisted but has rows: drop it"
        return
    assert rows, f"no rows for {query.dashboard} / {query.title}:\n{sql}"
    types = dict(columns)
    if query.panel_type in TIME_PANELS or query.format == "time_series":
        assert "time" in types and (types["time"] in TIME or types["time"] in NUMERIC), columns
        if query.panel_type == "timeseries":
            assert any(t in NUMERIC for n, t in columns if n != "time"), columns
    if query.panel_type in VALUE_PANELS:
        assert any(t in NUMERIC for _, t in columns), columns
    if query.title.startswith("variable"):
        assert len(columns) == 1 and all(r[0] for r in rows)


def test_the_overview_tells_queues_from_streams_applications(
        reader: psycopg.Connection[Any], filled: Filled) -> None:
    """The Overview's own queries name each group's kind, and a Streams application's tasks
    per member add up to the tasks of its subtopologies (Group detail)."""
    def panel(dashboard: str, title: str, group: str = MAIN) -> list[dict[str, Any]]:
        query = next(q for q in QUERIES if (q.dashboard, q.title) == (dashboard, title))
        columns, rows = _run(reader, _expand(query.sql, filled,
                                             _variables(reader, filled, group)))
        return [dict(zip([c for c, _ in columns], row, strict=True)) for row in rows]

    kinds = {r["group_id"]: r["kind"]
             for r in panel("groupscope-overview", "Queues and Streams applications")}
    assert (kinds[SHARE], kinds[filled.streams_app]) == ("share", "streams"), kinds
    by_kind = panel("groupscope-overview", "Groups by kind")[0]
    assert by_kind["share (queues)"] >= 1 and by_kind["streams (Kafka Streams)"] >= 1
    assert by_kind["classic"] >= len(HOSTILE)
    members = panel("groupscope-group", "Streams group: tasks per member now",
                    filled.streams_app)
    subtopologies = panel("groupscope-group", "Streams group: subtopologies now",
                          filled.streams_app)
    assert len(members) == 1 and len(subtopologies) == 2  # WordCountDemo: split, then count
    assert members[0]["active_tasks"] == sum(s["active_tasks"] for s in subtopologies) > 0
    assert WORD_COUNT_INPUT in subtopologies[0]["source_topics"]
    share = panel("groupscope-group", "Share group: partitions now", SHARE)
    assert share and all(r["members"] == 1 for r in share), share  # its one consumer


def test_every_query_with_every_group_has_no_error_and_no_effect(
        reader: psycopg.Connection[Any], filled: Filled) -> None:
    group_sql = next(q.sql for q in QUERIES if q.title == "variable group")
    groups = [r[0] for r in _run(reader, _expand(group_sql, filled,
                                                  {"cluster": filled.cluster}))[1]]
    assert set(HOSTILE + COMMIT_ONLY) <= set(groups)
    ran = 0
    for group in groups:
        variables = _variables(reader, filled, group)
        for query in QUERIES:
            sql = _expand(query.sql, filled, variables)
            try:
                _run(reader, sql)
            except psycopg.Error as exc:
                pytest.fail(f"{query.dashboard} / {query.title} with group {group!r}: {exc}")
            ran += 1
    with psycopg.connect(filled.url) as owner:
        assert owner.execute("SELECT v FROM public.x").fetchall() == [(1,)]
    assert ran == len(groups) * len(QUERIES)


def test_the_reader_cannot_write(reader: psycopg.Connection[Any], filled: Filled) -> None:
    for sql in ("INSERT INTO public.x VALUES (2)", "CREATE TABLE serve.y (v int)",
                "DELETE FROM public.x"):
        with pytest.raises(errors.ReadOnlySqlTransaction):
            reader.execute(sql)
    # Read-only is a default it could turn off: the privileges are what stop it.
    with psycopg.connect(filled.reader_url) as conn:
        conn.execute("SET default_transaction_read_only = off")
        conn.commit()
        for sql in ("INSERT INTO public.x VALUES (2)", "CREATE TABLE serve.y (v int)",
                    "CREATE TABLE public.y (v int)",
                    f"INSERT INTO raw.snapshots (cluster) VALUES ('{filled.cluster}')"):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(sql)
            conn.rollback()


@pytest.mark.parametrize("table", ["raw.snapshots", "raw.consumer_groups", "mart.group_lag",
                                   "mart.group_status", "ops.alert_incidents",
                                   "ops.quality_results", "public.x"])
def test_the_reader_reads_only_serve(reader: psycopg.Connection[Any], table: str) -> None:
    with pytest.raises(errors.InsufficientPrivilege):
        reader.execute(f"SELECT * FROM {table} LIMIT 1")


def test_the_reader_is_stopped_by_the_statement_timeout(reader: psycopg.Connection[Any],
                                                        filled: Filled) -> None:
    assert reader.execute("SHOW statement_timeout").fetchone() == ("10s",)
    assert isinstance(filled.sleep["error"], errors.QueryCanceled), filled.sleep
    assert "statement timeout" in str(filled.sleep["error"])
    assert 9.5 < filled.sleep["seconds"] < 11, filled.sleep


def test_reader_role_is_rerunnable_and_new_views_are_readable(filled: Filled,
                                                              postgres: LocalPostgres) -> None:
    # A later migration's view (created by the owner) is readable without a new grant.
    with psycopg.connect(filled.url, autocommit=True) as owner:
        owner.execute("CREATE VIEW serve.gq_later AS SELECT 1 AS one")
    with psycopg.connect(filled.reader_url) as conn:
        assert conn.execute("SELECT one FROM serve.gq_later").fetchall() == [(1,)]
    engine = warehouse.engine_for(postgres.superuser_url(filled.database))
    try:
        with engine.connect() as conn:
            warehouse.create_reader_role(conn, "grafana-reader")
            warehouse.create_reader_role(conn, "grafana-reader")
    finally:
        engine.dispose()
    with psycopg.connect(filled.reader_url) as conn:
        assert conn.execute("SELECT one FROM serve.gq_later").fetchall() == [(1,)]


def test_grafana_alert_conditions_equal_groupscopes_own(filled: Filled) -> None:
    """serve.alert_conditions (what the exported Grafana rules read) unpivots the views
    groupscope's own evaluation reads (serve.group_conditions, serve.cluster_conditions): every
    group and cluster condition has the value observe() gives it, unknown ones excepted (no
    row: Grafana's NoData)."""
    from groupscope.serve.alerting.conditions import observe
    from groupscope.serve.alerting.kinds import COLLECTOR_KINDS, GROUP_KINDS

    engine = warehouse.engine_for(filled.url)
    try:
        with engine.connect() as conn:
            now = conn.exec_driver_sql("SELECT now()").scalar_one()
            # An unknown value is not a row of the view (Grafana's NoData).
            ours = {(o.group_id, o.condition): o.value for o in observe(
                conn, filled.cluster, GROUP_KINDS + COLLECTOR_KINDS, now,
                timedelta(seconds=30)) if o.unknown is None}
            view = {(g, c): v for g, c, v in conn.exec_driver_sql(
                "SELECT group_id, condition, value FROM serve.alert_conditions"
                " WHERE cluster = %(c)s", {"c": filled.cluster})}
    finally:
        engine.dispose()
    # The view states staleness in seconds (Grafana's rule divides by the snapshot interval).
    stale_s = view.pop(("", "collector_stale_s"))
    assert abs(stale_s / 30 - ours.pop(("", "collector_stale"))) < 1.0
    groups = {g for g, _ in ours if g}
    assert {MAIN, *HOSTILE[1:]} <= groups
    assert view.keys() == ours.keys()
    for key, value in ours.items():
        assert view[key] == pytest.approx(value), key
