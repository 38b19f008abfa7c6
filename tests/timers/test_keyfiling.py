"""Filing keyed records (``timers.keyfiling``): keys and dedup ids into their two
indexes with each record's hold from its headers, rows without a name left out;
and the checkpoint's sweep, a bounded part of each index a pass."""

from __future__ import annotations

import numpy as np

from delayq.formats.keyheaders import dedup_headers
from delayq.timers.keyfiling import KEY_SWEEP_FLOOR, KeySweep, file_keyed
from delayq.timers.memory.keyindex import KeyIndex


def test_keys_and_dedup_ids_are_filed_with_their_holds() -> None:
    keys, dedups = KeyIndex(), KeyIndex()
    headers = [b"", dedup_headers(520, "m-1"), dedup_headers(0, "m-2"), b""]
    file_keyed(
        keys,
        dedups,
        7,
        ["a", "", "b", "é"],
        headers,
        np.array([1, 2, 3, 4], dtype=np.uint64),
        np.array([100, 200, 300, 400]),
    )
    assert [(e.seq, e.pos, e.hold_until_ms) for e in keys.find(7, b"b")] == [(3, 300, 0)]
    assert [e.pos for e in keys.find(7, "é".encode())] == [400]
    assert len(keys) == 3 and keys.find(8, b"a") == []
    assert [(e.pos, e.hold_until_ms) for e in dedups.find(7, b"m-1")] == [(200, 520)]
    assert len(dedups) == 2
    file_keyed(keys, dedups, 7, None, None, np.array([5]), np.array([500]))  # no names
    assert len(keys) == 3


def test_the_sweep_is_bounded_a_pass_and_reaches_every_entry() -> None:
    index = KeyIndex()
    n = 3 * KEY_SWEEP_FLOOR
    file_keyed(
        index,
        KeyIndex(),
        1,
        [b"k%d" % i for i in range(n)],
        None,
        np.arange(1, n + 1, dtype=np.uint64),
        np.arange(n) * 100,
    )
    sweep = KeySweep(rows=KEY_SWEEP_FLOOR)

    def none_live(seqs: np.ndarray) -> np.ndarray:
        return np.zeros(len(seqs), dtype=bool)

    first = sweep.run([index], none_live, now=1)
    assert 0 < first <= KEY_SWEEP_FLOOR
    while len(index) > KEY_SWEEP_FLOOR:
        assert sweep.run([index], none_live, now=1) <= KEY_SWEEP_FLOOR
    assert sweep.run([index], none_live, now=1) == 0  # at the floor: left as it is
