"""Receipts (``delivery/receipts``): batch and single text forms agree."""

from __future__ import annotations

from delayq.delivery.receipts import Receipt
from delayq.errors import InvalidArgument


def test_receipts_batch_and_single_forms_agree() -> None:
    import numpy as np

    offsets = np.array([0, 5, 127, 128, 70_000, 2**33], dtype=np.int64)
    texts = Receipt.texts(3, 2, offsets)
    assert texts == [str(Receipt(3, int(o), 2)) for o in offsets]
    many = np.concatenate([offsets, offsets * 3 + 1, np.arange(20) << 20])  # vectorised
    assert Receipt.texts(3, 2, many) == [str(Receipt(3, int(o), 2)) for o in many]
    big = str(Receipt(300, 9, 200))  # leading fields over one byte: the slow path
    parsed = Receipt.parse_many([*texts, big, "nope", texts[0][:-1] + "A"])
    assert parsed[: len(offsets)] == [Receipt(3, int(o), 2) for o in offsets]
    assert parsed[len(offsets)] == Receipt(300, 9, 200)
    bad = parsed[len(offsets) + 1 :]
    assert all(isinstance(b, InvalidArgument) for b in bad)
    assert [b.field for b in bad] == ["receipts[7]", "receipts[8]"]  # type: ignore[union-attr]
