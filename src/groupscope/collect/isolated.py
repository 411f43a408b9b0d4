"""A snapshot taken in a child process, so that a crash of the Kafka client library costs one
attempt, not the task, the scheduler's worker or the test run.

Why: librdkafka (2.16, and its master as of 2026-11) dereferences a null consumer-group handle
when an AdminClient's ListConsumerGroupOffsets gets NOT_COORDINATOR or
COORDINATOR_NOT_AVAILABLE back: ``rd_kafka_handle_OffsetFetch`` asks the client's own group
(``rk_cgrp``, which an AdminClient does not have) to look its coordinator up again
(confluentinc/librdkafka#5040). The answer comes whenever a group's coordinator moves between
the FindCoordinator and the OffsetFetch the client sends for it: a broker restarting (every
rolling upgrade), a controlled shutdown, a partition reassignment of ``__consumer_offsets``.
The process dies with SIGSEGV. We reproduced it on the 3-broker cluster
(tests/integration/test_alert_unknown.py: 1 run in 5 crashed the test process).

So ``take_snapshot_isolated`` runs ``collector.take_snapshot`` in ``python -m
groupscope.collect.isolated``, passing the arguments and the result (or the exception) through
pipes, pickled. A child killed by a signal is tried again, up to ``attempts`` times in all (the
coordinator has moved by then); if every attempt dies, ``CollectorCrashed`` says so, with the
signal and the likely cause. A new process per snapshot costs about 0.2 s.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import subprocess
import sys
from datetime import datetime
from typing import Any

from groupscope.collect.collector import CollectorSettings, take_snapshot
from groupscope.contract.cluster import ClusterConfig
from groupscope.contract.model import Snapshot
from groupscope.kafka.admin import ClusterUnavailable

log = logging.getLogger(__name__)

ATTEMPTS = 2


class CollectorCrashed(ClusterUnavailable):
    """Every attempt's child process died (a signal, or no answer): no snapshot."""


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def take_snapshot_isolated(cluster: ClusterConfig, timeout_s: float, snapshot_ts: datetime,
                           sample_records: bool = True,
                           settings: CollectorSettings | None = None,
                           attempts: int = ATTEMPTS, python: str = sys.executable) -> Snapshot:
    """``collector.take_snapshot`` in a child process (see the module doc), run by the
    interpreter ``python``. Raises what it raises (ConfigError, ClusterUnavailable), or
    CollectorCrashed."""
    request = pickle.dumps((cluster, timeout_s, snapshot_ts, sample_records, settings,
                            logging.getLogger().getEffectiveLevel()))
    # Bounded, beyond any budget of the collector's own: a child stuck in a C call is killed.
    budget_s = max(120.0, 20 * timeout_s)
    failures: list[str] = []
    for attempt in range(1, attempts + 1):
        try:
            done = subprocess.run([python, "-m", __name__], input=request,
                                  stdout=subprocess.PIPE, timeout=budget_s, check=False)
        except subprocess.TimeoutExpired:
            failures.append(f"attempt {attempt}: no answer within {budget_s:.0f} s (killed)")
            continue
        if done.returncode == 0:
            outcome, value = pickle.loads(done.stdout)  # noqa: S301 - our own child's
            if outcome == "error":
                raise value
            result: Snapshot = value
            if failures:
                log.warning("snapshot of %s taken at attempt %d after: %s", cluster.name,
                            attempt, "; ".join(failures))
            return result
        why = (f"killed by {_signal_name(done.returncode)}" if done.returncode < 0
               else f"exit code {done.returncode}")
        failures.append(f"attempt {attempt}: the collector process was {why}")
        log.warning("snapshot of %s: the collector process was %s; %s", cluster.name, why,
                    "trying again" if attempt < attempts else "giving up")
    raise CollectorCrashed(
        f"the collector process died at every attempt ({'; '.join(failures)}). A SIGSEGV "
        "is most likely librdkafka's crash on a coordinator that moved during "
        "ListConsumerGroupOffsets (confluentinc/librdkafka#5040): a broker restarting; the "
        "next snapshot should succeed")


def _child() -> None:
    # The answer goes to the pipe the parent reads; anything else written to standard output
    # (a library's print) goes to standard error instead of into the answer.
    answer_to = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    cluster, timeout_s, snapshot_ts, sample_records, settings, level = pickle.loads(  # noqa: S301
        sys.stdin.buffer.read())
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    answer: tuple[str, Any]
    try:
        answer = ("snapshot", take_snapshot(cluster, timeout_s, snapshot_ts,
                                            sample_records=sample_records, settings=settings))
    except Exception as exc:  # handed to the parent, which raises it
        try:
            pickle.dumps(exc)
            answer = ("error", exc)
        except Exception:  # an exception that does not pickle: its text
            answer = ("error", RuntimeError(f"{type(exc).__name__}: {exc}"))
    answer_to.write(pickle.dumps(answer))
    answer_to.flush()


if __name__ == "__main__":
    _child()
