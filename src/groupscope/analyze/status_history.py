"""The status rules' view of each partition's history and of its group at each snapshot, in
one Arrow-vectorized pass per group (``status.partition_status`` runs it with
``applyInArrow``; issue 30).

Every rule of ``groupscope.analyze.status`` reads a few values of the rows before a snapshot:
the previous row's offsets and lag, the first values and counts of the trend window, the last
advance of the committed offset and the last snapshot with members within the history, the
longest pause between advances, and where a run of Assigning (of an unowned task) began.
Spark's window operator computed them in four passes over every row, each copying the whole
row into its buffer, each needing the one before (the previous row's lag, then the window's
values, then the steady rhythm, then the two halves of the longest pause's split), and a fifth
over each group's snapshot (``progress_stopped``: did any partition move), after a shuffle of
the wide rows by group and snapshot: most of the status's time at scale (docs/benchmarks.md).
Here one shuffle of the narrow input by group, one sort, and numpy over whole arrays give the
same values: running "last" values are running maxima of indices, range frames are
``searchsorted`` bounds over the microseconds with counts from prefix sums, the longest pause
is a range maximum over the advances (a sparse table), and the group's view per snapshot is a
``np.unique`` of its rows' snapshots. Python runs once per partition (about 0.6 ms for a day
of one-minute snapshots), never per row.

The values are Spark's to the bit: the same order of operations on the same doubles (seconds
are microseconds / 1e6), range frames inclusive at both ends on the microseconds, ``first``
without ``ignorenulls`` taking the window's first row, a null where Spark's aggregate of only
nulls is null. The structs of the window version are flat columns (``_last_adv_t`` and
``_last_adv_lag`` for ``_last_adv``): a struct is non-null exactly where its time is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# What the pass adds to each row (the rules' inputs), with its Arrow type. ``lag`` is replaced:
# completed from the last high watermark read where this snapshot's was not.
ADDED = pa.schema([
    ("_t", pa.float64()),
    ("_hw_carried", pa.bool_()),
    ("_hw_read_t", pa.float64()),
    ("_last_adv_t", pa.float64()),
    ("_last_adv_lag", pa.int64()),
    ("_members_seen_t", pa.float64()),
    ("_members_seen_lag", pa.int64()),
    ("_n", pa.int64()),
    ("_rewound", pa.bool_()),
    ("_lag_first", pa.int64()),
    ("_committed_first", pa.int64()),
    ("_hw_first", pa.int64()),
    ("_lag_never_fell", pa.bool_()),
    ("_steady_last", pa.bool_()),
    ("_last_advance", pa.float64()),
    ("_assigning_since", pa.float64()),
    ("_unowned_since", pa.float64()),
    ("_longest_pause", pa.float64()),
    ("_halted", pa.bool_()),
    ("_group_moving", pa.int32()),
    ("_group_partitions", pa.int64()),
    ("_group_halted", pa.int64()),
])


def _values(column: Any, fill: Any) -> tuple[np.ndarray, np.ndarray]:
    """A column's values (nulls as ``fill``: never through a float NaN, which would round
    offsets beyond 2**53) and where it is not null."""
    valid = np.asarray(pc.is_valid(column).to_numpy(zero_copy_only=False), dtype=bool)
    return np.asarray(pc.fill_null(column, fill).to_numpy(zero_copy_only=False)), valid


def _last_index(valid: np.ndarray) -> np.ndarray:
    """The index of the last valid row at or before each row, -1 where none (Spark's running
    ``last(..., ignorenulls=True)`` over rows up to the current one)."""
    return np.maximum.accumulate(np.where(valid, np.arange(len(valid)), -1))


def _before(index: np.ndarray) -> np.ndarray:
    """``_last_index`` over the rows strictly before each row."""
    return np.concatenate(([-1], index[:-1]))


def _in_frame(counted: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """How many rows of each frame [lo, hi) are ``counted``."""
    running: np.ndarray = np.concatenate(([0], np.cumsum(counted)))
    return np.asarray(running[hi] - running[lo])


def _range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The maximum of ``values[lo:hi]`` per query (-inf where empty): a sparse table of
    maxima over spans of 2**k, two lookups per query."""
    table = [values]
    while 2 ** len(table) <= len(values):
        span, level = 2 ** (len(table) - 1), table[-1]
        table.append(np.maximum(level[:-span], level[span:]))
    width = hi - lo
    out = np.full(len(lo), -np.inf)
    some = width > 0
    k = np.zeros(len(lo), dtype=np.int64)
    k[some] = np.floor(np.log2(width[some])).astype(np.int64)
    for level in np.unique(k[some]):
        at = some & (k == level)
        out[at] = np.maximum(table[level][lo[at]], table[level][hi[at] - 2 ** level])
    return out


