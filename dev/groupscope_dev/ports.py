from __future__ import annotations

import socket
import time
from collections.abc import Iterable
from pathlib import Path

from groupscope_dev import StackError

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


def _below_ephemeral(low: int = 20000) -> tuple[int, int]:
    """Ports below the kernel's ephemeral range: outgoing connections take their local port
    from that range, so a port found free there can be taken by a client before a server
    binds it (it happened: a test broker failed with "Address already in use")."""
    try:
        first = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first = 32768
    return low, max(first, low + 1000)


def free_ports(count: int) -> list[int]:
    """Distinct ports free right now, below the ephemeral range (for tests that run their own
    servers)."""
    import random

    low, high = _below_ephemeral()
    rng = random.Random()  # noqa: S311 - picking ports, not secrets
    found: list[int] = []
    for _ in range(1000):
        port = rng.randrange(low, high)
        if port not in found and port_is_free(port):
            found.append(port)
            if len(found) == count:
                return found
    raise RuntimeError(f"no {count} free ports between {low} and {high}")


def wait_for_port(port: int, deadline: float, host: str = LOOPBACK) -> bool:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def free_port_block(count: int) -> int:
    """The first port of ``count`` consecutive free ports below the ephemeral range (for a
    multi-broker test cluster)."""
    import random

    low, high = _below_ephemeral()
    rng = random.Random()  # noqa: S311 - picking ports, not secrets
    for _ in range(200):
        start = rng.randrange(low, high - count)
        if all(port_is_free(p) for p in range(start, start + count)):
            return start
    raise RuntimeError(f"no {count} consecutive free ports between {low} and {high}")
