"""Message ids and their text tokens (``delayq.ids``, ``delayq.idcodec``, used by every
layer): batch and single forms agree, malformed ones are refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from delayq import idcodec
from delayq.errors import InvalidArgument
from delayq.ids import MessageId
from delayq.receipts import Receipt


@pytest.mark.parametrize("few", [1 << 30, 0], ids=["one by one", "vectorised"])
def test_many_ids_parse_as_each_alone(few: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(idcodec, "FEW", few)
    good = [str(MessageId(0, 1, 10**p)) for p in range(1, 12)]
    texts: list[Any] = [
        *good[:3],
        "",
        good[3][:-1],
        good[4].swapcase(),
        str(Receipt(0, 1, 2, 3)),  # another kind
        str(MessageId(300, 70_000, 5)),  # leading fields of more than a byte
        idcodec.pack_token(0x4D, 0, 1, 2**64 + 5),  # a position beyond int64
        b"bytes",
        *good[5:],
    ]
    cols, errors = MessageId.parse_columns(texts)
    for i, text in enumerate(texts):
        try:
            alone = MessageId.parse(text) if isinstance(text, str) else None
        except InvalidArgument:
            alone = None
        if alone is None:
            assert i in errors or cols[i].tolist() == [0, 0, -1], i
        else:
            assert i not in errors and cols[i].tolist() == [
                alone.shard,
                alone.epoch,
                alone.position,
            ]


def test_a_batch_of_one_prefix_is_judged_by_its_lead_bytes() -> None:
    """A batch whose tokens all share their lead bytes (the usual: one shard and
    epoch) is judged by one row: ids of it parse, a batch of another kind's
    tokens (valid check bytes, same lead in every row) is refused whole."""
    ids = MessageId.texts(2, 5, np.arange(20) * 268 + 4096, ascending=True)
    cols, errors = MessageId.parse_columns(ids)
    assert not errors and cols[:, 2].tolist() == (np.arange(20) * 268 + 4096).tolist()
    receipts = [str(Receipt(0, 2, offset, 5)) for offset in range(100, 120)]
    assert len(set(map(len, receipts))) == 1
    _, errors = MessageId.parse_columns(receipts)
    assert sorted(errors) == list(range(20))
    assert all("kind" in str(e) for e in errors.values())


def test_message_id_round_trip_and_malformed() -> None:
    mid = MessageId(3, 7, 123_456_789)
    text = str(mid)
    assert len(text) <= 12
    assert MessageId.parse(text) == mid
    with pytest.raises(InvalidArgument):
        MessageId.parse(text.swapcase())  # ids are case-sensitive
    for bad in ["", "zzzz", text[:-1], text + "0", "hello world", "i" * 70, "a=b"]:
        with pytest.raises(InvalidArgument) as err:
            MessageId.parse(bad, "ids[2]")
        assert err.value.field == "ids[2]"
    flipped = text[:-2] + ("A" if text[-2] != "A" else "B") + text[-1]
    with pytest.raises(InvalidArgument, match=r"check byte|length|truncated"):
        MessageId.parse(flipped)
    with pytest.raises(InvalidArgument, match="kind"):
        MessageId.parse(str(Receipt(0, 1, 2, 3)))


def test_ids_of_ascending_positions_are_each_id_alone() -> None:
    """The ``ascending`` hint bounds the widths by the ends: ids of positions that
    ascend across byte widths are still each id's own text."""
    import numpy as np

    for positions in (np.arange(100) * 268 + 4096, np.arange(100) * 3000 + 60_000):
        got = MessageId.texts(2, 5, positions, ascending=True)
        assert got == [str(MessageId(2, 5, int(p))) for p in positions]
        assert got == MessageId.texts(2, 5, positions)


@pytest.mark.parametrize("seed", range(6))
def test_batch_token_texts_are_each_token_alone_for_any_prefix_and_width(seed: int) -> None:
    """For prefixes of one- and multi-byte fields and values of every width, each
    text of a batch is the one ``pack`` makes alone, also where a value of 8 bytes
    is widened to 9 or 10 so the text has no padding (they were cut wrong)."""
    rng = np.random.default_rng(seed)
    for _ in range(20):
        fields = [int(f) for f in rng.integers(0, 1 << int(rng.integers(1, 30)), size=2)]
        prefix = idcodec.TokenPrefix(0x4D, *fields)
        bits = int(rng.integers(1, 64))
        values = np.unique(rng.integers(0, 1 << bits, size=40, dtype=np.uint64))
        assert prefix.pack_many(values) == [prefix.pack(int(v)) for v in values]
        assert prefix.pack_many(values, ascending=True) == [prefix.pack(int(v)) for v in values]
        # a batch's positions: a short run, within one 64 KiB block or across two
        # (the ascending path takes each check from the low two bytes)
        start = int(rng.integers(0, 1 << bits)) | 0xFF00 * int(rng.integers(0, 2))
        run = (start + np.arange(40) * int(rng.integers(1, 1600))).astype(np.uint64)
        assert prefix.pack_many(run, ascending=True) == [prefix.pack(int(v)) for v in run]


@pytest.mark.parametrize("few", [1 << 30, 0], ids=["one by one", "vectorised"])
def test_tokens_with_a_trailer_pack_and_parse_as_each_alone(
    few: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kind with a trailer (a receipt's MAC): a batch's texts are each token's
    own for values of every width, and they parse back, trailer last, on the
    batch path and one by one; a token without the trailer is refused."""
    monkeypatch.setattr(idcodec, "FEW", few)
    rng = np.random.default_rng(7)
    for fields in ([0, 1, 1], [300, 70_000, 2]):
        prefix = idcodec.TokenPrefix(0x52, *fields, trailer=True)
        for bits in (1, 9, 17, 40, 63):
            values = np.unique(rng.integers(0, 1 << bits, size=30, dtype=np.uint64))
            trailers = rng.integers(0, 2**63, size=len(values), dtype=np.uint64) << np.uint64(1)
            texts = prefix.pack_many(values, trailers=trailers)
            assert texts == [
                prefix.pack(int(v), int(t)) for v, t in zip(values, trailers, strict=True)
            ]
            cols, done = idcodec.unpack_columns(texts, 0x52, 4, trailer=True)
            rows, errors = idcodec.unpack_rows(texts, 0x52, 4, trailer=True)
            want = [[*fields, int(v), int(t)] for v, t in zip(values, trailers, strict=True)]
            assert not errors and rows == want
            assert done.all() or max(fields) >= 0x80  # (those: unpack_rows, one by one)
            assert cols[done].tolist() == [w for w, d in zip(want, done, strict=True) if d]
    plain = idcodec.pack_token(0x52, 0, 1, 1, 5)
    _, errors = idcodec.unpack_rows([plain] * 10, 0x52, 4, trailer=True)
    assert len(errors) == 10
    with pytest.raises(ValueError, match="trailers go with"):
        idcodec.TokenPrefix(0x52, 1, trailer=True).pack_many(np.arange(3))
