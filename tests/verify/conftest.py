"""Data directories made by a real engine (fake clock, no threads), for ``delayq
verify`` to look at."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.verify.datadirs import Made, make_data_dir


@pytest.fixture
def made(tmp_path: Path) -> Callable[..., Made]:
    """``made(kill=False)``: a data dir with 40 messages behind a checkpoint and 10
    after it (all due 1-6 s ahead), closed, or abandoned as a kill would leave it."""

    def make(*, kill: bool = False) -> Made:
        return make_data_dir(tmp_path / "data", kill=kill)

    return make
