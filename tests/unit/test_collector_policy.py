"""The collector's retry and concurrency policy, against a scripted admin client (pure logic:
the real-cluster behaviour is covered in tests/integration)."""

from __future__ import annotations

import concurrent.futures
import gc
import threading
from collections import defaultdict
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from groupscope.collect.collector import ClusterUnavailable, Collector, CollectorSettings
from groupscope.contract.model import Stage

TS = datetime(2026, 11, 21, tzinfo=UTC)


def _done(value: Any = None, error: int | None = None) -> concurrent.futures.Future[Any]:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(KafkaException(KafkaError(error)))
    return future


class ScriptedAdmin:
    """Groups g0..gN on one healthy topic; ``offsets_errors[group]`` lists the errors its
    successive OffsetFetch calls return before succeeding."""

    def __init__(self, groups: int, offsets_errors: dict[str, list[int]] | None = None,
                 metadata_error: int | None = None, committed_topic: str = "t",
                 classic_view: bool = False, no_offsets: frozenset[str] = frozenset()) -> None:
        self.groups = [f"g{i}" for i in range(groups)]
        self.classic_view = classic_view
        self.no_offsets = no_offsets
        self.committed_topic = committed_topic
        self.offsets_errors = defaultdict(list, offsets_errors or {})
        self.metadata_error = metadata_error
        self.calls: dict[str, int] = defaultdict(int)
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.pool = concurrent.futures.ThreadPoolExecutor(8)

    def list_topics(self, timeout: float) -> Any:
        if self.metadata_error is not None:
            raise KafkaException(KafkaError(self.metadata_error))
        partition = SimpleNamespace(leader=1, replicas=[1])
        return SimpleNamespace(
            brokers={1: None},
            topics={
                "t": SimpleNamespace(error=None, partitions={0: partition}),
                # being created or deleted: matters only if a group touches it
                "broken": SimpleNamespace(error=KafkaError(KafkaError.LEADER_NOT_AVAILABLE),
                                          partitions={}),
                "__consumer_offsets": SimpleNamespace(
                    error=None, partitions={p: partition for p in range(50)}),
            },
        )

    # What each ListGroups call's result lists as its failed brokers, call by call (a
    # KafkaError code per failed broker; none once the list runs out).
    listing_errors: list[list[int]] = []  # noqa: RUF012 (replaced per instance)

    def list_consumer_groups(self, **_: Any) -> Any:
        self.calls["list_groups"] += 1
        listing = [SimpleNamespace(group_id=g, is_simple_consumer_group=True, state=None,
                                   type=None) for g in self.groups]
        failed = self.listing_errors.pop(0) if self.listing_errors else []
        return _done(SimpleNamespace(valid=listing, errors=[KafkaError(c) for c in failed]))

    def list_groups(self, timeout: float) -> list[Any]:
        if not self.classic_view:
            return []
        return [SimpleNamespace(id=g, error=None, state="Empty", protocol_type="", protocol="",
                                members=[], broker=SimpleNamespace(id=1)) for g in self.groups]

    def describe_consumer_groups(self, group_ids: list[str], **_: Any) -> dict[str, Any]:
        self.calls["describe"] += len(group_ids)
        return {
            g: _done(SimpleNamespace(
                group_id=g, is_simple_consumer_group=True, members=[], partition_assignor="",
                state=SimpleNamespace(name="EMPTY"), type=SimpleNamespace(name="CLASSIC"),
                coordinator=SimpleNamespace(id=1)))
            for g in group_ids
        }

    def list_consumer_group_offsets(self, request: list[Any], **_: Any) -> dict[str, Any]:
        (req,) = request
        group = req.group_id
        self.calls[f"offsets:{group}"] += 1
        errors = self.offsets_errors[group]
        if errors:
            return {group: _done(error=errors.pop(0))}
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

        def answer() -> Any:
            threading.Event().wait(0.01)
            with self.lock:
                self.in_flight -= 1
            tp = SimpleNamespace(topic=self.committed_topic, partition=0, offset=5,
                                 leader_epoch=None,
                                 metadata="", error=None)
            return SimpleNamespace(topic_partitions=[] if group in self.no_offsets else [tp])

        return {group: self.pool.submit(answer)}

    def list_offsets(self, request: dict[Any, Any], **_: Any) -> dict[Any, Any]:
        # log start 0 (earliest, -2), the other kinds 10: the committed 5 lies between
        return {tp: _done(SimpleNamespace(offset=0 if getattr(spec, "_value", None) == -2
                                          else 10))
                for tp, spec in request.items()}

    # topic -> its DescribeConfigs error (else it answers the settings below)
    config_errors: dict[str, int] = {}  # noqa: RUF012 (replaced per instance, never mutated)

    def describe_configs(self, resources: list[Any], **_: Any) -> dict[Any, Any]:
        self.calls["describe_configs"] += 1
        entries = {"retention.ms": "604800000", "retention.bytes": "-1",
                   "segment.bytes": "1073741824", "cleanup.policy": "compact, delete",
                   "max.message.bytes": "1048588"}
        return {r: _done({k: SimpleNamespace(name=k, value=v) for k, v in entries.items()},
                         error=self.config_errors.get(r.name)) for r in resources}


