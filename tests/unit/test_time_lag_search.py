"""The estimated time lag's search (``lag._appended_at``: a sort and binary searches per log
partition) against the definition in the module doc of analyze/lag.py, written out naively
point by point, on random histories: gaps between snapshots, flat stretches, re-created
topics (the high watermark going down), committed offsets before the history window, on a
point, between points. The two must agree exactly: same kind, same time to the bit."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("pyspark")

from groupscope.analyze.lag import _appended_at

HISTORY_S = 600.0
T0_US = 1_795_000_000 * 1_000_000  # November 2026, in microseconds


def definition(points: list[tuple[int, int]], query_us: int, value: int, hw_now: int,
               ) -> tuple[float, str | None]:
    """The module doc, literally: the query's segment (cut where the high watermark goes
    down), the last point in it below v and the first at or above it, the window's first
    point, then the first kind whose condition holds."""
    points = sorted(points)
    segment, segments = 0, []
    for i, (_, hw) in enumerate(points):
        if i and hw < points[i - 1][1]:
            segment += 1
        segments.append(segment)
    own = [s for (us, _), s in zip(points, segments, strict=True) if us == query_us]
    if not own:
        return math.nan, None
    history = [(us / 1_000_000.0, hw) for (us, hw), s in zip(points, segments, strict=True)
               if s == own[0]]
    t = query_us / 1_000_000.0
    below = [p for p in history if p[1] < value]
    at_or_above = [p for p in history if p[1] >= value]
    before = below[-1] if below else None
    after = at_or_above[0] if at_or_above else None
    first = next(p for p in history if p[0] >= t - HISTORY_S)
    inside = before is not None and before[0] >= t - HISTORY_S
    if inside:
        if after is None:
            return math.nan, None
        b_t, b_hw = before  # type: ignore[misc]
        a_t, a_hw = after
        return b_t + (value - b_hw) * (a_t - b_t) / (a_hw - b_hw), "interpolated"
    f_t, f_hw = first
    rate = (hw_now - f_hw) / (t - f_t) if t > f_t else None
    if rate is not None and rate > 0:
        return f_t - (f_hw - value) / rate, "extrapolated"
    return f_t, "at_least"


def random_partition(rng: random.Random) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(time µs, high watermark) points and (time µs, committed offset) queries."""
    points, queries = [], []
    us, hw = T0_US + rng.randrange(10**6), rng.randrange(0, 10_000)
    irregular = rng.random() < 0.5
    for _ in range(rng.randrange(1, 80)):
        # A regular partition's snapshots are whole seconds apart (so that a point lies
        # exactly at a window's start), an irregular one's not; sometimes a gap longer than
        # the history window (the collector was down).
        us += (rng.choice([*[10] * 12, 20, 30, 900]) * 1_000_000
               + (rng.randrange(-1000, 1000) if irregular else 0))
        roll = rng.random()
        if roll < 0.03:
            hw = rng.randrange(0, 50)  # re-created
        elif roll > 0.3:  # else flat: nothing produced
            hw += rng.randrange(1, 400)
        points.append((us, hw))
        # Committed anywhere from far behind the window to the high watermark (lag 0 is
        # not asked: the caller answers it), sometimes exactly on an earlier point's value,
        # or on the value of the point at the window's very start.
        window_start = dict(points).get(us - int(HISTORY_S * 1_000_000), hw)
        for _ in range(rng.randrange(0, 4)):
            committed = rng.choice([hw - 1, hw - rng.randrange(1, 50),
                                    hw - rng.randrange(1, 20_000),
                                    rng.choice(points)[1] - 1, window_start])
            if committed < hw:
                queries.append((us, committed))
    if rng.random() < 0.1:  # a query whose snapshot has no point: no answer
        queries.append((us + 1, hw - 1))
    return points, queries


def test_the_search_equals_the_definition_on_random_histories() -> None:
    rng = random.Random(30)
    kinds: Counter[str | None] = Counter()
    for _ in range(1000):
        points, queries = random_partition(rng)
        shuffled = rng.sample(points, len(points))  # the search sorts its points itself
        hw_at = dict(points)
        query_us = np.array([us for us, _ in queries], dtype=np.int64)
        values = np.array([c + 1 for _, c in queries], dtype=np.int64)
        hw_now = np.array([hw_at.get(us, c + 1) for us, c in queries], dtype=np.int64)
        appended, found_kinds = _appended_at(
            np.array([us for us, _ in shuffled], dtype=np.int64),
            np.array([hw for _, hw in shuffled], dtype=np.int64),
            query_us, values, hw_now, HISTORY_S)
        for i, (us, committed) in enumerate(queries):
            expected_t, expected_kind = definition(points, us, committed + 1, int(hw_now[i]))
            assert found_kinds[i] == expected_kind, (points, queries[i])
            if expected_kind is None:
                assert math.isnan(appended[i])
            else:
                assert appended[i] == expected_t, (points, queries[i])  # to the bit
            kinds[expected_kind] += 1
    # Every branch was taken, many times: the comparison above cannot pass vacuously.
    assert min(kinds[k] for k in ("interpolated", "extrapolated", "at_least", None)) >= 20, kinds


def test_a_partition_without_points_answers_nothing() -> None:
    appended, kinds = _appended_at(np.array([], dtype=np.int64), np.array([], dtype=np.int64),
                                   np.array([T0_US]), np.array([5]), np.array([9]), HISTORY_S)
    assert math.isnan(appended[0]) and kinds[0] is None
