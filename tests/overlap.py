"""Two writers made to overlap for real: the first is held inside its transaction until the
second waits on a lock (or has finished), so the second runs while the first's rows are
uncommitted, whatever the scheduler does. No sleeps decide anything: each wait is a condition
on the server (``pg_stat_activity``), bounded only so that a broken test fails instead of
hanging."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, text

WAIT_BOUND_S = 60.0


def lock_waiters(engine: Engine) -> int:
    """Sessions of the engine's database waiting on a lock (a row, a table, an advisory one)."""
    with engine.connect() as conn:
        return int(conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'")).scalar_one())


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_BOUND_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {WAIT_BOUND_S:g} s for {what}")
        time.sleep(0.02)


class Run(threading.Thread):
    """``work()`` in a thread of its own, keeping its result or its exception."""

    def __init__(self, work: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.work = work
        self.result: Any = None
        self.error: BaseException | None = None
        self.finished = threading.Event()

    def run(self) -> None:
        try:
            self.result = self.work()
        except BaseException as exc:  # reported by outcome()
            self.error = exc
        finally:
            self.finished.set()

    def outcome(self) -> Any:
        self.join(WAIT_BOUND_S)
        if self.is_alive():
            raise AssertionError(f"still running after {WAIT_BOUND_S} s: {self.work!r}")
        if self.error is not None:
            raise self.error
        return self.result


def hold_first(engine: Engine, target: Any, name: str, first: Callable[[], Any],
               second: Callable[[], Any]) -> tuple[Any, Any]:
    """Runs ``first`` and ``second`` at once: ``target.name`` (a step inside the first's
    transaction, patched here for the call) holds the first there, once, until the second
    waits on a lock or has finished; returns both results (raises the first error)."""
    real = getattr(target, name)
    inside = threading.Event()
    runs: list[Run] = []

    def held(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        if threading.current_thread() is runs[0] and not inside.is_set():
            inside.set()
            until(lambda: runs[1].finished.is_set() or lock_waiters(engine) > 0,
                  "the second writer to wait or finish")
        return result

    setattr(target, name, held)
    try:
        runs.append(Run(first))
        runs.append(Run(second))
        runs[0].start()
        until(lambda: inside.is_set() or runs[0].finished.is_set(),
              "the first writer to be inside its transaction")
        runs[1].start()
        return runs[0].outcome(), runs[1].outcome()
    finally:
        setattr(target, name, real)