def _collect(admin: ScriptedAdmin, **settings: Any) -> Any:
    collector = Collector(admin, "c", CollectorSettings(**settings), sleep=lambda _: None)
    return collector.snapshot(TS)


def test_coordinator_errors_are_retried_then_succeed() -> None:
    admin = ScriptedAdmin(3, {"g1": [KafkaError.NOT_COORDINATOR,
                                     KafkaError.COORDINATOR_LOAD_IN_PROGRESS]})
    snapshot = _collect(admin, attempts=3)
    assert snapshot.complete
    assert admin.calls["offsets:g1"] == 3
    assert {g.group_id: g.offsets[0].offset for g in snapshot.groups} == {
        "g0": 5, "g1": 5, "g2": 5}


def test_retries_are_bounded_and_the_failure_is_recorded() -> None:
    admin = ScriptedAdmin(2, {"g0": [KafkaError.NOT_COORDINATOR] * 10})
    snapshot = _collect(admin, attempts=3)
    assert admin.calls["offsets:g0"] == 3
    assert not snapshot.complete
    (error,) = snapshot.errors
    assert (error.stage, error.code, error.group_id, error.attempts) == (
        Stage.GROUP_OFFSETS, "NOT_COORDINATOR", "g0", 3)
    # the group is still in the snapshot, with what could be learned about it
    assert [g.group_id for g in snapshot.groups] == ["g0", "g1"]
    assert snapshot.groups[0].offsets == ()


def test_non_retriable_errors_are_not_retried() -> None:
    admin = ScriptedAdmin(1, {"g0": [KafkaError.GROUP_AUTHORIZATION_FAILED]})
    snapshot = _collect(admin, attempts=5)
    assert admin.calls["offsets:g0"] == 1
    assert [e.code for e in snapshot.errors] == ["GROUP_AUTHORIZATION_FAILED"]


def test_offset_fetches_stay_within_the_concurrency_bound() -> None:
    admin = ScriptedAdmin(60)
    snapshot = _collect(admin, offsets_concurrency=4)
    assert snapshot.complete and len(snapshot.groups) == 60
    assert 1 < admin.max_in_flight <= 4


@pytest.mark.parametrize("code", [KafkaError._TRANSPORT, KafkaError._AUTHENTICATION])
def test_an_unreachable_cluster_raises_a_clear_error(code: int) -> None:
    with pytest.raises(ClusterUnavailable, match="cluster 'c' is unavailable"):
        _collect(ScriptedAdmin(1, metadata_error=code))


def test_naive_snapshot_time_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Collector(ScriptedAdmin(1), "c").snapshot(datetime(2026, 1, 1))


def test_a_broken_topic_no_group_touches_does_not_make_the_snapshot_incomplete() -> None:
    assert _collect(ScriptedAdmin(2)).complete


def test_offsets_on_a_topic_missing_from_metadata_are_kept_and_flagged() -> None:
    snapshot = _collect(ScriptedAdmin(1, committed_topic="gone"))
    assert [(e.stage, e.code, e.topic) for e in snapshot.errors] == [
        (Stage.TOPIC_METADATA, "UNKNOWN_TOPIC_OR_PART", "gone")]
    assert snapshot.groups[0].offsets[0].topic == "gone"
    assert snapshot.partitions == ()  # never asked the brokers about it


def test_a_touched_topic_with_a_metadata_error_reports_that_error() -> None:
    snapshot = _collect(ScriptedAdmin(1, committed_topic="broken"))
    assert [(e.code, e.topic) for e in snapshot.errors] == [("LEADER_NOT_AVAILABLE", "broken")]


