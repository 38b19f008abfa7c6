"""Receipts (``delayq.receipts``): batch and single text forms agree; the shard
rides in every receipt, so two shards' receipts differ; the MAC is the documented
AES CBC-MAC it documents (the BLAKE2s one before it still checks) and changes with
every field it binds."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from delayq.errors import InvalidArgument
from delayq.receipts import KEY_SIZE, Receipt, ReceiptKey

KEY = bytes(range(KEY_SIZE))


def test_receipts_batch_and_single_forms_agree() -> None:
    offsets = np.array([0, 5, 127, 128, 70_000, 2**33], dtype=np.int64)
    macs = np.array([0, 1, 2**64 - 1, 7, 2**63, 12345], dtype=np.uint64)
    texts = Receipt.texts(1, 3, 2, offsets, macs)
    want = [Receipt(1, 3, int(o), 2, int(m)) for o, m in zip(offsets, macs, strict=True)]
    assert texts == [str(r) for r in want]
    many = np.concatenate([offsets, offsets * 3 + 1, np.arange(20) << 20])  # vectorised
    many_macs = np.arange(len(many), dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    assert Receipt.texts(1, 3, 2, many, many_macs) == [
        str(Receipt(1, 3, int(o), 2, int(m))) for o, m in zip(many, many_macs, strict=True)
    ]
    big = str(Receipt(700, 300, 9, 200, 99))  # leading fields over one byte: the slow path
    parsed = Receipt.parse_many([*texts, big, "nope", texts[0][:-1] + "A"])
    assert parsed[: len(offsets)] == want
    assert parsed[len(offsets)] == Receipt(700, 300, 9, 200, 99)
    bad = parsed[len(offsets) + 1 :]
    assert all(isinstance(b, InvalidArgument) for b in bad)
    assert [b.field for b in bad] == ["receipts[7]", "receipts[8]"]  # type: ignore[union-attr]


def test_receipts_of_two_shards_differ_and_name_their_shard() -> None:
    offsets = np.arange(40, dtype=np.int64)
    macs = np.zeros(40, dtype=np.uint64)
    one, two = Receipt.texts(1, 3, 1, offsets, macs), Receipt.texts(2, 3, 1, offsets, macs)
    assert not set(one) & set(two)
    big = str(Receipt(700, 1, 1, 1))
    assert Receipt.shards([*one[:3], *two[:3], big, "nope"]) == [1, 1, 1, 2, 2, 2, 700, -1]
    assert Receipt.shards(two) == [2] * 40  # the batch path


def documented_mac(key: bytes, shard: int, topic: int, group: str, a: int, o: int, q: int) -> int:
    """The module docstring's MAC, computed as it says, one receipt at a time."""
    head = (
        struct.pack("<H", len(group.encode())) + group.encode() + struct.pack("<II", shard, topic)
    )
    sub = hashlib.blake2s(head, key=key, digest_size=16, person=b"dqrcpt2").digest()
    aes = Cipher(algorithms.AES(sub), modes.CBC(bytes(16))).encryptor()  # CBC-MAC: IV 0
    last = (aes.update(struct.pack("<QQQQ", a, o, q, 0)) + aes.finalize())[16:]
    return int.from_bytes(last[:8], "big")


def test_the_mac_is_the_documented_aes_cbc_mac() -> None:
    """Golden: the module docstring's construction, against the batch computation."""
    want = documented_mac(KEY, 2, 5, "billing", 3, 1000, 77)
    got = ReceiptKey(KEY, 2).macs(5, "billing", [3], [1000], [77])
    assert got.tolist() == [want]
    assert f"{want:016x}" == "9b9c16d360c3cc0b"  # pinned: receipts must keep checking
    text = ReceiptKey(KEY, 2).texts(5, "billing", [3], [1000], np.array([77]))[0]
    assert Receipt.parse(text) == Receipt(2, 5, 1000, 3, want)
    rows = [(a, o, q) for a in (1, 2, 2**40) for o in (0, 7, 2**63) for q in (0, 9, 2**64 - 1)]
    attempts, offsets, seqs = (np.array(c, dtype=np.uint64) for c in zip(*rows, strict=True))
    batch = ReceiptKey(KEY, 2).macs(5, "ü", attempts, offsets, seqs).tolist()
    assert batch == [documented_mac(KEY, 2, 5, "ü", a, o, q) for a, o, q in rows]


def test_a_receipt_of_the_mac_before_still_checks_and_a_forged_one_does_not() -> None:
    """Receipts handed out before the AES MAC (keyed BLAKE2s, ``dqrcpt1``) check, so
    an upgrade redelivers nothing; a MAC of neither kind does not."""
    data = struct.pack("<H", 7) + b"billing" + struct.pack("<IIQQQ", 2, 5, 3, 1000, 77)
    legacy = hashlib.blake2s(data, key=KEY, digest_size=8, person=b"dqrcpt1").digest()
    assert legacy.hex() == "3f7e3f0170a44bcb"
    key = ReceiptKey(KEY, 2)
    one = np.array([3], dtype=np.uint64), np.array([1000], dtype=np.uint64), np.array([77])
    new = key.macs(5, "billing", *one)
    old = np.array([int.from_bytes(legacy, "big")], dtype=np.uint64)
    assert key.check(5, "billing", *one, new).tolist() == [True]
    assert key.check(5, "billing", *one, old).tolist() == [True]
    assert key.check(5, "billing", *one, new ^ np.uint64(1)).tolist() == [False]
    assert key.check(5, "other", *one, old).tolist() == [False]


def test_the_mac_binds_key_shard_topic_group_attempt_offset_and_message() -> None:
    base = ReceiptKey(KEY, 1).macs(3, "g", [1], [10], [500])[0]
    others = [
        ReceiptKey(bytes(KEY_SIZE), 1).macs(3, "g", [1], [10], [500]),  # another key
        ReceiptKey(KEY, 2).macs(3, "g", [1], [10], [500]),  # another shard
        ReceiptKey(KEY, 1).macs(4, "g", [1], [10], [500]),  # another topic
        ReceiptKey(KEY, 1).macs(3, "h", [1], [10], [500]),  # another group
        ReceiptKey(KEY, 1).macs(3, "g", [2], [10], [500]),  # another attempt
        ReceiptKey(KEY, 1).macs(3, "g", [1], [11], [500]),  # another offset
        ReceiptKey(KEY, 1).macs(3, "g", [1], [10], [501]),  # another message there
    ]
    assert all(o[0] != base for o in others)
    with pytest.raises(ValueError, match="32 bytes"):
        ReceiptKey(b"short", 1)


def test_a_hand_out_of_several_attempts_encodes_each_with_its_own() -> None:
    key = ReceiptKey(KEY, 1)
    attempts, offsets, seqs = [1, 2, 1, 3, 2] * 4, list(range(20)), np.arange(100, 120)
    texts = key.texts(3, "g", attempts, offsets, seqs)
    macs = key.macs(3, "g", attempts, offsets, seqs)
    assert [Receipt.parse(t) for t in texts] == [
        Receipt(1, 3, o, a, int(m)) for o, a, m in zip(offsets, attempts, macs, strict=True)
    ]
