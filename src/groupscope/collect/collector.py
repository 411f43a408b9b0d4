"""Takes a complete snapshot of every consumer group of one cluster through the AdminClient.

Order of work, and the requests each step costs (B brokers, G groups, P touched partitions):
1. cluster metadata (1 Metadata request): brokers, topics and their partition counts, and the
   leaders of ``__consumer_offsets`` partitions for the coordinator check;
2. ListGroups (B requests) for consumer and simple groups, plus the classic ListGroups +
   DescribeGroups round (2B) that alone reveals groups of other protocol types (Connect...);
3. describe the groups, in batches (librdkafka fans out to each group's coordinator);
4. committed offsets: one OffsetFetch per group (the API takes one group), at most
   ``offsets_concurrency`` in flight;
5. log start, high watermark and last stable offset of every touched partition: three batched
   ListOffsets calls, which librdkafka splits by partition leader.

Every failure below the cluster level is recorded on the snapshot as a CollectionError and the
collection goes on; retriable coordinator errors are retried a bounded number of times first.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import queue
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from groupscope.contract.cluster import ClusterConfig
from groupscope.contract.model import (
    CollectionError,
    CommittedOffset,
    Group,
    GroupType,
    Member,
    PartitionOffsets,
    RecordTimestamp,
    Snapshot,
    Stage,
    TopicInfo,
    TopicPartition,
)
from groupscope.kafka.admin import ClusterUnavailable, open_admin
from groupscope.kafka.coordinator import offsets_partition_for
from groupscope.kafka.protocol import ProtocolDecodeError, decode_subscription
from groupscope.kafka.sampling import RecordSampler, SampleRequest

log = logging.getLogger(__name__)

__all__ = ["ClusterUnavailable", "Collector", "CollectorSettings", "take_snapshot"]

OFFSETS_TOPIC = "__consumer_offsets"

# Errors after which asking again, shortly, can succeed: the coordinator moved or is loading.
RETRIABLE = frozenset(
    {
        "NOT_COORDINATOR",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_LEADER_OR_FOLLOWER",
        "NOT_LEADER_FOR_PARTITION",
        "LEADER_NOT_AVAILABLE",
        "REQUEST_TIMED_OUT",
        "_TIMED_OUT",
        "_TRANSPORT",
        "UNKNOWN_LEADER_EPOCH",
        "OFFSET_NOT_AVAILABLE",
    }
)

_STATE_NAMES = {
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
    "UNKNOWN": "Unknown",
    "UNKOWN": "Unknown",
}


@dataclass(frozen=True)
class CollectorSettings:
    request_timeout_s: float = 30.0
    offsets_concurrency: int = 128
    describe_batch: int = 500
    describe_in_flight: int = 4  # batches
    list_offsets_batch: int = 5000
    attempts: int = 3  # per group or partition, for retriable errors
    retry_backoff_s: float = 0.5
    # One classic ListGroups + DescribeGroups round, batched per broker. It is the only way
    # to see groups of other protocol types (Connect...), and it fully describes memberless
    # classic groups, which then need no describe request of their own.
    classic_view: bool = True

    def __post_init__(self) -> None:
        for name in ("offsets_concurrency", "describe_batch", "describe_in_flight",
                     "list_offsets_batch", "attempts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.request_timeout_s <= 0:
            raise ValueError("request_timeout_s must be positive")


@dataclass(frozen=True, slots=True)
class _Failure:
    code: str
    message: str
    retriable: bool
    attempts: int = 1


def failure_of(exc: Any) -> _Failure:
    """Normalise what a future raised, or a bare KafkaError that a result lists, into
    (Kafka error name, message, retriable)."""
    if isinstance(exc, concurrent.futures.TimeoutError | TimeoutError):
        return _Failure("_TIMED_OUT", "no answer before the request timeout", True)
    if callable(getattr(exc, "name", None)):
        error: Any = exc
    else:
        error = exc.args[0] if getattr(exc, "args", None) else None
    name = getattr(error, "name", None)
    if callable(name):
        code = str(name())
        text = str(error.str()) if hasattr(error, "str") else str(error)
        retriable = code in RETRIABLE or bool(getattr(error, "retriable", lambda: False)())
        return _Failure(code, text, retriable)
    return _Failure("UNEXPECTED", f"{type(exc).__name__}: {exc}", False)


@dataclass
class _Metadata:
    brokers: set[int]
    topics: dict[str, TopicInfo]
    offsets_leaders: dict[int, int]  # __consumer_offsets partition -> leader broker id
    # Topics whose metadata came back with an error; they matter only if a group touches them.
    topic_errors: dict[str, CollectionError]


@dataclass
class _Listing:
    group_id: str
    group_type: GroupType
    state: str
    protocol_type: str | None
    # Filled for groups of other protocol types, which DescribeConsumerGroups refuses.
    assignor: str | None = None
    members: tuple[Member, ...] = ()


@dataclass(frozen=True)
class _Described:
    group_type: GroupType
    state: str
    protocol_type: str
    assignor: str | None
    coordinator_id: int | None
    members: tuple[Member, ...]
    from_classic_view: bool = False


T = TypeVar("T")


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass
class Collector:
    """Snapshots one cluster. ``admin`` is a confluent_kafka AdminClient (or anything with its
    methods); the caller owns its configuration, so security settings pass through unchanged."""

    admin: Any
    cluster: str
    settings: CollectorSettings = field(default_factory=CollectorSettings)
    sleep: Callable[[float], None] = time.sleep
    # Explains a cluster-level failure (librdkafka tells the reason only in its log).
    diagnose: Callable[[], str | None] = lambda: None
    requests: Counter[str] = field(default_factory=Counter)  # admin calls made, by API
    # Reads the record at lagging committed offsets (exact time lag); None: not sampled.
    sampler: Callable[[Sequence[SampleRequest]], tuple[list[RecordTimestamp],
                                                       list[tuple[SampleRequest, str]]]] \
        | None = None

    def snapshot(self, snapshot_ts: datetime) -> Snapshot:
        if snapshot_ts.tzinfo is None:
            raise ValueError("snapshot_ts must be timezone-aware (UTC)")
        metadata = self._metadata()
        errors: list[CollectionError] = []
        listings, classic_view = self._list_groups(errors)
        # Describing and fetching committed offsets are independent per group: overlap them.
        describe_errors: list[CollectionError] = []
        offsets_errors: list[CollectionError] = []
        with concurrent.futures.ThreadPoolExecutor(1, "groupscope-describe") as pool:
            describing = pool.submit(self._describe, listings, classic_view, describe_errors)
            committed = self._committed_offsets([g.group_id for g in listings], offsets_errors)
            described = describing.result()
        # An Empty group lives only as long as it has committed offsets. One the classic view
        # showed but whose offsets are gone now may have been deleted since: ask the broker.
        unconfirmed = [
            group_id for group_id, d in described.items()
            if d.from_classic_view and not committed.get(group_id)
        ]
        described.update(self._describe_groups(unconfirmed, describe_errors))
        errors += describe_errors + offsets_errors

        groups = tuple(
            self._assemble(listing, described.get(listing.group_id), committed, metadata,
                           classic_view.get(listing.group_id))
            for listing in listings
        )
        touched = self._touched_partitions(groups, metadata, errors)
        partitions = self._partition_offsets(touched, errors)
        # Partition counts of subscribed topics too: what-if needs them even for topics no
        # member owns or commits yet.
        subscribed = {t for g in groups for m in g.members for t in m.subscription or ()}
        used_topics = sorted(({tp.topic for tp in touched} | subscribed) & set(metadata.topics))
        record_timestamps = self._record_timestamps(groups, partitions, errors)
        return Snapshot(
            cluster=self.cluster,
            snapshot_ts=snapshot_ts,
            groups=tuple(sorted(groups, key=lambda g: g.group_id)),
            partitions=partitions,
            topics=tuple(metadata.topics[t] for t in used_topics),
            errors=tuple(errors),
            offsets_topic_partitions=len(metadata.offsets_leaders) or None,
            record_timestamps=tuple(record_timestamps),
        )

    def _record_timestamps(self, groups: Sequence[Group],
                           partitions: Sequence[PartitionOffsets],
                           errors: list[CollectionError]) -> list[RecordTimestamp]:
        if self.sampler is None:
            return []
        logs = {TopicPartition(p.topic, p.partition): p for p in partitions}
        requests = []
        for g in groups:
            for o in g.offsets:
                log = logs.get(TopicPartition(o.topic, o.partition))
                if (o.offset is None or log is None or log.high_watermark is None
                        or log.log_start is None):
                    continue
                if log.log_start <= o.offset < log.high_watermark:
                    requests.append(SampleRequest(TopicPartition(o.topic, o.partition),
                                                  o.offset, log.high_watermark - o.offset))
        if not requests:
            return []
        self.requests["Fetch(record timestamp)"] += 1
        try:
            found, missing = self.sampler(requests)
        except Exception as exc:  # sampling is an extra: its failure is recorded, not fatal
            failure = failure_of(exc)
            errors.append(_error(Stage.RECORD_TIMESTAMPS, failure))
            return []
        for request, reason in missing:
            errors.append(CollectionError(
                Stage.RECORD_TIMESTAMPS, "NO_RECORD", reason, topic=request.tp.topic,
                partition=request.tp.partition, retriable=True))
        return found

    def _unavailable(self, failure: _Failure) -> ClusterUnavailable:
        return ClusterUnavailable(_unavailable_message(self.cluster, failure, self.diagnose()))

    # -- 1. metadata -----------------------------------------------------------------------
    def _metadata(self) -> _Metadata:
        self.requests["Metadata"] += 1
        try:
            md = self.admin.list_topics(timeout=self.settings.request_timeout_s)
        except Exception as exc:
            failure = failure_of(exc)
            raise self._unavailable(failure) from None
        topic_errors: dict[str, CollectionError] = {}
        topics: dict[str, TopicInfo] = {}
        for name, topic in md.topics.items():
            if topic.error is not None:
                topic_errors[name] = CollectionError(
                    Stage.TOPIC_METADATA, topic.error.name(), topic.error.str(), topic=name,
                    retriable=bool(topic.error.retriable()),
                )
                continue
            topics[name] = TopicInfo(name, len(topic.partitions))
        offsets_leaders: dict[int, int] = {}
        if OFFSETS_TOPIC in md.topics and md.topics[OFFSETS_TOPIC].error is None:
            offsets_leaders = {
                pid: p.leader for pid, p in md.topics[OFFSETS_TOPIC].partitions.items()
            }
        return _Metadata(set(md.brokers), topics, offsets_leaders, topic_errors)

    # -- 2. list ---------------------------------------------------------------------------
    def _list_groups(
        self, errors: list[CollectionError]
    ) -> tuple[list[_Listing], dict[str, Any]]:
        listings: dict[str, _Listing] = {}
        result = None
        for attempt in range(1, self.settings.attempts + 1):
            self.requests["ListGroups"] += 1
            try:
                result = self.admin.list_consumer_groups(
                    request_timeout=self.settings.request_timeout_s
                ).result()
            except Exception as exc:
                failure = failure_of(exc)
                if failure.code in {"_TRANSPORT", "_TIMED_OUT", "_AUTHENTICATION"}:
                    raise self._unavailable(failure) from None
                failures = [failure]
            else:
                # A broker that could not answer (its coordinator loading, say) is one error
                # here while the other brokers' groups are listed.
                failures = [failure_of(e) for e in result.errors or ()]
            if not failures:
                break
            if attempt < self.settings.attempts and all(f.retriable for f in failures):
                self.sleep(self.settings.retry_backoff_s * 2 ** (attempt - 1))
                continue
            errors.extend(
                _error(Stage.LIST_GROUPS, dataclasses.replace(f, attempts=attempt))
                for f in failures
            )
            break
        if result is not None:
            for g in result.valid or ():
                listings[g.group_id] = _Listing(
                    group_id=g.group_id,
                    group_type=_group_type(getattr(g, "type", None)),
                    state=_state_name(getattr(g, "state", None)),
                    protocol_type="" if g.is_simple_consumer_group else "consumer",
                )
        classic_view = self._classic_view(errors) if self.settings.classic_view else {}
        for other in self._other_protocol_groups(classic_view, errors):
            listings.setdefault(other.group_id, other)
        return [listings[k] for k in sorted(listings)], classic_view

    def _classic_view(self, errors: list[CollectionError]) -> dict[str, Any]:
        """Every classic group as the brokers' ListGroups + DescribeGroups show it."""
        self.requests["ListGroups+DescribeGroups(classic, per broker)"] += 1
        try:
            with warnings.catch_warnings():
                # Deprecated in favour of the consumer-group APIs, which cannot see all this.
                warnings.simplefilter("ignore", DeprecationWarning)
                groups = self.admin.list_groups(timeout=self.settings.request_timeout_s)
        except Exception as exc:
            errors.append(_error(Stage.LIST_GROUPS, failure_of(exc)))
            return {}
        return {g.id: g for g in groups}

    def _other_protocol_groups(
        self, classic_view: dict[str, Any], errors: list[CollectionError]
    ) -> list[_Listing]:
        """Classic groups whose protocol type is neither consumer nor empty (Kafka Connect
        workers, schema registries...), which the consumer-group APIs leave out."""
        found: list[_Listing] = []
        for g in classic_view.values():
            if g.protocol_type in ("", "consumer", None):
                continue
            if g.error is not None and g.error.code() != 0:
                errors.append(
                    CollectionError(
                        Stage.DESCRIBE_GROUP, g.error.name(), g.error.str(), group_id=g.id
                    )
                )
            members = tuple(
                Member(
                    member_id=m.id,
                    client_id=m.client_id or "",
                    host=m.client_host or "",
                    instance_id=None,
                    assignment=(),  # a non-consumer protocol's assignment is opaque bytes
                )
                for m in g.members or ()
            )
            found.append(
                _Listing(
                    group_id=g.id,
                    group_type=GroupType.CLASSIC,
                    state=g.state or "Unknown",
                    protocol_type=g.protocol_type,
                    assignor=g.protocol or None,
                    members=members,
                )
            )
        return found

    # -- 3. describe -----------------------------------------------------------------------
    def _describe(
        self,
        listings: list[_Listing],
        classic_view: dict[str, Any],
        errors: list[CollectionError],
    ) -> dict[str, _Described]:
        described: dict[str, _Described] = {}
        wanted = []
        for listing in listings:
            if listing.protocol_type not in ("", "consumer"):
                continue  # other protocols: the classic view is all there is
            seen: Any = classic_view.get(listing.group_id)
            if listing.group_type is not GroupType.CONSUMER and _memberless(seen):
                described[listing.group_id] = _Described(
                    group_type=GroupType.CLASSIC, state=seen.state,
                    protocol_type=seen.protocol_type, assignor=seen.protocol or None,
                    coordinator_id=seen.broker.id if seen.broker is not None else None,
                    members=(), from_classic_view=True,
                )
            else:
                wanted.append(listing.group_id)
        described.update(self._describe_groups(wanted, errors))
        return described

    def _describe_groups(
        self, wanted: list[str], errors: list[CollectionError]
    ) -> dict[str, _Described]:
        described: dict[str, _Described] = {}

        def describe(batch: Sequence[str]) -> dict[str, concurrent.futures.Future[Any]]:
            self.requests["DescribeGroups"] += 1
            result: dict[str, concurrent.futures.Future[Any]] = (
                self.admin.describe_consumer_groups(
                    list(batch), request_timeout=self.settings.request_timeout_s
                )
            )
            return result

        outcomes = self._with_retries(wanted, describe, self.settings.describe_batch,
                                      in_flight=self.settings.describe_in_flight)
        for group_id, outcome in outcomes:
            if isinstance(outcome, _Failure):
                errors.append(_error(Stage.DESCRIBE_GROUP, outcome, group_id=group_id))
                continue
            if _state_name(outcome.state) == "Dead":
                # Listed a moment ago, gone now: deleted (or expired) mid-snapshot.
                errors.append(
                    CollectionError(
                        Stage.DESCRIBE_GROUP, "GROUP_ID_NOT_FOUND",
                        "the group was listed but no longer exists (deleted during the snapshot)",
                        group_id=group_id,
                    )
                )
            described[group_id] = _Described(
                group_type=_group_type(getattr(outcome, "type", None)),
                state=_state_name(outcome.state),
                protocol_type="" if outcome.is_simple_consumer_group else "consumer",
                assignor=outcome.partition_assignor or None,
                coordinator_id=outcome.coordinator.id if outcome.coordinator else None,
                members=tuple(sorted((_member(m) for m in outcome.members or ()),
                                     key=lambda m: m.member_id)),
            )
        return described

    # -- 4. committed offsets --------------------------------------------------------------
    def _committed_offsets(
        self, group_ids: list[str], errors: list[CollectionError]
    ) -> dict[str, tuple[CommittedOffset, ...]]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        committed: dict[str, tuple[CommittedOffset, ...]] = {}

        def fetch(batch: Sequence[str]) -> dict[str, concurrent.futures.Future[Any]]:
            (group_id,) = batch
            self.requests["OffsetFetch"] += 1
            result: dict[str, concurrent.futures.Future[Any]] = (
                self.admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group_id)],
                    request_timeout=self.settings.request_timeout_s,
                )
            )
            return result

        outcomes = self._with_retries(
            group_ids, fetch, batch=1, in_flight=self.settings.offsets_concurrency
        )
        for group_id, outcome in outcomes:
            if isinstance(outcome, _Failure):
                errors.append(_error(Stage.GROUP_OFFSETS, outcome, group_id=group_id))
                continue
            offsets = []
            for tp in outcome.topic_partitions or ():
                if tp.error is not None:
                    failure = failure_of(tp.error)
                    errors.append(
                        _error(Stage.GROUP_OFFSETS, failure, group_id=group_id,
                               topic=tp.topic, partition=tp.partition)
                    )
                offsets.append(
                    CommittedOffset(
                        topic=tp.topic,
                        partition=tp.partition,
                        offset=tp.offset if tp.offset >= 0 else None,
                        leader_epoch=tp.leader_epoch
                        if tp.leader_epoch is not None and tp.leader_epoch >= 0 else None,
                        metadata=tp.metadata or None,
                    )
                )
            committed[group_id] = tuple(sorted(offsets, key=lambda o: (o.topic, o.partition)))
        return committed

    # -- 5. partition offsets --------------------------------------------------------------
    def _touched_partitions(
        self, groups: Iterable[Group], metadata: _Metadata, errors: list[CollectionError]
    ) -> list[TopicPartition]:
        touched: set[TopicPartition] = set()
        for g in groups:
            touched.update(TopicPartition(o.topic, o.partition) for o in g.offsets)
            for m in g.members:
                touched.update(m.assignment)
                touched.update(m.target_assignment or ())
        known: list[TopicPartition] = []
        missing_topics: set[str] = set()
        for tp in sorted(touched):
            info = metadata.topics.get(tp.topic)
            if info is not None and tp.partition < info.partition_count:
                known.append(tp)
            elif info is None:
                missing_topics.add(tp.topic)
            else:
                errors.append(
                    CollectionError(
                        Stage.TOPIC_METADATA, "UNKNOWN_TOPIC_OR_PART",
                        f"partition not in the topic's metadata ({info.partition_count} "
                        "partitions)",
                        topic=tp.topic, partition=tp.partition,
                    )
                )
        for topic in sorted(missing_topics):
            errors.append(
                metadata.topic_errors.get(topic)
                or CollectionError(
                    Stage.TOPIC_METADATA, "UNKNOWN_TOPIC_OR_PART",
                    "groups hold offsets or assignments for a topic the cluster does not have "
                    "(deleted?)",
                    topic=topic,
                )
            )
        return known

    def _partition_offsets(
        self, partitions: list[TopicPartition], errors: list[CollectionError]
    ) -> tuple[PartitionOffsets, ...]:
        """Log start, high watermark and last stable offset: three kinds of ListOffsets,
        all in flight at once (a request carries one isolation level, so they cannot merge)."""
        from confluent_kafka import IsolationLevel
        from confluent_kafka import TopicPartition as KafkaTP
        from confluent_kafka.admin import OffsetSpec

        kinds: dict[str, tuple[Callable[[], Any], Any]] = {
            "log_start": (OffsetSpec.earliest, IsolationLevel.READ_UNCOMMITTED),
            "high_watermark": (OffsetSpec.latest, IsolationLevel.READ_UNCOMMITTED),
            "last_stable": (OffsetSpec.latest, IsolationLevel.READ_COMMITTED),
        }
        keys = [(kind, tp) for kind in kinds for tp in partitions]

        def lookup(
            batch: Sequence[tuple[str, TopicPartition]],
        ) -> dict[tuple[str, TopicPartition], concurrent.futures.Future[Any]]:
            futures: dict[tuple[str, TopicPartition], concurrent.futures.Future[Any]] = {}
            for kind in {k for k, _ in batch}:
                spec, isolation = kinds[kind]
                self.requests["ListOffsets"] += 1
                answer = self.admin.list_offsets(
                    {KafkaTP(tp.topic, tp.partition): spec() for k, tp in batch if k == kind},
                    isolation_level=isolation,
                    request_timeout=self.settings.request_timeout_s,
                )
                futures.update(
                    ((kind, TopicPartition(k.topic, k.partition)), f) for k, f in answer.items()
                )
            return futures

        values: dict[str, dict[TopicPartition, int]] = {kind: {} for kind in kinds}
        failed: dict[TopicPartition, _Failure] = {}
        outcomes = self._with_retries(keys, lookup, self.settings.list_offsets_batch,
                                      in_flight=len(kinds))
        for (kind, tp), outcome in outcomes:
            if isinstance(outcome, _Failure):
                failed.setdefault(tp, outcome)
            else:
                values[kind][tp] = int(outcome.offset)
        for tp, failure in sorted(failed.items()):
            errors.append(
                _error(Stage.PARTITION_OFFSETS, failure, topic=tp.topic, partition=tp.partition)
            )
        return tuple(
            PartitionOffsets(
                topic=tp.topic,
                partition=tp.partition,
                log_start=values["log_start"].get(tp),
                high_watermark=values["high_watermark"].get(tp),
                last_stable=_at_most(values["last_stable"].get(tp),
                                     values["high_watermark"].get(tp)),
            )
            for tp in partitions
        )

    # -- assembly --------------------------------------------------------------------------
    def _assemble(
        self,
        listing: _Listing,
        described: _Described | None,
        committed: dict[str, tuple[CommittedOffset, ...]],
        metadata: _Metadata,
        seen: Any | None,
    ) -> Group:
        expected = None
        if metadata.offsets_leaders:
            partition = offsets_partition_for(listing.group_id, len(metadata.offsets_leaders))
            expected = metadata.offsets_leaders.get(partition)
        offsets = committed.get(listing.group_id, ())
        if described is None:
            return Group(
                group_id=listing.group_id,
                group_type=listing.group_type,
                state=listing.state,
                protocol_type=listing.protocol_type,
                assignor=listing.assignor,
                coordinator_id=None,
                expected_coordinator_id=expected,
                members=listing.members,
                offsets=offsets,
                described=listing.protocol_type not in ("", "consumer"),
            )
        return Group(
            group_id=listing.group_id,
            group_type=(listing.group_type if described.group_type is GroupType.UNKNOWN
                        else described.group_type),
            state=described.state,
            protocol_type=described.protocol_type,
            assignor=described.assignor,
            coordinator_id=described.coordinator_id,
            expected_coordinator_id=expected,
            members=_with_subscriptions(described.members, seen),
            offsets=offsets,
        )

    # -- retries ---------------------------------------------------------------------------
    def _with_retries(
        self,
        keys: Sequence[T],
        submit: Callable[[Sequence[T]], dict[T, concurrent.futures.Future[Any]]],
        batch: int,
        in_flight: int | None = None,
    ) -> list[tuple[T, Any]]:
        """Runs ``submit`` over ``keys`` in batches, keeping at most ``in_flight`` batches
        outstanding, and resubmits keys that failed retriably, up to ``attempts`` times.
        Returns (key, result or _Failure) for every key."""
        results: list[tuple[T, Any]] = []
        pending: Sequence[T] = list(keys)
        for attempt in range(1, self.settings.attempts + 1):
            if not pending:
                break
            if attempt > 1:
                self.sleep(self.settings.retry_backoff_s * 2 ** (attempt - 2))
            retry: list[T] = []
            for key, outcome in self._run_batches(pending, submit, batch, in_flight):
                if (
                    isinstance(outcome, _Failure)
                    and outcome.retriable
                    and attempt < self.settings.attempts
                ):
                    retry.append(key)
                elif isinstance(outcome, _Failure):
                    results.append((key, dataclasses.replace(outcome, attempts=attempt)))
                else:
                    results.append((key, outcome))
            pending = retry
        return results

    def _run_batches(
        self,
        keys: Sequence[T],
        submit: Callable[[Sequence[T]], dict[T, concurrent.futures.Future[Any]]],
        batch: int,
        in_flight: int | None,
    ) -> Iterator[tuple[T, Any]]:
        """Yields (key, result or _Failure) as answers arrive. Completed futures report
        through a queue, so each answer costs O(1) however many are in flight."""
        limit = (in_flight or 1) * batch
        timeout = self.settings.request_timeout_s + 5
        batches = iter(_chunks(keys, batch))
        completed: queue.SimpleQueue[tuple[T, concurrent.futures.Future[Any]]] = (
            queue.SimpleQueue()
        )
        outstanding: dict[concurrent.futures.Future[Any], T] = {}

        def track(key: T, future: concurrent.futures.Future[Any]) -> None:
            outstanding[future] = key

            def report(done: concurrent.futures.Future[Any]) -> None:
                completed.put((key, done))

            future.add_done_callback(report)

        def top_up() -> None:
            while len(outstanding) < limit:
                chunk = next(batches, None)
                if chunk is None:
                    return
                try:
                    futures = submit(chunk)
                except Exception as exc:  # a refused call fails its keys, not the snapshot
                    for key in chunk:
                        refused: concurrent.futures.Future[Any] = concurrent.futures.Future()
                        refused.set_exception(exc)
                        track(key, refused)
                    continue
                for key, future in futures.items():
                    track(key, future)

        top_up()
        while outstanding:
            try:
                key, future = completed.get(timeout=timeout)
            except queue.Empty:
                for future, key in list(outstanding.items()):
                    future.cancel()
                    del outstanding[future]
                    yield key, _Failure("_TIMED_OUT", "no answer before the request timeout", True)
                continue
            if outstanding.pop(future, None) is None:
                continue  # already reported as timed out
            try:
                yield key, future.result()
            except Exception as exc:
                yield key, failure_of(exc)
            top_up()


