"""TOPIC records: golden bytes and round trips."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from delayq.formats.commitlog import decode
from delayq.formats.topic import TopicDef, decode_topic, encode_topic

GOLDEN_TOPIC = "16000000efc0ddbd06010000030000006f7264657273"


def test_topic_golden_bytes_and_round_trip() -> None:
    assert encode_topic(3, "orders").hex() == GOLDEN_TOPIC
    assert decode(bytes.fromhex(GOLDEN_TOPIC))[0] == TopicDef(3, "orders")
    assert decode_topic(bytes.fromhex(GOLDEN_TOPIC)) == (TopicDef(3, "orders"), 22)


@given(st.integers(0, 2**32 - 1), st.text(max_size=30))
def test_any_topic_round_trips(topic_id: int, name: str) -> None:
    rec = encode_topic(topic_id, name)
    assert decode(b"pad" + rec + b"more", 3) == (TopicDef(topic_id, name), len(rec))