def history_columns(rows: dict[str, tuple[np.ndarray, np.ndarray]], *, window_s: float,
                    history_s: float, steady_points: int,
                    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The ``ADDED`` columns (and the completed ``lag``) of one partition's rows, sorted by
    ``_us``, one row per snapshot (the landed tables' keys: with two rows at one snapshot, the
    window version's answer depended on Spark's order between them, and this one's does not
    reproduce it). ``rows``: (values, valid) of ``_us``, ``committed_offset``, ``high_watermark``,
    ``lag``, ``member_count``, ``_assigning`` and ``_unowned``. Returns (values, valid) per
    column. ``status``'s module doc gives what each value means to the rules."""
    us = rows["_us"][0]
    committed = rows["committed_offset"][0]
    hw, hw_ok = rows["high_watermark"]
    lag, lag_ok = rows["lag"]
    members, members_ok = rows["member_count"]
    assigning = rows["_assigning"][0] & rows["_assigning"][1]
    unowned = rows["_unowned"][0] & rows["_unowned"][1]
    n = len(us)
    index = np.arange(n)
    t = us / 1_000_000.0
    history_us, window_us = int(history_s * 1_000_000), int(window_s * 1_000_000)
    horizon = t - history_s
    has_prev = index > 0
    prev = np.maximum(index - 1, 0)

    # The previous row's values, and the lag completed from the last high watermark read
    # (within the history) where this snapshot's was not read.
    read = _last_index(hw_ok)
    read_ok = (read >= 0) & (t[np.maximum(read, 0)] >= horizon)
    read_t, read_hw = t[np.maximum(read, 0)], hw[np.maximum(read, 0)]
    full_lag = np.where(lag_ok, lag, np.maximum(read_hw - committed, 0))
    full_lag_ok = lag_ok | read_ok
    d_lag, d_lag_ok = full_lag - full_lag[prev], full_lag_ok & full_lag_ok[prev] & has_prev
    d_committed = committed - committed[prev]
    advanced = has_prev & (d_committed != 0)
    skipped = has_prev & (d_committed == 0)

    # The last advance (within the history) and the last snapshot with members before this one.
    last_adv = _last_index(advanced)
    last_adv_ok = (last_adv >= 0) & (t[np.maximum(last_adv, 0)] >= horizon)
    at_adv = np.maximum(last_adv, 0)
    seen = _before(_last_index(members_ok & (members > 0)))
    at_seen = np.maximum(seen, 0)
    seen_ok = (seen >= 0) & (t[at_seen] >= horizon)

    # The trend window [t - window_s, t] and the history [t - history_s, t], on microseconds.
    lo = np.searchsorted(us, us - window_us, side="left")
    hi = np.searchsorted(us, us, side="right")
    first_in_history = t[np.searchsorted(us, us - history_us, side="left")]
    counted = _in_frame(has_prev, lo, hi)
    lag_steps = _in_frame(d_lag_ok, lo, hi)
    skips = _in_frame(skipped, lo, hi)
    steady = (skips == 0) & (counted >= steady_points)
    last_advance = np.where(last_adv_ok, np.maximum(t[at_adv], first_in_history),
                            first_in_history)

    def since_run_began(running: np.ndarray) -> np.ndarray:
        """Where the current run of ``running`` began (or the history's first snapshot, if
        later): the last row that started one, as far back as the rows go."""
        was = np.where(has_prev, running[prev], False)
        start = _last_index(running & ~was)
        return np.where(start >= 0, np.maximum(t[np.maximum(start, 0)], first_in_history),
                        first_in_history)

    # The longest pause between two advances both in [t - history, t): a pause runs from the
    # snapshot before the one that saw an advance to the one that saw the next; the pause
    # ending at the window's first advance started before the window, so it never counts.
    advances = np.flatnonzero(advanced)
    pauses = np.full(len(advances), -np.inf)
    pauses[1:] = t[advances[1:]] - t[advances[:-1] - 1]
    first_adv = np.searchsorted(us[advances], us - history_us, side="left")
    end_adv = np.searchsorted(us[advances], us, side="left")
    longest = _range_max(pauses, np.minimum(first_adv + 1, end_adv), end_adv)

    everywhere = np.ones(n, dtype=bool)
    return {
        "lag": (full_lag, full_lag_ok),
        "_t": (t, everywhere),
        "_hw_carried": (~hw_ok & read_ok, everywhere),
        "_hw_read_t": (read_t, read_ok),
        "_last_adv_t": (t[at_adv], last_adv_ok),
        "_last_adv_lag": (full_lag[at_adv], last_adv_ok & full_lag_ok[at_adv]),
        "_members_seen_t": (t[at_seen], seen_ok),
        "_members_seen_lag": (full_lag[at_seen], seen_ok & full_lag_ok[at_seen]),
        "_n": (hi - lo, everywhere),
        "_rewound": (_in_frame(has_prev & (d_committed < 0), lo, hi) > 0, counted > 0),
        "_lag_first": (full_lag[lo], full_lag_ok[lo]),
        "_committed_first": (committed[lo], everywhere),
        "_hw_first": (hw[lo], hw_ok[lo]),
        "_lag_never_fell": (_in_frame(d_lag_ok & (d_lag < 0), lo, hi) == 0, lag_steps > 0),
        "_steady_last": (steady[at_adv], last_adv >= 0),
        "_last_advance": (last_advance, everywhere),
        "_assigning_since": (since_run_began(assigning), everywhere),
        "_unowned_since": (since_run_began(unowned), everywhere),
        "_longest_pause": (longest, np.isfinite(longest)),
    }


def group_columns(us: np.ndarray, columns: dict[str, tuple[np.ndarray, np.ndarray]], *,
                  lag_tolerance: int, halt_after_s: float,
                  ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``progress_stopped``'s view of the whole group at each snapshot, from the
    ``history_columns`` of all its partitions' rows (``us``: each row's snapshot): whether the
    row's partition halted (a steady committer behind, silent for ``halt_after_s``, its lag
    grown since its last advance), and per snapshot whether any partition moved within
    ``halt_after_s``, how many partitions there are and how many halted."""
    since_advance = columns["_t"][0] - columns["_last_advance"][0]
    (lag_values, lag_ok), (adv_lag, adv_lag_ok) = columns["lag"], columns["_last_adv_lag"]
    steady, steady_ok = columns["_steady_last"]
    halted = (lag_ok & (lag_values > lag_tolerance) & steady & steady_ok
              & columns["_last_adv_t"][1] & (since_advance >= halt_after_s)
              & adv_lag_ok & (lag_values > adv_lag))
    snapshots, at = np.unique(us, return_inverse=True)
    moving = np.zeros(len(snapshots), dtype=np.int32)
    np.maximum.at(moving, at, (since_advance < halt_after_s).astype(np.int32))
    everywhere = np.ones(len(us), dtype=bool)
    return {"_halted": (halted, everywhere), "_group_moving": (moving[at], everywhere),
            "_group_partitions": (np.bincount(at)[at], everywhere),
            "_group_halted": (np.bincount(at, weights=halted).astype(np.int64)[at], everywhere)}


INPUTS = {"_us": 0, "committed_offset": 0, "high_watermark": 0, "lag": 0, "member_count": 0,
          "_assigning": False, "_unowned": False}


def per_group(*, window_s: float, history_s: float, steady_points: int, lag_tolerance: int,
              halt_after_s: float) -> Callable[[pa.Table], pa.Table]:
    """The Arrow function of ``partition_status``'s grouped pass: one group's rows in (every
    partition of it), the same rows out, by partition and time, with ``ADDED``'s columns
    after theirs and the lag completed."""

    def added(rows: pa.Table) -> pa.Table:
        rows = rows.sort_by([("topic", "ascending"), ("partition", "ascending"),
                             ("_us", "ascending")])
        inputs = {name: _values(rows.column(name), fill) for name, fill in INPUTS.items()}
        topic = rows.column("topic").to_numpy(zero_copy_only=False)
        partition = rows.column("partition").to_numpy(zero_copy_only=False)
        starts = np.flatnonzero(np.concatenate(
            ([True], (topic[1:] != topic[:-1]) | (partition[1:] != partition[:-1]))))
        parts = [history_columns({name: (values[lo:hi], valid[lo:hi])
                                  for name, (values, valid) in inputs.items()},
                                 window_s=window_s, history_s=history_s,
                                 steady_points=steady_points)
                 for lo, hi in zip(starts, [*starts[1:], rows.num_rows], strict=True)]
        columns = {name: (np.concatenate([p[name][0] for p in parts]),
                          np.concatenate([p[name][1] for p in parts]))
                   for name in parts[0]}
        columns.update(group_columns(inputs["_us"][0], columns, lag_tolerance=lag_tolerance,
                                     halt_after_s=halt_after_s))
        types = {**{f.name: f.type for f in rows.schema}, **{f.name: f.type for f in ADDED}}
        out = {name: rows.column(name) for name in rows.column_names}
        for name, (values, valid) in columns.items():
            out[name] = pa.array(values, mask=~valid).cast(types[name])
        return pa.table(out)

    return added
