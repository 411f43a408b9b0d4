"""Takes a complete snapshot of every consumer group of one cluster through the AdminClient.

Order of work, and the requests each step costs (B brokers, G groups, P touched partitions):
1. cluster metadata (1 Metadata request): brokers, topics and their partition counts, and the
   leaders of ``__consumer_offsets`` partitions for the coordinator check;
2. ListGroups (B requests) for consumer and simple groups, plus the classic ListGroups +
   DescribeGroups round (2B) that alone reveals groups of other protocol types (Connect...);
3. describe the groups, in batches (librdkafka fans out to each group's coordinator);
4. committed offsets: one OffsetFetch per group (the API takes one group, and librdkafka
   sends a FindCoordinator before each), at most ``offsets_concurrency`` in flight, taking
   turns over ``offset_fetch_connections`` clients; the same for each group the snapshot
   before found that ListGroups no longer lists (usually none): deleted, or hidden from it;
5. log start, high watermark and last stable offset of every touched partition: three batched
   ListOffsets calls, which librdkafka splits by partition leader;
6. the retention settings of the touched topics: one DescribeConfigs request per 1,000
   topics (the loss forecast's inputs).

Every failure below the cluster level is recorded on the snapshot as a CollectionError and the
collection goes on; retriable coordinator errors are retried a bounded number of times first.

This module orders the calls and overlaps them. The calls themselves, and the reading of their
answers into plain data, are in groupscope.kafka.adapter; what a failure means (retry, record,
give up) is in groupscope.collect.policy; the snapshot is put together from the plain answers
by groupscope.collect.assemble, which does no I/O.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import gc
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from groupscope.collect.assemble import (
    apparent_losses,
    assemble_groups,
    assemble_snapshot,
    classic_descriptions,
    coordinator_outages,
    kind_groups,
    other_kinds_hinted,
    other_protocol_listings,
    partition_offsets,
    record_timestamp_requests,
    touched_partitions,
    unlisted_errors,
    unlisted_groups,
    with_rereads,
)
from groupscope.collect.policy import (
    CLUSTER_UNREACHABLE,
    TIMEOUTS,
    Failure,
    RetryPolicy,
    collection_error,
    failure_of,
    unavailable_message,
)
from groupscope.contract.cluster import ClusterConfig, ConfigError
from groupscope.contract.model import (
    JAVA_ADMIN_TYPES,
    CollectionError,
    CommittedOffset,
    Group,
    GroupType,
    PartitionOffsets,
    RecordTimestamp,
    Snapshot,
    Stage,
    TopicPartition,
)
from groupscope.kafka.adapter import (
    OFFSET_KINDS,
    AdminAdapter,
    ClassicGroup,
    ClusterMetadata,
    ConsumerGroupListing,
    Described,
    Listing,
    OffsetKind,
    Retention,
    read_classic_view,
    read_committed,
    read_description,
    read_listing,
    read_metadata,
    read_offset,
    read_retention,
)
from groupscope.kafka.admin import ClusterUnavailable, open_admin
from groupscope.kafka.java_admin import JavaAdmin
from groupscope.kafka.sampling import RecordSampler, SampleRequest

__all__ = ["ClusterUnavailable", "Collector", "CollectorSettings", "take_snapshot"]


# A snapshot allocates several objects per group and per committed offset (futures, answers,
# records) and keeps most of them. At CPython's default threshold (700 allocations) the cyclic
# garbage collector runs about 1,500 times in a snapshot of 20,000 groups, a quarter of its
# CPU; at this one, about 100 times (docs/benchmarks.md). Made rarer, never switched off.
_SNAPSHOT_GC_THRESHOLD = 10_000
# Topics per DescribeConfigs request: one request for most clusters, a bounded one for any.
TOPIC_CONFIGS_BATCH = 1000
_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved: tuple[int, int, int] = gc.get_threshold()


@contextlib.contextmanager
def _rarer_collections() -> Iterator[None]:
    """The collector's threshold while any snapshot runs (snapshots may overlap in threads);
    the process's own restored when the last one ends."""
    global _gc_users, _gc_saved
    with _gc_lock:
        if _gc_users == 0:
            _gc_saved = gc.get_threshold()
            first, *rest = _gc_saved
            gc.set_threshold(max(first, _SNAPSHOT_GC_THRESHOLD), *rest)
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0:
                gc.set_threshold(*_gc_saved)


