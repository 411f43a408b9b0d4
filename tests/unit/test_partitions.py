"""Which partitions retention drops (pure): only those every row of which is older than its
family's retention; the partition holding a younger row stays."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from groupscope.warehouse.partitions import (
    DEFAULT_RETENTION,
    Partition,
    check_retention,
    days_ahead,
    expired,
    times_in,
)

NOW = datetime(2024, 6, 15, 10, 0, tzinfo=UTC)


def _day(family: str, day: datetime) -> Partition:
    return Partition("raw" if family == "raw" else "mart", "t", f"t_p{day:%Y%m%d}", family, day,
                     day + timedelta(days=1))


def test_a_partition_goes_only_when_all_its_rows_are_past_the_limit() -> None:
    limit = NOW - timedelta(days=14)  # 2024-06-01 10:00
    older = _day("raw", datetime(2024, 5, 31, tzinfo=UTC))  # ends at 06-01 00:00
    holding_the_limit = _day("raw", datetime(2024, 6, 1, tzinfo=UTC))
    today = _day("raw", datetime(2024, 6, 15, tzinfo=UTC))
    assert older.end <= limit < holding_the_limit.end
    assert expired([today, holding_the_limit, older], DEFAULT_RETENTION, NOW) == [older]
    # The mart family keeps the same partitions 90 days.
    marts = [_day("mart", older.start), _day("mart", datetime(2024, 3, 16, tzinfo=UTC))]
    assert expired(marts, DEFAULT_RETENTION, NOW) == [marts[1]]


def test_the_hourly_rollups_go_a_whole_month_at_a_time() -> None:
    may = Partition("mart", "h", "h_p202305", "hourly", datetime(2023, 5, 1, tzinfo=UTC),
                    datetime(2023, 6, 1, tzinfo=UTC))
    april = Partition("mart", "h", "h_p202304", "hourly", datetime(2023, 4, 1, tzinfo=UTC),
                      may.start)
    # 400 days before NOW is 2023-05-12: May holds younger rows.
    assert expired([may, april], DEFAULT_RETENTION, NOW) == [april]


def test_retention_needs_every_family_and_at_least_a_day() -> None:
    with pytest.raises(ValueError, match="hourly"):
        check_retention({"raw": timedelta(days=1), "mart": timedelta(days=1)})
    with pytest.raises(ValueError, match="under a day"):
        check_retention({**DEFAULT_RETENTION, "raw": timedelta(hours=12)})


def test_the_operational_tables_need_their_retention_too() -> None:
    from groupscope.pipeline import OPS_RETENTION
    from groupscope.settings import Settings

    keep = {k: v for k, v in Settings().retention.items() if k in OPS_RETENTION}
    assert check_retention(keep, OPS_RETENTION) == keep
    with pytest.raises(ValueError, match="quality"):
        check_retention({"incidents": timedelta(days=1), "drops": timedelta(days=1)},
                        OPS_RETENTION)
    with pytest.raises(ValueError, match="under a day"):
        check_retention({**keep, "incidents": timedelta(hours=1)}, OPS_RETENTION)


def test_days_ahead_start_at_midnight_utc() -> None:
    late = datetime(2024, 6, 15, 23, 30, tzinfo=UTC).astimezone()  # any zone: same instant
    assert days_ahead(late, 2) == [datetime(2024, 6, d, tzinfo=UTC) for d in (15, 16, 17)]


def test_times_in_reads_every_table_with_the_column() -> None:
    ts = pa.timestamp("us", tz="UTC")
    a = pa.table({"snapshot_ts": pa.array([NOW, NOW, None], ts)})
    b = pa.table({"snapshot_ts": pa.array([NOW + timedelta(days=1)], ts)})
    other = pa.table({"period_start": pa.array([NOW], ts)})
    assert times_in([a, b, other], "snapshot_ts") == {NOW, NOW + timedelta(days=1)}
