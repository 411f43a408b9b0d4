"""The status rules' history pass (``analyze.status_history``): every value it gives, at
every row of random histories (irregular snapshots, unread high watermarks, rewinds, members
coming and going, runs of Assigning), equals the value computed row by row from its
definition (the window expressions it replaced, read as loops). The rules themselves, through
Spark, are tests/unit/test_analytics_status.py's."""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from groupscope.analyze.status_history import group_columns, history_columns, per_group

WINDOW_S, HISTORY_S, STEADY_POINTS = 600.0, 3600.0, 3


def _history(rng: random.Random, rows: int, on_edges: bool = False) -> list[dict[str, Any]]:
    """A partition's random history. ``on_edges``: snapshots whole multiples of 10 s apart,
    so that windows start exactly at a row (the frames' inclusive bounds)."""
    us, committed, hw = 1_700_000_000_000_000 + rng.randrange(10**9), 1000, 1200
    assigning = False
    out = []
    for _ in range(rows):
        if on_edges:
            us += rng.choice([10, 30, 60, 60, 60, 300, 600, 1200]) * 1_000_000
        else:
            us += rng.choice([rng.randrange(5, 70), rng.randrange(60, 400),
                              rng.randrange(400, 3000)]) * 1_000_000 + rng.randrange(1_000_000)
        hw += rng.randrange(0, 40)
        roll = rng.random()
        if roll < 0.05:
            committed -= rng.randrange(1, 30)  # a rewind
        elif roll < 0.6:
            committed = min(hw, committed + rng.randrange(1, 40))
        read = rng.random() > 0.15  # else the high watermark was not read
        if rng.random() < 0.1:
            assigning = not assigning
        members = rng.choice([None, 0, 1, 2, 2])
        # (A lag unknown where the high watermark was read cannot come from the lag mart;
        # here it tells which of the two the completed lag follows.)
        out.append({"_us": us, "committed_offset": committed,
                    "high_watermark": hw if read else None,
                    "lag": hw - committed if read and rng.random() > 0.05 else None,
                    "member_count": members, "_assigning": assigning,
                    "_unowned": rng.random() < 0.2})
    return out


