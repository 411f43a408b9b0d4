"""What a failed request means for a snapshot: asked again, recorded, or fatal.

Below the cluster level nothing fails a snapshot: each failure becomes a CollectionError on it
and the collection goes on, after a bounded number of retries for errors that asking again,
shortly, can cure. Only a cluster that cannot be reached at all is fatal (ClusterUnavailable,
with a message that says what to check).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import queue
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from groupscope.contract.model import CollectionError, Stage

__all__ = [
    "CLUSTER_UNREACHABLE",
    "RETRIABLE",
    "Failure",
    "RetryPolicy",
    "collection_error",
    "failure_of",
    "unavailable_message",
]

# Errors after which asking again, shortly, can succeed: the coordinator moved or is loading.
RETRIABLE = frozenset(
    {
        "NOT_COORDINATOR",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_LEADER_OR_FOLLOWER",
        "NOT_LEADER_FOR_PARTITION",
        "LEADER_NOT_AVAILABLE",
        "REQUEST_TIMED_OUT",
        "_TIMED_OUT",
        "_TRANSPORT",
        "UNKNOWN_LEADER_EPOCH",
        "OFFSET_NOT_AVAILABLE",
    }
)

# Errors of a whole-cluster request (ListGroups) that mean no broker can be reached: going on
# would only record the same failure for every group.
CLUSTER_UNREACHABLE = frozenset({"_TRANSPORT", "_TIMED_OUT", "_AUTHENTICATION"})
# A request that waited out its whole timeout: asking the same broker again waits as long.
TIMEOUTS = frozenset({"_TIMED_OUT", "REQUEST_TIMED_OUT"})


@dataclass(frozen=True, slots=True)
class Failure:
    code: str
    message: str
    retriable: bool
    attempts: int = 1


def failure_of(exc: Any) -> Failure:
    """Normalise what a future raised, or a bare KafkaError that a result lists, into
    (Kafka error name, message, retriable)."""
    if isinstance(exc, concurrent.futures.TimeoutError | TimeoutError):
        return Failure("_TIMED_OUT", "no answer before the request timeout", True)
    if callable(getattr(exc, "name", None)):
        error: Any = exc
    else:
        error = exc.args[0] if getattr(exc, "args", None) else None
    name = getattr(error, "name", None)
    if callable(name):
        code = str(name())
        text = str(error.str()) if hasattr(error, "str") else str(error)
        retriable = code in RETRIABLE or bool(getattr(error, "retriable", lambda: False)())
        return Failure(code, text, retriable)
    return Failure("UNEXPECTED", f"{type(exc).__name__}: {exc}", False)


def collection_error(
    stage: Stage,
    failure: Failure,
    *,
    group_id: str | None = None,
    topic: str | None = None,
    partition: int | None = None,
) -> CollectionError:
    return CollectionError(
        stage=stage, code=failure.code, message=failure.message, group_id=group_id,
        topic=topic, partition=partition, retriable=failure.retriable, attempts=failure.attempts,
    )


# How groupscope.kafka.admin's diagnosis starts when the security settings are at fault.
SECURITY_FAILURES = ("authentication failed", "TLS failed", "the broker closed a plaintext")


def unavailable_message(cluster: str, failure: Failure, detail: str | None) -> str:
    hints = {
        "_TRANSPORT": "no broker answered; check bootstrap.servers and the network",
        "_TIMED_OUT": "no broker answered in time; check bootstrap.servers and the network",
        "_AUTHENTICATION": "authentication failed; check the SASL/SSL settings",
        "_ALL_BROKERS_DOWN": "all brokers are down or unreachable",
        "_RESOLVE": "a bootstrap host name does not resolve",
        "CLUSTER_AUTHORIZATION_FAILED": "not authorized to describe the cluster",
        "TOPIC_AUTHORIZATION_FAILED": "not authorized to describe topics",
    }
    hint = hints.get(failure.code, failure.message)
    if detail and detail.startswith(SECURITY_FAILURES):
        hint = detail  # a transport failure whose cause is the credentials or TLS
    elif detail:
        hint = f"{hint}: {detail}"
    return f"cluster {cluster!r} is unavailable: {hint} ({failure.code})"


T = TypeVar("T")


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int  # per key, for retriable errors
    backoff_s: float  # before the first retry; doubles with each further one
    request_timeout_s: float
    sleep: Callable[[float], None] = time.sleep

    def pause(self, attempts_made: int) -> None:
        self.sleep(self.backoff_s * 2 ** (attempts_made - 1))

    def with_retries(
        self,
        keys: Sequence[T],
        submit: Callable[[Sequence[T]], dict[T, concurrent.futures.Future[Any]]],
        batch: int,
        in_flight: int | None = None,
    ) -> list[tuple[T, Any]]:
        """Runs ``submit`` over ``keys`` in batches, keeping at most ``in_flight`` batches
        outstanding, and resubmits keys that failed retriably, up to ``attempts`` times.
        Returns (key, result or Failure) for every key."""
        results: list[tuple[T, Any]] = []
        pending: Sequence[T] = list(keys)
        for attempt in range(1, self.attempts + 1):
            if not pending:
                break
            if attempt > 1:
                self.pause(attempt - 1)
            retry: list[T] = []
            for key, outcome in self._run_batches(pending, submit, batch, in_flight):
                if (
                    isinstance(outcome, Failure)
                    and outcome.retriable
                    and attempt < self.attempts
                ):
                    retry.append(key)
                elif isinstance(outcome, Failure):
                    results.append((key, dataclasses.replace(outcome, attempts=attempt)))
                else:
                    results.append((key, outcome))
            pending = retry
        return results

    def _run_batches(
        self,
        keys: Sequence[T],
        submit: Callable[[Sequence[T]], dict[T, concurrent.futures.Future[Any]]],
        batch: int,
        in_flight: int | None,
    ) -> Iterator[tuple[T, Any]]:
        """Yields (key, result or Failure) as answers arrive. Completed futures report
        through a queue, so each answer costs O(1) however many are in flight."""
        limit = (in_flight or 1) * batch
        timeout = self.request_timeout_s + 5
        batches = iter(_chunks(keys, batch))
        completed: queue.SimpleQueue[tuple[T, concurrent.futures.Future[Any]]] = (
            queue.SimpleQueue()
        )
        outstanding: dict[concurrent.futures.Future[Any], T] = {}

        def track(key: T, future: concurrent.futures.Future[Any]) -> None:
            outstanding[future] = key

            def report(done: concurrent.futures.Future[Any]) -> None:
                completed.put((key, done))

            future.add_done_callback(report)

        def top_up() -> None:
            while len(outstanding) < limit:
                chunk = next(batches, None)
                if chunk is None:
                    return
                try:
                    futures = submit(chunk)
                except Exception as exc:  # a refused call fails its keys, not the snapshot
                    for key in chunk:
                        refused: concurrent.futures.Future[Any] = concurrent.futures.Future()
                        refused.set_exception(exc)
                        track(key, refused)
                    continue
                for key, future in futures.items():
                    track(key, future)

        top_up()
        while outstanding:
            try:
                key, future = completed.get(timeout=timeout)
            except queue.Empty:
                for future, key in list(outstanding.items()):
                    future.cancel()
                    del outstanding[future]
                    yield key, Failure("_TIMED_OUT", "no answer before the request timeout", True)
                continue
            if outstanding.pop(future, None) is None:
                continue  # already reported as timed out
            try:
                yield key, future.result()
            except Exception as exc:
                yield key, failure_of(exc)
            top_up()
