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

So ``run_isolated`` calls a function in ``python -m groupscope.collect.isolated``, passing
the arguments and the result (or the exception) through pipes, pickled. A child killed by a
signal is tried again, up to ``attempts`` times in all (the coordinator has moved by then); if
every attempt dies, ``CollectorCrashed`` says so, with the signal and the likely cause.
``take_snapshot_isolated`` is ``collector.take_snapshot`` so; ``pipeline.collect`` lands the
snapshot in the child too, so that only its summary crosses the pipe (pickling a snapshot of
20,000 groups costs about 2 s).
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
import signal
import subprocess
import sys
from datetime import datetime
from typing import Any

from groupscope.collect.collector import CollectorSettings
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


def run_isolated(target: str, args: tuple[Any, ...], what: str, *,
                 attempts: int = ATTEMPTS, python: str = sys.executable,
                 budget_s: float = 120.0) -> Any:
    """``target`` (``module:function``) called with ``args`` in a child process run by the
    interpreter ``python``; returns what it returns, raises what it raises. A child killed by
    a signal is tried again, up to ``attempts`` times in all; one that gives no answer within
    ``budget_s`` (stuck in a C call) is killed, and not tried again. Either way, when no
    attempt answers: ``CollectorCrashed``, naming ``what``."""
    request = pickle.dumps((target, args, logging.getLogger().getEffectiveLevel()))
    failures: list[str] = []
    for attempt in range(1, attempts + 1):
        try:
            done = subprocess.run([python, "-m", __name__], input=request,
                                  stdout=subprocess.PIPE, timeout=budget_s, check=False)
        except subprocess.TimeoutExpired:
            failures.append(f"attempt {attempt}: no answer within {budget_s:.0f} s (killed)")
            break
        if done.returncode == 0:
            try:
                outcome, value = pickle.loads(done.stdout)  # noqa: S301 - our own child's
            except Exception as exc:  # an answer cut short: as good as none
                failures.append(f"attempt {attempt}: an unreadable answer ({exc!r})")
                break
            if outcome == "error":
                raise value
            if failures:
                log.warning("%s: done at attempt %d after: %s", what, attempt,
                            "; ".join(failures))
            return value
        why = (f"killed by {_signal_name(done.returncode)}" if done.returncode < 0
               else f"exit code {done.returncode}")
        failures.append(f"attempt {attempt}: the collector process was {why}")
        log.warning("%s: the collector process was %s; %s", what, why,
                    "trying again" if attempt < attempts else "giving up")
    raise CollectorCrashed(
        f"{what}: the collector process gave no answer ({'; '.join(failures)}). A SIGSEGV "
        "is most likely librdkafka's crash on a coordinator that moved during "
        "ListConsumerGroupOffsets (confluentinc/librdkafka#5040): a broker restarting; the "
        "next snapshot should succeed")


def take_snapshot_isolated(cluster: ClusterConfig, timeout_s: float, snapshot_ts: datetime,
                           sample_records: bool = True,
                           settings: CollectorSettings | None = None,
                           attempts: int = ATTEMPTS, python: str = sys.executable) -> Snapshot:
    """``collector.take_snapshot`` in a child process (``run_isolated``). Raises what it
    raises (ConfigError, ClusterUnavailable), or CollectorCrashed."""
    snapshot: Snapshot = run_isolated(
        "groupscope.collect.collector:take_snapshot",
        (cluster, timeout_s, snapshot_ts, sample_records, settings),
        f"snapshot of cluster {cluster.name!r}", attempts=attempts, python=python,
        budget_s=budget_for(timeout_s))
    return snapshot


def budget_for(timeout_s: float) -> float:
    """How long a snapshot's child may take before it is taken as stuck: far beyond any budget
    of the collector's own (its requests are bounded by ``timeout_s`` and retried a bounded
    number of times)."""
    return max(120.0, 20 * timeout_s)


def _child() -> None:
    # The answer goes to the pipe the parent reads; anything else written to standard output
    # (a library's print) goes to standard error instead of into the answer.
    answer_to = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    target, args, level = pickle.loads(sys.stdin.buffer.read())  # noqa: S301
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    module, _, name = target.partition(":")
    answer: tuple[str, Any]
    try:
        answer = ("value", getattr(importlib.import_module(module), name)(*args))
    except Exception as exc:  # handed to the parent, which raises it
        log.debug("the child's error", exc_info=True)
        try:
            pickle.dumps(exc)
            answer = ("error", exc)
        except Exception:  # an exception that does not pickle: its text
            answer = ("error", RuntimeError(f"{type(exc).__name__}: {exc}"))
    answer_to.write(pickle.dumps(answer))
    answer_to.flush()


if __name__ == "__main__":
    _child()
