"""ConsumerProtocolSubscription / Assignment decoding, on crafted bytes (real ones are checked
through the demo groups in tests/integration/test_demo.py)."""

import struct

import pytest

from groupscope.contract.model import TopicPartition
from groupscope.kafka.protocol import ProtocolDecodeError, decode_assignment, decode_subscription


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _subscription(version: int, topics: list[str], tail: bytes = b"") -> bytes:
    body = struct.pack(">h", version) + struct.pack(">i", len(topics))
    body += b"".join(_s(t) for t in topics) + struct.pack(">i", -1)  # null user data
    return body + tail


def test_v0_topics() -> None:
    sub = decode_subscription(_subscription(0, ["orders", "payments"]))
    assert (sub.version, sub.topics, sub.owned_partitions) == (0, ("orders", "payments"), ())


def test_v3_owned_partitions_generation_and_rack() -> None:
    owned = struct.pack(">i", 1) + _s("orders") + struct.pack(">iii", 2, 0, 5)
    tail = owned + struct.pack(">i", 7) + _s("rack-a")
    sub = decode_subscription(_subscription(3, ["orders"], tail))
    assert sub.owned_partitions == (TopicPartition("orders", 0), TopicPartition("orders", 5))
    assert (sub.generation, sub.rack_id) == (7, "rack-a")


def test_a_newer_version_with_fields_we_do_not_know_still_gives_topics() -> None:
    sub = decode_subscription(_subscription(9, ["t"], struct.pack(">i", 0) + b"\x00" * 12))
    assert sub.topics == ("t",)


def test_unicode_topic_and_empty_subscription() -> None:
    assert decode_subscription(_subscription(0, [])).topics == ()
    assert decode_subscription(_subscription(0, ["é-t"])).topics == ("é-t",)


@pytest.mark.parametrize("cut", [1, 3, 7, 10])
def test_truncated_bytes_are_a_clear_error(cut: int) -> None:
    data = _subscription(0, ["orders"])
    with pytest.raises(ProtocolDecodeError, match="truncated"):
        decode_subscription(data[:cut])


def test_implausible_array_length_is_refused() -> None:
    with pytest.raises(ProtocolDecodeError, match="implausible"):
        decode_subscription(struct.pack(">hi", 0, 1_000_000))


def test_assignment() -> None:
    data = struct.pack(">hi", 0, 1) + _s("t") + struct.pack(">iii", 2, 3, 1) + struct.pack(">i", -1)
    assert decode_assignment(data) == (TopicPartition("t", 3), TopicPartition("t", 1))
    assert decode_assignment(b"") == ()
