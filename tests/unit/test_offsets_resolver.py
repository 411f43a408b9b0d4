"""Topic ids from the Admin API are matched to the ids in __consumer_offsets records, whose
text form (Kafka's Uuid.toString) is URL-safe base64; librdkafka prints standard base64."""

from __future__ import annotations

import base64
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from groupscope.offsets.decoder import _Reader
from groupscope.offsets.ingest import topic_resolver

RAW_ID = bytes.fromhex("fbff3e00112233445566778899aabbcc")  # encodes with '+' and '/'


class _Admin:
    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(topics={"orders": None})

    def describe_topics(self, topics: Any, request_timeout: float) -> dict[str, Future[Any]]:
        future: Future[Any] = Future()
        future.set_result(SimpleNamespace(topic_id=base64.b64encode(RAW_ID).decode()))
        return {"orders": future}


def test_admin_topic_ids_resolve_the_decoders_ids() -> None:
    decoded_id = _Reader(RAW_ID, 0, "test").uuid()
    assert "+" in base64.b64encode(RAW_ID).decode() and "/" in base64.b64encode(RAW_ID).decode()
    assert topic_resolver(_Admin(), 1.0)({decoded_id}) == {decoded_id: "orders"}