def test_memberless_groups_from_the_classic_view_need_no_describe() -> None:
    admin = ScriptedAdmin(50, classic_view=True, no_offsets=frozenset({"g7"}))
    snapshot = _collect(admin)
    # only the group whose offsets vanished is described again, to learn whether it still is
    assert admin.calls["describe"] == 1
    assert {g.state for g in snapshot.groups} == {"Empty"}
    assert all(g.coordinator_id == 1 and g.is_simple for g in snapshot.groups)


class LeaderDownAdmin(ScriptedAdmin):
    """ListOffsets of a partition whose leader is down: librdkafka answers -1001
    (OFFSET_INVALID) for it, without an error."""

    def list_offsets(self, request: dict[Any, Any], **_: Any) -> dict[Any, Any]:
        return {tp: _done(SimpleNamespace(offset=-1001 if tp.partition == 0 else 10))
                for tp in request}


def test_a_partition_without_an_offset_is_a_collection_error_not_a_bad_row() -> None:
    snapshot = _collect(LeaderDownAdmin(1))
    down = [p for p in snapshot.partitions if p.partition == 0]
    assert down and all(p.high_watermark is None and p.log_start is None for p in down)
    assert not snapshot.complete
    errors = [e for e in snapshot.errors if e.stage.value == "partition_offsets"]
    assert errors and all(e.partition == 0 for e in errors)
    assert "answered -1001, not an offset" in errors[0].message


class RacingAdmin(ScriptedAdmin):
    """The read-committed ListOffsets answers after more records were appended: its last
    stable offset reads above the high watermark answered a moment before."""

    def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Any]:
        from confluent_kafka import IsolationLevel

        later = kwargs.get("isolation_level") == IsolationLevel.READ_COMMITTED
        return {tp: _done(SimpleNamespace(offset=13 if later else 10)) for tp in request}


def test_last_stable_offset_is_read_at_the_high_watermarks_moment() -> None:
    snapshot = _collect(RacingAdmin(1))
    assert snapshot.partitions
    assert all(p.high_watermark == 10 and p.last_stable == 10 for p in snapshot.partitions)


def _offset_fetches(admin: ScriptedAdmin) -> int:
    return sum(n for call, n in admin.calls.items() if call.startswith("offsets:"))


def test_offset_fetches_take_turns_over_the_extra_connections() -> None:
    primary = ScriptedAdmin(30, {"g4": [KafkaError.NOT_COORDINATOR]})
    extra: list[ScriptedAdmin] = []

    def connect() -> ScriptedAdmin:
        extra.append(ScriptedAdmin(30))
        return extra[-1]

    collector = Collector(primary, "c", CollectorSettings(offset_fetch_connections=3),
                          sleep=lambda _: None, connect=connect)
    snapshot = collector.snapshot(TS)
    assert len(extra) == 2
    assert snapshot.complete and len(snapshot.groups) == 30
    assert all(g.offsets[0].offset == 5 for g in snapshot.groups)
    # 31 requests (g4 asked twice), in turns: 11, 10, 10; nothing else uses the extra ones
    assert sorted(_offset_fetches(a) for a in [primary, *extra]) == [10, 10, 11]
    assert all(set(a.calls) <= {f"offsets:g{i}" for i in range(30)} for a in extra)


def test_without_a_way_to_connect_every_request_uses_the_one_admin() -> None:
    admin = ScriptedAdmin(5)
    snapshot = _collect(admin, offset_fetch_connections=4)
    assert snapshot.complete and _offset_fetches(admin) == 5


def test_offset_fetch_connections_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="offset_fetch_connections must be at least 1"):
        CollectorSettings(offset_fetch_connections=0)


class ThresholdWatchingAdmin(ScriptedAdmin):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.thresholds: list[tuple[int, int, int]] = []

    def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Any]:
        self.thresholds.append(gc.get_threshold())
        return super().list_offsets(request, **kwargs)


def test_the_garbage_collector_runs_less_often_only_while_a_snapshot_runs() -> None:
    before = gc.get_threshold()
    admin = ThresholdWatchingAdmin(2)
    _collect(admin)
    assert admin.thresholds and all(t[0] >= 10_000 for t in admin.thresholds)
    assert gc.get_threshold() == before
    with pytest.raises(ClusterUnavailable):
        _collect(ScriptedAdmin(1, metadata_error=KafkaError._TRANSPORT))
    assert gc.get_threshold() == before


