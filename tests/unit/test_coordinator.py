"""Kafka's group -> __consumer_offsets partition formula. The cases are Java's own
String.hashCode values; tests/integration/test_coordinators.py checks many more against a JVM
and the formula against real brokers."""

import pytest

from groupscope.kafka.coordinator import java_string_hashcode, offsets_partition_for

HASHES = [
    # 1. the empty string hashes to 0
    ("", 0),
    # 2. one ASCII character is its code point
    ("a", 97),
    # 3. a classic Java example; fits in an int without overflow
    ("hello", 99162322),
    # 4. overflows: Java wraps modulo 2^32 into a negative int
    ("my-group", -1_906_497_762),
    # 5. hashes to Integer.MIN_VALUE, whose Math.abs stays negative (Kafka maps it to 0)
    ("polygenelubricants", -2_147_483_648),
    # 6. a BMP non-ASCII character counts as one UTF-16 unit
    ("é", 233),
    # 7. an astral character is two UTF-16 units (a surrogate pair), not one code point
    ("😀", 0xD83D * 31 + 0xDE00),
]


@pytest.mark.parametrize(("text", "expected"), HASHES)
def test_java_string_hashcode(text: str, expected: int) -> None:
    assert java_string_hashcode(text) == expected


def test_min_value_hash_maps_to_partition_zero() -> None:
    # Math.abs(Integer.MIN_VALUE) is still negative; Kafka's Utils.abs returns 0 for it.
    assert offsets_partition_for("polygenelubricants", 50) == 0


def test_negative_hash_uses_the_absolute_value_not_a_mask() -> None:
    # Kafka's own documented example: kafka-cp my-group -> 12 with 50 partitions.
    h = java_string_hashcode("my-group")
    assert h < 0
    assert offsets_partition_for("my-group", 50) == 12 == abs(h) % 50
    assert (h & 0x7FFFFFFF) % 50 != 12  # the partitioner's toPositive would be wrong here


def test_partition_count_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        offsets_partition_for("g", 0)
