"""Decoders for the consumer protocol's embedded bytes (a classic group member's metadata and
assignment): ConsumerProtocolSubscription and ConsumerProtocolAssignment, versions 0-3.
Pure functions over bytes; truncated or malformed input raises ProtocolDecodeError."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from groupscope.contract.model import TopicPartition


class ProtocolDecodeError(ValueError):
    pass


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.offset + size > len(self.data):
            raise ProtocolDecodeError(
                f"truncated: need {size} bytes at offset {self.offset}, have "
                f"{len(self.data) - self.offset}"
            )
        (value,) = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += size
        return int(value)

    def string(self) -> str | None:
        length = self.take(">h")
        if length < 0:
            return None
        if self.offset + length > len(self.data):
            raise ProtocolDecodeError(f"truncated string of {length} bytes at {self.offset}")
        raw = self.data[self.offset : self.offset + length]
        self.offset += length
        return raw.decode("utf-8", "replace")

    def skip_bytes(self) -> None:
        length = self.take(">i")
        if length > 0:
            if self.offset + length > len(self.data):
                raise ProtocolDecodeError(f"truncated bytes of {length} at {self.offset}")
            self.offset += length

    def count(self) -> int:
        n = self.take(">i")
        if n < -1 or n > len(self.data):
            raise ProtocolDecodeError(f"implausible array length {n} at {self.offset - 4}")
        return max(n, 0)

    def partitions(self) -> list[TopicPartition]:
        out: list[TopicPartition] = []
        for _ in range(self.count()):
            topic = self.string() or ""
            out.extend(TopicPartition(topic, self.take(">i")) for _ in range(self.count()))
        return out


@dataclass(frozen=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation: int | None = None
    rack_id: str | None = None


def decode_subscription(data: bytes) -> Subscription:
    r = _Reader(data)
    version = r.take(">h")
    topics = tuple(t for t in (r.string() for _ in range(r.count())) if t is not None)
    r.skip_bytes()  # user data
    owned: list[TopicPartition] = []
    generation = rack = None
    # Newer versions only add fields at the end: read what is there, ignore what follows.
    if version >= 1 and r.offset < len(data):
        owned = r.partitions()
    if version >= 2 and r.offset < len(data):
        generation = r.take(">i")
    if version >= 3 and r.offset < len(data):
        rack = r.string()
    return Subscription(version, topics, tuple(owned), generation, rack)


def decode_assignment(data: bytes) -> tuple[TopicPartition, ...]:
    if not data:
        return ()
    r = _Reader(data)
    r.take(">h")  # version
    return tuple(r.partitions())
