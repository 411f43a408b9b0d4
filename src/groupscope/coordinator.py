"""Which broker coordinates a group: the leader of its ``__consumer_offsets`` partition."""

from __future__ import annotations

DEFAULT_OFFSETS_TOPIC_PARTITIONS = 50


def java_string_hashcode(text: str) -> int:
    """Java's ``String.hashCode()``: s[0]*31^(n-1) + ... over UTF-16 code units, as int32."""
    h = 0
    encoded = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(encoded), 2):
        h = (31 * h + ((encoded[i] << 8) | encoded[i + 1])) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def offsets_partition_for(
    group_id: str, partitions: int = DEFAULT_OFFSETS_TOPIC_PARTITIONS
) -> int:
    """The ``__consumer_offsets`` partition that stores a group (Kafka's ``Utils.abs(h) % n``).

    Kafka's ``abs`` is ``h & 0x7fffffff``, not the mathematical absolute value: the two differ
    for negative hashes, and for Integer.MIN_VALUE.
    """
    if partitions <= 0:
        raise ValueError(f"offsets topic partition count must be positive, got {partitions}")
    return (java_string_hashcode(group_id) & 0x7FFFFFFF) % partitions
