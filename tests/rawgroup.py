"""A minimal classic-protocol group member speaking the Kafka wire protocol directly, so tests
can make groups of protocol types no client library offers (Kafka Connect's "connect")."""

from __future__ import annotations

import socket
import struct

JOIN_GROUP, SYNC_GROUP = 11, 14


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _bytes(value: bytes) -> bytes:
    return struct.pack(">i", len(value)) + value


class RawMember:
    """Joins ``group_id`` with ``protocol_type`` as its only member (so it leads) and syncs,
    leaving the group Stable until the session times out or the socket closes."""

    def __init__(self, host: str, port: int, group_id: str, protocol_type: str,
                 protocol: str, client_id: str = "raw-connect-worker") -> None:
        self.sock = socket.create_connection((host, port), timeout=30)
        self.group_id, self.client_id = group_id, client_id
        self.correlation = 0
        join = (_string(group_id) + struct.pack(">ii", 30_000, 30_000) + _string("")
                + _string(protocol_type) + struct.pack(">i", 1) + _string(protocol)
                + _bytes(b"\x00\x00opaque-worker-metadata"))
        reply = self._call(JOIN_GROUP, 2, join)
        _throttle, error, self.generation = struct.unpack_from(">ihi", reply, 0)
        if error:
            raise RuntimeError(f"JoinGroup failed with error code {error}")
        offset = 10
        self.protocol, offset = self._read_string(reply, offset)
        _leader, offset = self._read_string(reply, offset)
        self.member_id, offset = self._read_string(reply, offset)
        sync = (_string(group_id) + struct.pack(">i", self.generation) + _string(self.member_id)
                + struct.pack(">i", 1) + _string(self.member_id) + _bytes(b"opaque-assignment"))
        reply = self._call(SYNC_GROUP, 1, sync)
        _throttle, error = struct.unpack_from(">ih", reply, 0)
        if error:
            raise RuntimeError(f"SyncGroup failed with error code {error}")

    def _call(self, api_key: int, version: int, body: bytes) -> bytes:
        self.correlation += 1
        header = struct.pack(">hhi", api_key, version, self.correlation) + _string(self.client_id)
        message = header + body
        self.sock.sendall(struct.pack(">i", len(message)) + message)
        size = struct.unpack(">i", self._read(4))[0]
        response = self._read(size)
        (correlation,) = struct.unpack_from(">i", response, 0)
        assert correlation == self.correlation
        return response[4:]

    def _read(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            data += chunk
        return data

    @staticmethod
    def _read_string(data: bytes, offset: int) -> tuple[str, int]:
        (length,) = struct.unpack_from(">h", data, offset)
        start = offset + 2
        return data[start : start + length].decode(), start + length

    def close(self) -> None:
        self.sock.close()
