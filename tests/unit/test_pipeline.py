"""The pure parts of the pipeline: which interval a run processes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from groupscope.contract.model import CollectionError, Group, GroupType, Snapshot, Stage
from groupscope.land.snapshots import expected_groups, land
from groupscope.pipeline import StageFailed, analytics_interval, cluster_config, run_interval


def t(hh: int, mm: int = 0) -> datetime:
    return datetime(2026, 11, 21, hh, mm, tzinfo=UTC)


@pytest.mark.parametrize(("start", "end", "run_after", "expected"), [
    # 1. a scheduled run: its data interval, as it is
    (t(10), t(11), t(11, 5), (t(10), t(11))),
    # 2. triggered by hand without a logical date: no interval; the hour up to the run
    (None, None, t(11, 20), (t(10, 20), t(11, 20))),
    # 3. triggered by an asset event: a zero-length interval at the event; the hour up to it
    (t(11, 7), t(11, 7), t(11, 8), (t(10, 7), t(11, 7))),
])
def test_run_interval(start: datetime | None, end: datetime | None, run_after: datetime,
                      expected: tuple[datetime, datetime]) -> None:
    assert run_interval(start, end, run_after) == expected


@pytest.mark.parametrize(("start", "end", "hourly", "expected"), [
    # 1. the lag job takes any interval
    (t(10, 10), t(10, 20), False, (t(10, 10), t(10, 20))),
    # 2. hourly jobs: widened to the hour that holds it (recomputed whole, never in part)
    (t(10, 10), t(10, 20), True, (t(10), t(11))),
    # 3. already whole hours: unchanged
    (t(10), t(12), True, (t(10), t(12))),
    # 4. across an hour boundary: both hours
    (t(10, 50), t(11, 10), True, (t(10), t(12))),
    # 5. an empty interval on the hour still gets its hour
    (t(10), t(10), True, (t(10), t(11))),
])
def test_analytics_interval(start: datetime, end: datetime, hourly: bool,
                            expected: tuple[datetime, datetime]) -> None:
    assert analytics_interval(start, end, hourly) == expected


def test_a_bad_connection_extra_is_a_clear_stage_failure() -> None:
    with pytest.raises(StageFailed, match=r"bootstrap\.servers is required"):
        cluster_config("prod", {"security.protocol": "SASL_SSL"})
    assert cluster_config("prod", {"bootstrap.servers": "b:9092", "retries": 3}).client[
        "retries"] == "3"


def test_two_tasks_told_of_one_warehouse_outage_at_once_tell_each_channel_once(
        tmp_path: Path) -> None:
    """The live DAG's and the alerts DAG's evaluations find the warehouse down together: the
    outage's state is read and written under a lock, so the channel hears it once."""
    import threading
    import time

    from groupscope.pipeline import warehouse_outage

    class Slow:  # a channel whose send takes a moment, so the two calls overlap
        name = "webhook"

        def __init__(self) -> None:
            self.sent: list[str] = []

        def send(self, message: Any) -> None:
            time.sleep(0.2)
            self.sent.append(message.text)

    channel = Slow()
    now = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    calls = [threading.Thread(target=warehouse_outage, args=(
        {"webhook": channel}, "prod", tmp_path, now, "connection refused")) for _ in range(2)]
    for call in calls:
        call.start()
    for call in calls:
        call.join()
    assert len(channel.sent) == 1 and "warehouse" in channel.sent[0]
    warehouse_outage({"webhook": channel}, "prod", tmp_path, now, None)  # it is back
    assert len(channel.sent) == 2


def test_the_groups_expected_are_those_the_newest_snapshot_before_listed_or_erred_on(
        tmp_path: Path) -> None:
    """What the collector probes when ListGroups no longer lists them: a group recorded as an
    error (hidden, not gone) is expected again, so it is probed at every snapshot."""
    def landed(cluster: str, ts: datetime, groups: list[str],
               errors: tuple[CollectionError, ...] = ()) -> None:
        land(Snapshot(cluster, ts, tuple(
            Group(g, GroupType.CLASSIC, "Empty", "", None, None, None, (), ())
            for g in groups), (), (), errors), tmp_path)

    hidden = CollectionError(Stage.LIST_GROUPS, "GROUP_AUTHORIZATION_FAILED", "denied",
                             group_id="c")
    at = [datetime(2026, 11, 27, 10, 59, tzinfo=UTC), datetime(2026, 11, 27, 11, 1, tzinfo=UTC),
          datetime(2026, 11, 27, 11, 2, tzinfo=UTC)]
    landed("c1", at[0], ["a", "b"])
    landed("c1", at[1], ["b"], (hidden,))
    landed("c1", at[2], ["d"])
    landed("c2", at[1], ["other"])

    assert expected_groups(tmp_path, "c1", at[2]) == {"b", "c"}
    assert expected_groups(tmp_path, "c1", at[1]) == {"a", "b"}  # the hour before
    assert expected_groups(tmp_path, "c1", at[0]) == frozenset()
    assert expected_groups(tmp_path, "c3", at[2]) == frozenset()
