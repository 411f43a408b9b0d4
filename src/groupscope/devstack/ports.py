from __future__ import annotations

import socket
import time
from collections.abc import Iterable

from groupscope.devstack import StackError

LOOPBACK = "127.0.0.1"


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def require_free(ports: Iterable[int], what: str, hint: str) -> None:
    taken = [p for p in ports if not port_is_free(p)]
    if taken:
        listed = ", ".join(str(p) for p in taken)
        raise StackError(f"{what}: port {listed} on {LOOPBACK} is already in use. {hint}")


def free_ports(count: int) -> list[int]:
    """Distinct ports the OS reports free right now (for tests that run their own servers)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def wait_for_port(port: int, deadline: float, host: str = LOOPBACK) -> bool:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def free_port_block(count: int, low: int = 20000, high: int = 60000) -> int:
    """The first port of ``count`` consecutive free ports (for a multi-broker test cluster)."""
    import random

    rng = random.Random()  # noqa: S311 - picking ports, not secrets
    for _ in range(200):
        start = rng.randrange(low, high - count)
        if all(port_is_free(p) for p in range(start, start + count)):
            return start
    raise RuntimeError(f"no {count} consecutive free ports between {low} and {high}")