def test_each_touched_topics_retention_is_read_in_one_request() -> None:
    admin = ScriptedAdmin(3)
    snapshot = _collect(admin)
    assert admin.calls["describe_configs"] == 1
    (topic,) = snapshot.topics
    assert (topic.topic, topic.retention_ms, topic.retention_bytes, topic.segment_bytes,
            topic.cleanup_policy) == ("t", 604_800_000, -1, 1_073_741_824, "compact,delete")
    assert snapshot.complete and snapshot.errors == ()


def test_an_unreadable_retention_is_recorded_and_costs_no_completeness() -> None:
    admin = ScriptedAdmin(2)
    admin.config_errors = {"t": KafkaError.TOPIC_AUTHORIZATION_FAILED}
    snapshot = _collect(admin)
    (topic,) = snapshot.topics
    assert (topic.partition_count, topic.retention_ms, topic.cleanup_policy) == (1, None, None)
    assert [(e.stage.value, e.code, e.topic) for e in snapshot.errors] == [
        ("topic_configs", "TOPIC_AUTHORIZATION_FAILED", "t")]
    assert snapshot.complete


def test_topics_failing_alike_are_one_error() -> None:
    admin = ScriptedAdmin(1)
    admin.config_errors = dict.fromkeys(("a", "b", "c", "d"), KafkaError.TOPIC_AUTHORIZATION_FAILED)
    collector = Collector(admin, "c", CollectorSettings(), sleep=lambda _: None)
    errors: list[Any] = []
    found = collector._retention(["a", "b", "c", "d", "t"], errors)
    assert set(found) == {"t"}
    (error,) = errors
    assert (error.stage.value, error.code, error.topic) == (
        "topic_configs", "TOPIC_AUTHORIZATION_FAILED", None)
    assert error.message.startswith("4 topics (a, b, c, ...): "), error.message


def test_a_broker_that_let_listgroups_time_out_is_not_asked_again() -> None:
    # A killed broker, still in the metadata until the controller fences it: each ask waits
    # the whole request timeout. The others' groups are kept and the snapshot says what failed.
    admin = ScriptedAdmin(2)
    admin.listing_errors = [[KafkaError._TIMED_OUT]] * 3
    snapshot = _collect(admin)
    assert admin.calls["list_groups"] == 1
    assert [(e.stage, e.code, e.attempts) for e in snapshot.errors] == [
        (Stage.LIST_GROUPS, "_TIMED_OUT", 1)]
    assert len(snapshot.groups) == 2 and not snapshot.complete
    # A broker whose coordinator is loading answers at once: asked again, then listed.
    loading = ScriptedAdmin(2)
    loading.listing_errors = [[KafkaError.COORDINATOR_LOAD_IN_PROGRESS]]
    assert _collect(loading).complete and loading.calls["list_groups"] == 2


def test_expected_groups_no_longer_listed_are_probed_unless_the_listing_failed() -> None:
    """A group the snapshot before found: denied is an error, gone is nothing. A listing
    that failed (a killed broker) makes the snapshot partial already: probing the groups the
    broker coordinates would wait out its timeout, so none is."""
    def collect(admin: ScriptedAdmin) -> Any:
        return Collector(admin, "c", CollectorSettings(), sleep=lambda _: None,
                         expected_groups={"g0", "gone", "hidden"}).snapshot(TS)

    admin = ScriptedAdmin(1, {"hidden": [KafkaError.GROUP_AUTHORIZATION_FAILED]},
                          no_offsets=frozenset({"gone"}))
    snapshot = collect(admin)
    assert (admin.calls["offsets:g0"], admin.calls["offsets:gone"],
            admin.calls["offsets:hidden"]) == (1, 1, 1)
    assert [(e.stage, e.code, e.group_id) for e in snapshot.errors] == [
        (Stage.LIST_GROUPS, "GROUP_AUTHORIZATION_FAILED", "hidden")]
    assert [g.group_id for g in snapshot.groups] == ["g0"]

    broken = ScriptedAdmin(1)
    broken.listing_errors = [[KafkaError._TIMED_OUT]]
    snapshot = collect(broken)
    assert broken.calls["offsets:gone"] == broken.calls["offsets:hidden"] == 0
    assert [e.code for e in snapshot.errors] == ["_TIMED_OUT"]
