"""The epoch history (``delayq.epochs``) and its file (``store.epochfile``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from delayq.epochs import EpochHistory
from delayq.errors import CorruptData
from delayq.store.epochfile import load_epochs, save_epochs


def test_begin_epoch_at_and_end_of() -> None:
    h = EpochHistory().begin(1, 32).begin(2, 500).begin(5, 500).begin(6, 900)
    assert h.last == 6
    assert [h.epoch_at(p) for p in (0, 32, 499, 500, 899, 900, 10**9)] == [0, 1, 1, 5, 5, 6, 6]
    assert h.end_of(1, 1000) == 500 and h.end_of(2, 1000) == 500 and h.end_of(6, 1000) == 1000
    with pytest.raises(ValueError, match="not above the current epoch 6"):
        h.begin(6, 2000)
    with pytest.raises(ValueError, match="must rise"):
        h.begin(7, 100)  # a start before the last one's
    assert h.truncated(700).entries == ((1, 32), (2, 500), (5, 500))
    assert h.truncated(900).last == 6  # it starts right at the cut: nothing of it is lost


def test_divergence_finds_how_far_two_logs_agree() -> None:
    """An old master wrote epoch 2 up to 150; the new master took over at 120 in
    epoch 3: the old one keeps 0..120 and must cut the rest."""
    old = EpochHistory.of([(1, 0), (2, 100)])
    new = EpochHistory.of([(1, 0), (2, 100), (3, 120)])
    assert old.divergence(150, new, 400) == 120
    assert new.divergence(400, old, 150) == 120  # symmetric
    behind = EpochHistory.of([(1, 0), (2, 100)])  # a replica that is just behind
    assert behind.divergence(110, new, 400) == 110  # keeps all it has, then follows
    other = EpochHistory.of([(1, 0), (2, 90)])  # epoch 2 began elsewhere: back to epoch 1's end
    assert other.divergence(130, new, 400) == 90
    stranger = EpochHistory.of([(4, 0)])
    assert stranger.divergence(50, new, 400) is None  # shares nothing: must not follow
    assert EpochHistory().divergence(0, new, 400) == 0  # a new node starts from nothing


def test_the_file_round_trips_and_refuses_damage(tmp_path: Path) -> None:
    path = tmp_path / "epochs.json"
    assert load_epochs(path) == EpochHistory()
    h = EpochHistory.of([(1, 32), (3, 4096)])
    save_epochs(path, h)
    assert load_epochs(path) == h
    path.write_text(path.read_text().replace("4096", "4097"))
    with pytest.raises(CorruptData, match="epoch history: CRC mismatch"):
        load_epochs(path)
