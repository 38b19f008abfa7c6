"""Receipts (``delayq.receipts``): batch and single text forms agree; the shard
rides in every receipt, so two shards' receipts differ."""

from __future__ import annotations

import numpy as np

from delayq.errors import InvalidArgument
from delayq.receipts import Receipt


def test_receipts_batch_and_single_forms_agree() -> None:
    offsets = np.array([0, 5, 127, 128, 70_000, 2**33], dtype=np.int64)
    texts = Receipt.texts(1, 3, 2, offsets)
    assert texts == [str(Receipt(1, 3, int(o), 2)) for o in offsets]
    many = np.concatenate([offsets, offsets * 3 + 1, np.arange(20) << 20])  # vectorised
    assert Receipt.texts(1, 3, 2, many) == [str(Receipt(1, 3, int(o), 2)) for o in many]
    big = str(Receipt(700, 300, 9, 200))  # leading fields over one byte: the slow path
    parsed = Receipt.parse_many([*texts, big, "nope", texts[0][:-1] + "A"])
    assert parsed[: len(offsets)] == [Receipt(1, 3, int(o), 2) for o in offsets]
    assert parsed[len(offsets)] == Receipt(700, 300, 9, 200)
    bad = parsed[len(offsets) + 1 :]
    assert all(isinstance(b, InvalidArgument) for b in bad)
    assert [b.field for b in bad] == ["receipts[7]", "receipts[8]"]  # type: ignore[union-attr]


def test_receipts_of_two_shards_differ_and_name_their_shard() -> None:
    offsets = np.arange(40, dtype=np.int64)
    one, two = Receipt.texts(1, 3, 1, offsets), Receipt.texts(2, 3, 1, offsets)
    assert not set(one) & set(two)
    big = str(Receipt(700, 1, 1, 1))
    assert Receipt.shards([*one[:3], *two[:3], big, "nope"]) == [1, 1, 1, 2, 2, 2, 700, -1]
    assert Receipt.shards(two) == [2] * 40  # the batch path
