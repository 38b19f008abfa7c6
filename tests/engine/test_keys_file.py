"""The saved key index (``keys.idx``) is derived: a close whose save fails (the
file cannot be written) still closes the engine cleanly, leaves no file, and the
next open builds the index from the log (real files, a fake clock)."""

from __future__ import annotations

import os
from pathlib import Path

from delayq.store.keyfile import FILE
from delayq.types import IfExists, KeyOutcome
from tests.support.engines import Make, ids, req


def test_a_failed_save_of_the_key_index_does_not_break_the_close(
    make_engine: Make,
) -> None:
    e = make_engine()
    [a] = ids(e.schedule([req(60_000, key="k", if_exists=IfExists.REJECT)]))
    data = Path(e.settings.data_dir)
    # the save's temp file name (``write_atomic_with``) is taken by a directory:
    # its open fails with an OSError, as a full disk's write would
    blocker = data / f".{FILE}.{os.getpid()}.tmp"
    blocker.mkdir()
    e.close()  # no error: the file is derived
    assert not (data / FILE).exists()
    blocker.rmdir()
    e = make_engine()
    assert e.recovery["keys"] == "built"
    [again] = e.schedule([req(60_000, key="k", if_exists=IfExists.KEEP)])
    assert (again.id, again.key_outcome) == (a, KeyOutcome.KEPT)