@dataclass(frozen=True)
class CollectorSettings:
    request_timeout_s: float = 30.0
    offsets_concurrency: int = 128
    # AdminClients (so connections to each coordinator) the OffsetFetch requests are spread
    # over; the extra ones are opened with Collector.connect. See docs/benchmarks.md.
    offset_fetch_connections: int = 3
    describe_batch: int = 500
    describe_in_flight: int = 4  # batches
    list_offsets_batch: int = 5000
    attempts: int = 3  # per group or partition, for retriable errors
    retry_backoff_s: float = 0.5
    # One classic ListGroups + DescribeGroups round, batched per broker. It is the only way
    # to see groups of other protocol types (Connect...), and it fully describes memberless
    # classic groups, which then need no describe request of their own.
    classic_view: bool = True
    # Share and streams groups, through Kafka's Java Admin client (groupscope.kafka.java_admin):
    # "auto" asks for them only when the classic view hints that the cluster has some (no JVM
    # otherwise), "always" on every snapshot, "never" not at all.
    group_kinds: str = "auto"
    # The jars of the Java Admin client (kafka-clients, slf4j-api): jars, folders or globs,
    # separated by os.pathsep.
    java_classpath: str = ""
    # Groups expected (Collector.expected_groups) that ListGroups no longer lists, probed with
    # an OffsetFetch each: at most this many per snapshot (the others are one error).
    unlisted_probes: int = 1000

    def __post_init__(self) -> None:
        if self.group_kinds not in ("auto", "always", "never"):
            raise ValueError("group_kinds must be auto, always or never")
        for name in ("offsets_concurrency", "offset_fetch_connections", "describe_batch",
                     "describe_in_flight", "list_offsets_batch", "attempts",
                     "unlisted_probes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.request_timeout_s <= 0:
            raise ValueError("request_timeout_s must be positive")


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
    # Opens another AdminClient of the same cluster, configured as ``admin`` is, for the
    # settings' extra OffsetFetch connections; None: every request goes through ``admin``.
    connect: Callable[[], Any] | None = None
    # Opens the Java Admin client of the same cluster (a groupscope.kafka.java_admin.JavaAdmin)
    # for its share and streams groups; None: they are not collected.
    java_admin: Callable[[], Any] | None = None
    # The groups the snapshot before listed or named in its errors
    # (groupscope.land.snapshots.expected_groups): one that ListGroups no longer lists is
    # probed, so that a group hidden from the listing is not taken as deleted.
    expected_groups: Collection[str] = ()
    kafka: AdminAdapter = field(init=False, repr=False)
    retries: RetryPolicy = field(init=False, repr=False)

    def __post_init__(self) -> None:
        connect = self.connect
        more = ([connect() for _ in range(self.settings.offset_fetch_connections - 1)]
                if connect is not None else [])
        self.kafka = AdminAdapter(self.admin, self.settings.request_timeout_s, self.requests,
                                  more)
        self.retries = RetryPolicy(self.settings.attempts, self.settings.retry_backoff_s,
                                   self.settings.request_timeout_s, self.sleep)

    def snapshot(self, snapshot_ts: datetime) -> Snapshot:
        if snapshot_ts.tzinfo is None:
            raise ValueError("snapshot_ts must be timezone-aware (UTC)")
        with _rarer_collections():
            return self._snapshot(snapshot_ts)

    def _snapshot(self, snapshot_ts: datetime) -> Snapshot:
        metadata = self._metadata()
        errors: list[CollectionError] = coordinator_outages(metadata)
        listings, classic_view, kinds_hinted = self._list_groups(errors)
        # Describing and fetching committed offsets are independent per group: overlap them,
        # and the share and streams groups' Java Admin round with both.
        describe_errors: list[CollectionError] = []
        offsets_errors: list[CollectionError] = []
        kinds_errors: list[CollectionError] = []
        notes: list[str] = []
        with concurrent.futures.ThreadPoolExecutor(2, "groupscope-describe") as pool:
            describing = pool.submit(self._describe, listings, classic_view, describe_errors)
            other_kinds = pool.submit(self._other_kinds, kinds_hinted, metadata, kinds_errors,
                                      notes)
            committed = self._committed_offsets([g.group_id for g in listings], offsets_errors)
            described = describing.result()
            kind_groups_found = other_kinds.result()
        # An Empty group lives only as long as it has committed offsets. One the classic view
        # showed but whose offsets are gone now may have been deleted since: ask the broker.
        unconfirmed = [
            group_id for group_id, d in described.items()
            if d.from_classic_view and not committed.get(group_id)
        ]
        described.update(self._describe_groups(unconfirmed, describe_errors))
        errors += describe_errors + offsets_errors + kinds_errors

        # A group is one kind: were the classic listing ever to show a share or streams group
        # too (another librdkafka or broker), the Java Admin's description of it is kept,
        # never both (one group twice breaks the snapshot's key).
        kind_ids = {g.group_id for g in kind_groups_found}
        if not any(e.stage is Stage.LIST_GROUPS for e in errors):
            errors += self._probe_unlisted({g.group_id for g in listings} | kind_ids)
        groups = [g for g in assemble_groups(listings, described, committed, metadata,
                                             classic_view) if g.group_id not in kind_ids]
        groups += kind_groups_found
        touched = touched_partitions(groups, metadata, errors)
        partitions = self._partition_offsets(touched, errors, metadata.partition_leaders)
        groups, partitions = self._reread_losses(groups, partitions, metadata, notes)
        record_timestamps = self._record_timestamps(groups, partitions, errors)
        retention = self._retention(sorted({p.topic for p in partitions}), errors)
        return assemble_snapshot(self.cluster, snapshot_ts, metadata, groups, partitions,
                                 record_timestamps, errors, retention, notes)

    # -- share and streams groups (Kafka's Java Admin client) ------------------------------
    def _other_kinds(self, hinted: bool, metadata: ClusterMetadata,
                     errors: list[CollectionError], notes: list[str]) -> tuple[Group, ...]:
        """The share and streams groups, when the settings and the hint call for them. A
        cluster without the kinds is a note, not an error; a failure is an error per group
        (or one for the round), and the classic and consumer groups go on regardless."""
        wanted = self.settings.group_kinds
        if wanted == "never" or (wanted == "auto" and not hinted):
            return ()
        if self.java_admin is None:
            notes.append("share and streams groups not collected: no Java Admin client "
                         "configured")
            return ()
        self.requests["Java Admin (share, streams groups)"] += 1
        try:
            java = self.java_admin()
        except ConfigError as exc:
            # No classpath, or a security setting the Java client has no equivalent for: a
            # choice of the deployment, said in the snapshot, not a failed collection.
            notes.append(f"share and streams groups not collected: {exc}")
            return ()
        except Exception as exc:
            errors.append(collection_error(Stage.GROUP_KINDS, failure_of(exc)))
            return ()
        try:
            return self._kinds_through(java, metadata, errors, notes)
        except Exception as exc:
            errors.append(collection_error(Stage.GROUP_KINDS, failure_of(exc)))
            return ()
        finally:
            java.close()

    def _kinds_through(self, java: Any, metadata: ClusterMetadata,
                       errors: list[CollectionError], notes: list[str]) -> tuple[Group, ...]:
        supported = java.supported_kinds()
        missing = [k.value for k in JAVA_ADMIN_TYPES if k not in supported]
        if missing:
            notes.append(f"{' and '.join(missing)} groups skipped: the cluster does not "
                         "support them (no finalized share.version / streams.version "
                         "feature; Kafka 4.1 or newer has them)")
        if not supported:
            return ()
        listings = java.list_groups(sorted(supported))
        ids = {kind: [g.group_id for g in listings if g.group_type is kind]
               for kind in JAVA_ADMIN_TYPES}
        described: dict[str, Any] = {}
        share_offsets: dict[str, Any] = {}
        streams_offsets: dict[str, Any] = {}
        for answers, found, stage_what in (
            (java.describe_share_groups(ids[GroupType.SHARE]) if ids[GroupType.SHARE]
             else {}, described, "describe"),
            (java.share_group_offsets(ids[GroupType.SHARE]) if ids[GroupType.SHARE]
             else {}, share_offsets, "share-partition offsets"),
            (java.describe_streams_groups(ids[GroupType.STREAMS]) if ids[GroupType.STREAMS]
             else {}, described, "describe"),
            (java.streams_group_offsets(ids[GroupType.STREAMS]) if ids[GroupType.STREAMS]
             else {}, streams_offsets, "offsets"),
        ):
            for group_id, answer in answers.items():
                if isinstance(answer, Exception):
                    failure = failure_of(answer)
                    errors.append(collection_error(Stage.GROUP_KINDS, dataclasses.replace(
                        failure, message=f"{stage_what}: {failure.message}"),
                        group_id=group_id))
                else:
                    found[group_id] = answer
        return kind_groups(listings, described, share_offsets, streams_offsets, metadata)

    def _retention(self, topics: Sequence[str],
                   errors: list[CollectionError]) -> dict[str, Retention]:
        """The retention settings of the touched topics (the loss forecast's time bound). An
        extra, as record timestamps are: a failure is recorded and costs no completeness."""
        found: dict[str, Retention] = {}
        # (code, message) -> the failure and the topics that failed so
        failed: dict[tuple[str, str], tuple[Failure, list[str]]] = {}
        for start in range(0, len(topics), TOPIC_CONFIGS_BATCH):
            batch = topics[start:start + TOPIC_CONFIGS_BATCH]
            try:
                futures = self.kafka.describe_topic_configs(batch)
            except Exception as exc:
                errors.append(collection_error(Stage.TOPIC_CONFIGS, failure_of(exc)))
                continue
            for topic, future in futures.items():
                try:
                    found[topic] = read_retention(
                        future.result(timeout=self.settings.request_timeout_s + 5))
                except Exception as exc:
                    failure = failure_of(exc)
                    failed.setdefault((failure.code, failure.message), (failure, []))[1].append(
                        topic)
        # A missing ACL fails every topic alike: one error says so, not one per topic.
        for failure, names in failed.values():
            if len(names) == 1:
                errors.append(collection_error(Stage.TOPIC_CONFIGS, failure, topic=names[0]))
            else:
                shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
                errors.append(collection_error(Stage.TOPIC_CONFIGS, dataclasses.replace(
                    failure, message=f"{len(names)} topics ({shown}): {failure.message}")))
        return found

    def _record_timestamps(self, groups: Sequence[Group],
                           partitions: Sequence[PartitionOffsets],
                           errors: list[CollectionError]) -> list[RecordTimestamp]:
        if self.sampler is None:
            return []
        requests = record_timestamp_requests(groups, partitions)
        if not requests:
            return []
        self.requests["Fetch(record timestamp)"] += 1
        try:
            found, missing = self.sampler(requests)
        except Exception as exc:  # sampling is an extra: its failure is recorded, not fatal
            failure = failure_of(exc)
            errors.append(collection_error(Stage.RECORD_TIMESTAMPS, failure))
            return []
        for request, reason in missing:
            errors.append(CollectionError(
                Stage.RECORD_TIMESTAMPS, "NO_RECORD", reason, topic=request.tp.topic,
                partition=request.tp.partition, retriable=True))
        return found

    def _unavailable(self, failure: Failure) -> ClusterUnavailable:
        return ClusterUnavailable(unavailable_message(self.cluster, failure, self.diagnose()))

    # -- 1. metadata -----------------------------------------------------------------------
    def _metadata(self) -> ClusterMetadata:
        try:
            md = self.kafka.list_topics()
        except Exception as exc:
            failure = failure_of(exc)
            raise self._unavailable(failure) from None
        return read_metadata(md)

    # -- 2. list ---------------------------------------------------------------------------
    def _list_groups(
        self, errors: list[CollectionError]
    ) -> tuple[list[Listing], dict[str, ClassicGroup], bool]:
        """The consumer, simple and other-protocol groups, the classic view, and whether that
        view hints at share or streams groups."""
        listings: dict[str, Listing] = {}
        listed: ConsumerGroupListing | None = None
        for attempt in range(1, self.settings.attempts + 1):
            try:
                result = self.kafka.list_consumer_groups()
            except Exception as exc:
                failure = failure_of(exc)
                if failure.code in CLUSTER_UNREACHABLE:
                    raise self._unavailable(failure) from None
                failures = [failure]
            else:
                listed = read_listing(result)
                # A broker that could not answer (its coordinator loading, say) is one error
                # here while the other brokers' groups are listed.
                failures = [failure_of(e) for e in listed.errors]
            if not failures:
                break
            # A broker that let a request time out (killed, and not yet fenced by the
            # controller, so still in the metadata) would time out again: asking it
            # ``attempts`` times made the first snapshot after a broker crash last three
            # request timeouts (47 s at 15 s) before it recorded the failure. A retry asks
            # every broker again, so another broker's retriable failure in the same round is
            # not retried either: its groups miss this snapshot (partial, recorded), which
            # costs less than another timeout of every snapshot while a broker is down.
            if (attempt < self.settings.attempts and all(f.retriable for f in failures)
                    and not any(f.code in TIMEOUTS for f in failures)):
                self.retries.pause(attempt)
                continue
            errors.extend(
                collection_error(Stage.LIST_GROUPS, dataclasses.replace(f, attempts=attempt))
                for f in failures
            )
            break
        if listed is not None:
            for listing in listed.valid:
                listings[listing.group_id] = listing
        classic_view = self._classic_view(errors) if self.settings.classic_view else {}
        hinted = other_kinds_hinted(classic_view, listings)
        for other in other_protocol_listings(classic_view, errors):
            listings.setdefault(other.group_id, other)
        return [listings[k] for k in sorted(listings)], classic_view, hinted

    def _classic_view(self, errors: list[CollectionError]) -> dict[str, ClassicGroup]:
        """Every classic group as the brokers' ListGroups + DescribeGroups show it."""
        try:
            groups = self.kafka.list_classic_groups()
        except Exception as exc:
            errors.append(collection_error(Stage.LIST_GROUPS, failure_of(exc)))
            return {}
        return read_classic_view(groups)

    # -- 3. describe -----------------------------------------------------------------------
    def _describe(
        self,
        listings: list[Listing],
        classic_view: dict[str, ClassicGroup],
        errors: list[CollectionError],
    ) -> dict[str, Described]:
        described, wanted = classic_descriptions(listings, classic_view)
        described.update(self._describe_groups(wanted, errors))
        return described

    def _describe_groups(
        self, wanted: list[str], errors: list[CollectionError]
    ) -> dict[str, Described]:
        described: dict[str, Described] = {}
        outcomes = self.retries.with_retries(
            wanted, self.kafka.describe_consumer_groups, self.settings.describe_batch,
            in_flight=self.settings.describe_in_flight,
        )
        for group_id, outcome in outcomes:
            if isinstance(outcome, Failure):
                errors.append(collection_error(Stage.DESCRIBE_GROUP, outcome, group_id=group_id))
                continue
            description = read_description(outcome)
            if description.state == "Dead":
                # Listed a moment ago, gone now: deleted (or expired) mid-snapshot.
                errors.append(
                    CollectionError(
                        Stage.DESCRIBE_GROUP, "GROUP_ID_NOT_FOUND",
                        "the group was listed but no longer exists (deleted during the snapshot)",
                        group_id=group_id,
                    )
                )
            described[group_id] = description
        return described

    # -- 4. committed offsets --------------------------------------------------------------
    def _committed_offsets(
        self, group_ids: list[str], errors: list[CollectionError]
    ) -> dict[str, tuple[CommittedOffset, ...]]:
        committed: dict[str, tuple[CommittedOffset, ...]] = {}

        def fetch(batch: Sequence[str]) -> dict[str, concurrent.futures.Future[Any]]:
            (group_id,) = batch  # OffsetFetch of the admin API takes one group
            return self.kafka.list_consumer_group_offsets(group_id)

        outcomes = self.retries.with_retries(
            group_ids, fetch, batch=1, in_flight=self.settings.offsets_concurrency
        )
        for group_id, outcome in outcomes:
            if isinstance(outcome, Failure):
                errors.append(collection_error(Stage.GROUP_OFFSETS, outcome, group_id=group_id))
                continue
            offsets = []
            for offset, error in read_committed(outcome):
                if error is not None:
                    errors.append(
                        collection_error(Stage.GROUP_OFFSETS, failure_of(error),
                                         group_id=group_id, topic=offset.topic,
                                         partition=offset.partition)
                    )
                offsets.append(offset)
            committed[group_id] = tuple(sorted(offsets, key=lambda o: (o.topic, o.partition)))
        return committed

    def _probe_unlisted(self, listed: set[str]) -> list[CollectionError]:
        """An error for each expected group that ListGroups no longer lists and that still
        exists or cannot be read (``unlisted_errors``); none for the deleted ones. Usually
        none to probe: no request. Not called when the listing itself failed (a broker that
        could not answer, an offsets partition without a leader): the snapshot is partial
        already, and probing the groups a killed broker coordinates would wait out the
        request timeout for them (see ``_list_groups``)."""
        wanted, errors = unlisted_groups(self.expected_groups, listed,
                                         self.settings.unlisted_probes)
        if wanted:
            failed: list[CollectionError] = []
            committed = self._committed_offsets(wanted, failed)
            errors += unlisted_errors(wanted, committed, failed)
        return errors

    def _reread_losses(self, groups: list[Group], partitions: tuple[PartitionOffsets, ...],
                       metadata: ClusterMetadata, notes: list[str]
                       ) -> tuple[list[Group], tuple[PartitionOffsets, ...]]:
        """Reads again the groups whose committed offsets look below the log start, then
        those partitions' high watermarks (``apparent_losses``, ``with_rereads``): a loss is
        paged as critical, so a read skew must not look like one. Rare, and bounded by the
        groups it concerns. A reread that fails keeps the first reading, and a note says so."""
        suspects = apparent_losses(groups, partitions)
        if not suspects:
            return groups, partitions
        failed: list[CollectionError] = []
        reread = self._committed_offsets(sorted(suspects), failed)
        later = self._partition_offsets(
            sorted({tp for tps in suspects.values() for tp in tps}), failed,
            metadata.partition_leaders)
        notes += [f"rereading the offsets below the log start failed (the first reading "
                  f"stands): {e.group_id or e.topic}: {e.message}" for e in failed]
        fixed, offsets = with_rereads(groups, partitions, suspects, reread, later)
        return fixed, tuple(offsets)

    # -- 5. partition offsets --------------------------------------------------------------
    def _partition_offsets(
        self, partitions: list[TopicPartition], errors: list[CollectionError],
        leaders: Mapping[tuple[str, int], int],
    ) -> tuple[PartitionOffsets, ...]:
        """Log start, high watermark and last stable offset: three kinds of ListOffsets,
        all in flight at once (a request carries one isolation level, so they cannot merge)."""
        keys = [(kind, tp) for kind in OFFSET_KINDS for tp in partitions]
        values: dict[OffsetKind, dict[TopicPartition, int]] = {kind: {} for kind in OFFSET_KINDS}
        failed: dict[TopicPartition, Failure] = {}
        outcomes = self.retries.with_retries(keys, self.kafka.list_offsets,
                                             self.settings.list_offsets_batch,
                                             in_flight=len(OFFSET_KINDS))
        for (kind, tp), outcome in outcomes:
            if isinstance(outcome, Failure):
                failed.setdefault(tp, outcome)
                continue
            offset = read_offset(outcome)
            if offset < 0:
                # librdkafka answers OFFSET_INVALID (-1001), without an error, for a partition
                # whose leader is down: no offset, so a partial snapshot, not a corrupt one.
                failed.setdefault(tp, Failure(
                    "_NO_OFFSET", f"ListOffsets ({kind}) answered {offset}, not an offset "
                    "(the partition's leader unavailable?)", True))
                continue
            values[kind][tp] = offset
        for tp, failure in sorted(failed.items()):
            errors.append(
                collection_error(Stage.PARTITION_OFFSETS, failure, topic=tp.topic,
                                 partition=tp.partition)
            )
        return partition_offsets(partitions, values, leaders)


def take_snapshot(cluster: ClusterConfig, timeout_s: float, snapshot_ts: datetime,
                  sample_records: bool = True,
                  settings: CollectorSettings | None = None,
                  expected_groups: Collection[str] = ()) -> Snapshot:
    """A snapshot of ``cluster``; ``sample_records`` also reads the record at each lagging
    committed offset (bounded: see groupscope.kafka.sampling) for the exact time lag.
    ``settings`` default to CollectorSettings' with ``timeout_s`` as the request timeout.
    ``expected_groups``: those the snapshot before found (``Collector.expected_groups``). Raises
    ConfigError (bad client settings) or ClusterUnavailable."""
    connection = open_admin(cluster, timeout_s)
    try:  # fails at once on wrong security settings, which librdkafka would retry until
        connection.wait_for_metadata(timeout_s)  # the timeout
    except Exception as exc:
        raise ClusterUnavailable(unavailable_message(
            cluster.name, failure_of(exc), connection.diagnosis())) from None
    chosen = settings or CollectorSettings(request_timeout_s=timeout_s)
    collector = Collector(connection.admin, cluster.name, chosen,
                          diagnose=connection.diagnosis,
                          connect=lambda: open_admin(cluster, timeout_s).admin,
                          java_admin=lambda: JavaAdmin.open(
                              cluster.client, chosen.java_classpath, timeout_s),
                          sampler=RecordSampler(cluster.client, timeout_s=timeout_s)
                          if sample_records else None,
                          expected_groups=expected_groups)
    return collector.snapshot(snapshot_ts)
