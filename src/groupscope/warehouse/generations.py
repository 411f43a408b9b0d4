"""Loads the rebalances of the landed offsets-topic batches (``groupscope.offsets.store``) into
``raw.group_generations``: a classic group's generations and a consumer group's epochs, one
row per record, what the rebalance-storm condition counts over its sliding window
(``serve.group_conditions``).

``ops.offsets_loaded`` keeps, per partition of ``__consumer_offsets``, the next offset to load.
Each batch is loaded with its position in one transaction, so a failed load or a warehouse that
was down is caught up by the next call and no batch is loaded twice.

``ops.offsets_feed`` keeps, per cluster, how far the feed has come (``record_feed``): the time
of the newest ingest that read the whole topic to its end with every batch loaded, which the
``offsets_feed_stale`` condition counts from."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlalchemy import Engine, text

from groupscope.offsets import store

COLUMNS = ["cluster", "group_id", "group_protocol", "generation", "event_ts",
           "source_partition", "source_offset"]
_TABLE = "group_generations"


@dataclass(frozen=True)
class GenerationsLoad:
    batches: int
    rows: int

    def as_dict(self) -> dict[str, int]:
        return {"batches": self.batches, "rows": self.rows}


def batch_rows(cluster: str, batch: store.Batch) -> pa.Table:
    """The rows of raw.group_generations in one landed batch: its rebalances. A group's
    creation (generation or epoch 0, no member) is not one (``offsets.timeline`` agrees)."""
    import pyarrow.compute as pc

    head = ["source_partition", "source_offset", "record_ts", "group_id"]
    classic = batch.read("group_generations", [*head, "generation", "member_count"])
    classic = classic.filter(pc.or_(pc.not_equal(classic["generation"], 0),
                                    pc.not_equal(classic["member_count"], 0)))
    consumer = batch.read("group_epochs", [*head, "epoch"]).rename_columns(
        [*head, "generation"])
    consumer = consumer.filter(pc.not_equal(consumer["generation"], 0))
    parts = []
    for protocol, table in (("classic", classic), ("consumer", consumer)):
        parts.append(pa.table({
            "cluster": pa.array([cluster] * table.num_rows, pa.string()),
            "group_id": table["group_id"],
            "group_protocol": pa.array([protocol] * table.num_rows, pa.string()),
            "generation": table["generation"],
            "event_ts": table["record_ts"],
            "source_partition": table["source_partition"],
            "source_offset": table["source_offset"],
        }))
    return pa.concat_tables(parts)


def load_generations(engine: Engine, landing: Path, cluster: str,
                     now: datetime) -> GenerationsLoad:
    """Loads every landed batch of ``cluster`` not loaded yet; returns what it loaded."""
    from groupscope import warehouse

    with warehouse.connect(engine) as conn:
        loaded: dict[int, int] = {p: n for p, n in conn.execute(text(
            "SELECT source_partition, next_offset FROM ops.offsets_loaded WHERE cluster = :c"),
            {"c": cluster})}
    pending = [b for b in store.batches(landing, cluster)
               if b.next_offset > loaded.get(b.partition, 0)]
    rows = 0
    for batch in pending:
        table = batch_rows(cluster, batch)
        warehouse._ensure_partitions(engine, [("raw", _TABLE, table)], "event_ts")
        with warehouse.connect(engine) as conn, conn.begin():
            _insert(conn, table)
            conn.execute(text(
                "INSERT INTO ops.offsets_loaded VALUES (:c, :p, :n, :at) "
                "ON CONFLICT (cluster, source_partition) DO UPDATE "
                "SET next_offset = greatest(ops.offsets_loaded.next_offset, excluded.next_offset),"
                " loaded_at = excluded.loaded_at"),
                {"c": cluster, "p": batch.partition, "n": batch.next_offset, "at": now})
        rows += table.num_rows
    return GenerationsLoad(len(pending), rows)


def record_feed(engine: Engine, cluster: str, ingest_ts: datetime,
                incomplete: Sequence[Any]) -> None:
    """Records an ingest run of ``ingest_ts`` whose batches are all loaded: complete (every
    partition read to its end as of the run's start) when ``incomplete`` (the partitions it
    did not finish, as its summary lists them) is empty. Never moves back (a late run of an
    older ingest does not undo a newer)."""
    from groupscope import warehouse

    with warehouse.connect(engine) as conn, conn.begin():
        conn.execute(text(
            "INSERT INTO ops.offsets_feed (cluster, complete_at, checked_at, first_checked_at,"
            " incomplete) VALUES (:c, :complete, :at, :at, CAST(:incomplete AS jsonb))"
            " ON CONFLICT (cluster) DO UPDATE SET"
            " complete_at = greatest(ops.offsets_feed.complete_at, excluded.complete_at),"
            " incomplete = CASE WHEN excluded.checked_at >= ops.offsets_feed.checked_at"
            "  THEN excluded.incomplete ELSE ops.offsets_feed.incomplete END,"
            " checked_at = greatest(ops.offsets_feed.checked_at, excluded.checked_at)"),
            {"c": cluster, "complete": None if incomplete else ingest_ts, "at": ingest_ts,
             "incomplete": json.dumps(list(incomplete), default=str)})


def _insert(conn: Any, table: pa.Table) -> None:
    # A batch that overlaps rows already loaded (its position was lost with a restored
    # warehouse) inserts only what is missing.
    if table.num_rows == 0:
        return
    conn.execute(text(
        f"INSERT INTO raw.{_TABLE} ({', '.join(COLUMNS)}) "
        f"VALUES ({', '.join(':' + c for c in COLUMNS)}) ON CONFLICT DO NOTHING"),
        table.select(COLUMNS).to_pylist())
