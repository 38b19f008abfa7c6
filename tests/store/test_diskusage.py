"""``store.diskusage``: bytes allocated per kind of file in a data directory."""

from __future__ import annotations

import os
from pathlib import Path

from delayq.store import diskusage


def test_usage_counts_allocated_bytes_by_kind_and_the_rest_as_other(tmp_path: Path) -> None:
    (tmp_path / "commitlog" / "kept").mkdir(parents=True)
    (tmp_path / "commitlog" / "0.seg").write_bytes(b"x" * 10_000)
    (tmp_path / "commitlog" / "kept" / "1.seg").write_bytes(b"y" * 5_000)
    (tmp_path / "checkpoint.json").write_bytes(b"{}")
    with open(tmp_path / "timerwheel", "wb") as f:  # sparse: its size is not its use
        f.truncate(1 << 30)
    used = diskusage.usage(tmp_path)
    assert set(used) == set(diskusage.KINDS)
    on_disk = sum(
        (tmp_path / p).stat().st_blocks * 512 for p in ("commitlog/0.seg", "commitlog/kept/1.seg")
    )
    assert used["commitlog"] == on_disk >= 15_000
    assert used["other"] > 0
    assert used["timerwheel"] < 1 << 20
    assert used["ready"] == used["blocks"] == 0


def test_a_missing_directory_uses_nothing_and_the_volume_has_room(tmp_path: Path) -> None:
    assert set(diskusage.usage(tmp_path / "gone").values()) == {0}
    room = diskusage.volume(tmp_path)
    st = os.statvfs(tmp_path)
    assert 0 < room.free_bytes <= room.size_bytes == st.f_blocks * st.f_frsize