def _by_definition(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Each value straight from its definition, one row at a time."""
    t = [r["_us"] / 1_000_000.0 for r in rows]
    c = [r["committed_offset"] for r in rows]
    history_us, window_us = int(HISTORY_S * 1_000_000), int(WINDOW_S * 1_000_000)

    def last(upto: int, keep: Any) -> int | None:
        found = [j for j in range(upto + 1) if keep(j)]
        return found[-1] if found else None

    def read_at(i: int) -> int | None:
        j = last(i, lambda j: rows[j]["high_watermark"] is not None)
        return j if j is not None and t[j] >= t[i] - HISTORY_S else None

    def lag_at(i: int) -> int | None:
        if rows[i]["lag"] is not None:
            return int(rows[i]["lag"])
        j = read_at(i)
        return None if j is None else max(rows[j]["high_watermark"] - c[i], 0)

    lags = [lag_at(i) for i in range(len(rows))]
    d = [None] + [c[i] - c[i - 1] for i in range(1, len(rows))]
    d_lag = [None] + [lags[i] - lags[i - 1] if None not in (lags[i], lags[i - 1]) else None
                      for i in range(1, len(rows))]
    advanced = [x is not None and x != 0 for x in d]
    out: dict[str, list[Any]] = {}

    def put(name: str, value: Any) -> None:
        out.setdefault(name, []).append(value)

    def steady(j: int) -> bool:
        around = [k for k in range(len(rows))
                  if rows[j]["_us"] - window_us <= rows[k]["_us"] <= rows[j]["_us"]]
        known = [d[k] for k in around if d[k] is not None]
        return known.count(0) == 0 and len(known) >= STEADY_POINTS

    def since(flag: str, i: int, first_in_history: float) -> float:
        starts = [j for j in range(i + 1) if rows[j][flag] and not (j > 0 and rows[j - 1][flag])]
        return max(t[starts[-1]], first_in_history) if starts else first_in_history

    for i, row in enumerate(rows):
        window = [j for j in range(len(rows))
                  if row["_us"] - window_us <= rows[j]["_us"] <= row["_us"]]
        first_in_history = min(t[j] for j in range(len(rows))
                               if row["_us"] - history_us <= rows[j]["_us"] <= row["_us"])
        read = read_at(i)
        adv = last(i, lambda j: advanced[j])
        adv_in = adv if adv is not None and t[adv] >= t[i] - HISTORY_S else None
        seen = last(i - 1, lambda j: (rows[j]["member_count"] or 0) > 0)
        seen = seen if seen is not None and t[seen] >= t[i] - HISTORY_S else None
        steps = [d[j] for j in window if d[j] is not None]
        lag_steps = [d_lag[j] for j in window if d_lag[j] is not None]

        inside = [j for j in range(len(rows))
                  if advanced[j] and row["_us"] - history_us <= rows[j]["_us"] < row["_us"]]
        pauses = [t[b] - t[a - 1] for a, b in itertools.pairwise(inside)]
        put("lag", lags[i])
        put("_t", t[i])
        put("_hw_carried", row["high_watermark"] is None and read is not None)
        put("_hw_read_t", None if read is None else t[read])
        put("_last_adv_t", None if adv_in is None else t[adv_in])
        put("_last_adv_lag", None if adv_in is None else lags[adv_in])
        put("_members_seen_t", None if seen is None else t[seen])
        put("_members_seen_lag", None if seen is None else lags[seen])
        put("_n", len(window))
        put("_rewound", min(steps) < 0 if steps else None)
        put("_lag_first", lags[window[0]])
        put("_committed_first", c[window[0]])
        put("_hw_first", rows[window[0]]["high_watermark"])
        put("_lag_never_fell", min(lag_steps) >= 0 if lag_steps else None)
        put("_steady_last", None if adv is None else steady(adv))
        put("_last_advance", first_in_history if adv_in is None
            else max(t[adv_in], first_in_history))
        put("_assigning_since", since("_assigning", i, first_in_history))
        put("_unowned_since", since("_unowned", i, first_in_history))
        put("_longest_pause", max(pauses) if pauses else None)
    return out


def _arrays(rows: list[dict[str, Any]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    columns = {}
    for name in rows[0]:
        values = [r[name] for r in rows]
        valid = np.array([v is not None for v in values])
        fill = False if isinstance(rows[0][name], bool) else 0
        columns[name] = (np.array([fill if v is None else v for v in values]), valid)
    return columns


def _plain(values: np.ndarray, valid: np.ndarray) -> list[Any]:
    return [v.item() if ok else None for v, ok in zip(values, valid, strict=True)]


@pytest.mark.parametrize("seed", range(8))
def test_every_history_value_is_its_definition_at_every_row(seed: int) -> None:
    rng = random.Random(seed)
    rows = _history(rng, rng.randrange(60, 160), on_edges=seed % 2 == 1)
    got = history_columns(_arrays(rows), window_s=WINDOW_S, history_s=HISTORY_S,
                          steady_points=STEADY_POINTS)
    expected = _by_definition(rows)
    assert set(got) == set(expected)
    for name, values in expected.items():
        assert _plain(*got[name]) == values, name
    # The histories reach every branch: values known and unknown, true and false.
    for name in ("_rewound", "_lag_never_fell", "_steady_last", "_hw_carried"):
        assert {True, False} <= set(expected[name]), (seed, name)
    assert None in expected["_longest_pause"] and None in expected["_last_adv_t"]


def test_the_group_view_counts_each_snapshots_partitions_halted_and_moving() -> None:
    """Four partitions at three snapshots: ``_halted`` is a steady committer behind, silent
    for at least the halt time, its lag grown since its last advance (each part known);
    ``_group_moving`` whether any partition of the snapshot advanced within the halt time,
    ``_group_halted`` how many halted."""
    us = np.array([1, 2, 3] * 4) * 60_000_000
    t = us / 1_000_000.0
    known = np.ones(12, dtype=bool)
    # p0 halts at 2 and 3 (silent 60 s and 120 s, lag 5 -> 9 -> 12). p1 advances at 2
    # (moving there); at 3 its lag is unknown: not halted. p2 is silent exactly the halt time
    # at 2 and 3 (15 s: halted, and not moving). p3 is never halted: the lag at its last
    # advance is unknown at 1 and 3, and at 2 its last advance is older than the history.
    last_advance = np.array([60.0, 60, 60, 60, 120, 120, 60, 105, 165, 0, 0, 0])
    columns = {
        "_t": (t, known),
        "_last_advance": (last_advance, known),
        "_last_adv_t": (last_advance, np.array([True] * 10 + [False, True])),
        "_last_adv_lag": (np.array([5] * 12), np.array([True] * 9 + [False, True, False])),
        "_steady_last": (np.array([True] * 12), known),
    }
    columns["lag"] = (np.array([5, 9, 12, 5, 6, 9, 5, 8, 9, 9, 9, 9]),
                      np.array([True] * 5 + [False] + [True] * 6))
    got = {name: _plain(*value) for name, value in group_columns(
        us, columns, lag_tolerance=1, halt_after_s=15.0).items()}
    assert got == {"_halted": [False, True, True, False, False, False,
                               False, True, True, False, False, False],
                   "_group_moving": [1, 1, 0] * 4,
                   "_group_partitions": [4] * 12,
                   "_group_halted": [0, 2, 2] * 4}


def test_what_was_read_exactly_the_history_ago_still_counts() -> None:
    """The history's bounds are inclusive: a high watermark read, or members seen, exactly
    ``history_s`` before a snapshot still complete its lag and anchor its group_empty."""
    start = 1_700_000_000_000_000
    rows = [{"_us": start, "committed_offset": 10, "high_watermark": 20, "lag": 10,
             "member_count": 1, "_assigning": False, "_unowned": False},
            {"_us": start + int(HISTORY_S) * 1_000_000, "committed_offset": 12,
             "high_watermark": None, "lag": None, "member_count": 0, "_assigning": False,
             "_unowned": False}]
    got = history_columns(_arrays(rows), window_s=WINDOW_S, history_s=HISTORY_S,
                          steady_points=STEADY_POINTS)
    expected = _by_definition(rows)
    assert expected["lag"] == [10, 8] and expected["_members_seen_lag"] == [None, 10]
    for name, values in expected.items():
        assert _plain(*got[name]) == values, name


def test_the_arrow_pass_sorts_each_partition_by_time_and_keeps_every_row() -> None:
    """Rows arrive in any order and interleaved by partition: each partition's values are
    those of its own history in time order."""
    rng = random.Random(7)
    histories = {p: _history(rng, 40) for p in range(3)}
    rows = [{"cluster": "c", "group_id": "g", "topic": "t", "partition": p, **r}
            for p, h in histories.items() for r in h]
    rng.shuffle(rows)
    table = pa.Table.from_pylist(rows, schema=pa.schema([
        ("cluster", pa.string()), ("group_id", pa.string()), ("topic", pa.string()),
        ("partition", pa.int32()), ("_us", pa.int64()), ("committed_offset", pa.int64()),
        ("high_watermark", pa.int64()), ("lag", pa.int64()), ("member_count", pa.int32()),
        ("_assigning", pa.bool_()), ("_unowned", pa.bool_())]))
    out = per_group(window_s=WINDOW_S, history_s=HISTORY_S, steady_points=STEADY_POINTS,
                    lag_tolerance=1, halt_after_s=15.0)(table).to_pylist()
    assert len(out) == len(rows)
    for p, history in histories.items():
        mine = [r for r in out if r["partition"] == p]
        assert [r["_us"] for r in mine] == sorted(r["_us"] for r in history)
        expected = _by_definition(sorted(history, key=lambda r: r["_us"]))
        for name in ("lag", "_longest_pause", "_last_advance", "_n", "_steady_last"):
            assert [r[name] for r in mine] == expected[name], (p, name)