def _error(
    stage: Stage,
    failure: _Failure,
    *,
    group_id: str | None = None,
    topic: str | None = None,
    partition: int | None = None,
) -> CollectionError:
    return CollectionError(
        stage=stage, code=failure.code, message=failure.message, group_id=group_id,
        topic=topic, partition=partition, retriable=failure.retriable, attempts=failure.attempts,
    )


def _with_subscriptions(members: tuple[Member, ...], seen: Any | None) -> tuple[Member, ...]:
    """Adds each member's subscribed topics, decoded from the metadata the classic view
    carries (ConsumerProtocolSubscription). Undecodable metadata leaves it unknown."""
    if seen is None or seen.protocol_type != "consumer":
        return members
    metadata = {m.id: m.metadata for m in seen.members or ()}
    out = []
    for member in members:
        raw = metadata.get(member.member_id)
        topics = None
        if raw:
            try:
                topics = tuple(sorted(decode_subscription(raw).topics))
            except ProtocolDecodeError:
                log.warning("undecodable subscription of a member of %r", seen.id)
        out.append(dataclasses.replace(member, subscription=topics))
    return tuple(out)


def _memberless(seen: Any) -> bool:
    """A classic group the classic view describes completely: answered without error, a
    consumer (or simple) group, Empty, no members. Anything else is described on its own."""
    return (
        seen is not None
        and (seen.error is None or seen.error.code() == 0)
        and seen.protocol_type in ("", "consumer")
        and seen.state == "Empty"
        and not seen.members
    )


