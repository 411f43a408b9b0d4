"""The JSON and table views of a snapshot: lag is exact, absent or negative, never clamped."""

from datetime import UTC, datetime

from groupscope.contract.model import (
    CollectionError,
    CommittedOffset,
    Group,
    GroupType,
    Member,
    PartitionOffsets,
    Snapshot,
    Stage,
    TopicInfo,
    TopicPartition,
)
from groupscope.serve.report import printable, snapshot_json, snapshot_table

TS = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def _snapshot(errors: tuple[CollectionError, ...] = ()) -> Snapshot:
    member = Member("m-1", "client", "/10.0.0.1", "static-1",
                    (TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)))
    group = Group(
        group_id='we"ird\\grüp\n', group_type=GroupType.CLASSIC, state="Stable",
        protocol_type="consumer", assignor="range", coordinator_id=2,
        expected_coordinator_id=3, members=(member,),
        offsets=(
            CommittedOffset("t", 0, 40),  # ordinary lag
            CommittedOffset("t", 1, 120),  # beyond the high watermark: negative lag
            CommittedOffset("t", 3, 5),  # below the log start: retention deleted unread data
        ),  # t-2 is owned but never committed
    )
    partitions = tuple(
        PartitionOffsets("t", p, log_start=ls, high_watermark=hw, last_stable=hw)
        for p, ls, hw in [(0, 0, 100), (1, 0, 100), (2, 0, 7), (3, 10, 50)]
    )
    return Snapshot("c1", TS, (group,), partitions, (TopicInfo("t", 4),), errors)


def test_lag_is_exact_absent_or_negative() -> None:
    doc = snapshot_json(_snapshot())
    by_partition = {o["partition"]: o for o in doc["groups"][0]["offsets"]}
    assert by_partition[0]["lag"] == 60
    assert by_partition[1]["lag"] == -20
    assert by_partition[2]["committed"] is None and by_partition[2]["lag"] is None
    assert by_partition[3]["below_log_start"] is True
    assert by_partition[0]["below_log_start"] is False


def test_json_has_the_documented_shape() -> None:
    doc = snapshot_json(_snapshot())
    assert set(doc) >= {"cluster", "snapshot_ts", "complete", "errors", "groups"}
    group = doc["groups"][0]
    assert set(group) >= {"group_id", "type", "state", "protocol_type", "assignor",
                          "coordinator_id", "members", "offsets"}
    assert set(group["members"][0]) >= {"member_id", "client_id", "host", "instance_id",
                                        "assignment"}
    assert group["members"][0]["assignment"][0] == {"topic": "t", "partition": 0}
    assert group["coordinator_mismatch"] is True


def test_table_shows_totals_worst_partition_and_errors() -> None:
    error = CollectionError(Stage.GROUP_OFFSETS, "NOT_COORDINATOR", "moved", group_id="g",
                            retriable=True, attempts=3)
    table = snapshot_table(_snapshot((error,)))
    assert "INCOMPLETE (1 errors)" in table
    # 60 + 45: the negative partition is flagged, not netted against the others
    assert "105 (+1 uncommitted, 1 NEGATIVE)" in table
    assert "t[0] 60" in table
    assert "2≠3" in table  # coordinator mismatch is visible
    assert "NOT_COORDINATOR [group='g'] after 3 attempts" in table
    assert "\n" not in table.splitlines()[2]
    assert 'we"ird\\grüp\\n' in table  # the newline in the name is escaped, not printed


def test_printable_shortens_long_names() -> None:
    assert printable("x" * 249, 20) == "x" * 19 + "…"
    assert printable(None) == "-"
