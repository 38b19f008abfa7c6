"""The ``delayq`` command's handling of its arguments, in process."""

from __future__ import annotations

import pytest

from delayq.cli.main import main


def test_the_cli_names_its_flag_for_a_server_it_cannot_dial(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["stats", "--server", "127.0.0.1:99999"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("delayq stats: --server: '127.0.0.1:99999' is not host:port"), err
