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


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: the absolute value, except that Integer.MIN_VALUE (whose
    absolute value does not fit in an int) maps to 0.

    Not ``n & 0x7fffffff`` (that is ``Utils.toPositive``, the producer partitioner's): the two
    disagree on every negative hash, and using the mask names the wrong coordinator for about
    half of all group ids. Checked against real brokers in tests/integration.
    """
    return 0 if n == -0x8000_0000 else abs(n)


def offsets_partition_for(
    group_id: str, partitions: int = DEFAULT_OFFSETS_TOPIC_PARTITIONS
) -> int:
    """The ``__consumer_offsets`` partition that stores a group:
    ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``."""
    if partitions <= 0:
        raise ValueError(f"offsets topic partition count must be positive, got {partitions}")
    return kafka_abs(java_string_hashcode(group_id)) % partitions