def _member(m: Any) -> Member:
    target = getattr(m, "target_assignment", None)
    return Member(
        member_id=m.member_id,
        client_id=m.client_id or "",
        host=m.host or "",
        instance_id=m.group_instance_id or None,
        assignment=tuple(sorted(_tps(m.assignment))),
        target_assignment=tuple(sorted(_tps(target))) if target is not None else None,
    )


def _tps(assignment: Any) -> list[TopicPartition]:
    if assignment is None:
        return []
    return [TopicPartition(tp.topic, tp.partition) for tp in assignment.topic_partitions or ()]


def _group_type(value: Any) -> GroupType:
    name = getattr(value, "name", str(value or "")).upper()
    if name == "CONSUMER":
        return GroupType.CONSUMER
    if name == "CLASSIC":
        return GroupType.CLASSIC
    return GroupType.UNKNOWN


def _state_name(value: Any) -> str:
    name = getattr(value, "name", str(value or "UNKNOWN")).upper()
    return _STATE_NAMES.get(name, name.title())


def _unavailable_message(cluster: str, failure: _Failure, detail: str | None) -> str:
    hints = {
        "_TRANSPORT": "no broker answered; check bootstrap.servers and the network",
        "_TIMED_OUT": "no broker answered in time; check bootstrap.servers and the network",
        "_AUTHENTICATION": "authentication failed; check the SASL/SSL settings",
        "_ALL_BROKERS_DOWN": "all brokers are down or unreachable",
        "_RESOLVE": "a bootstrap host name does not resolve",
        "CLUSTER_AUTHORIZATION_FAILED": "not authorized to describe the cluster",
        "TOPIC_AUTHORIZATION_FAILED": "not authorized to describe topics",
    }
    hint = hints.get(failure.code, failure.message)
    if detail and detail.startswith("authentication failed"):
        hint = detail  # a transport failure whose cause is the credentials
    elif detail:
        hint = f"{hint}: {detail}"
    return f"cluster {cluster!r} is unavailable: {hint} ({failure.code})"


def _at_most(last_stable: int | None, high_watermark: int | None) -> int | None:
    """The last stable offset never exceeds the high watermark at any one moment, but the two
    are answered by separate requests in flight together: one that arrives after more records
    were appended can read higher. Read at the high watermark's moment, it is at most that."""
    if last_stable is None or high_watermark is None:
        return last_stable
    return min(last_stable, high_watermark)


def take_snapshot(cluster: ClusterConfig, timeout_s: float, snapshot_ts: datetime,
                  sample_records: bool = True) -> Snapshot:
    """A snapshot of ``cluster``; ``sample_records`` also reads the record at each lagging
    committed offset (bounded: see groupscope.kafka.sampling) for the exact time lag. Raises
    ConfigError (bad client settings) or ClusterUnavailable."""
    connection = open_admin(cluster, timeout_s)
    collector = Collector(connection.admin, cluster.name,
                          CollectorSettings(request_timeout_s=timeout_s),
                          diagnose=connection.diagnosis,
                          sampler=RecordSampler(cluster.client, timeout_s=timeout_s)
                          if sample_records else None)
    return collector.snapshot(snapshot_ts)
