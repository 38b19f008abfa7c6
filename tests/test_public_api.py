"""The public API is what ``__all__`` says, no more and no less: every public
name a package's ``__init__`` binds (submodules aside) is listed, and every
listed name exists."""

from __future__ import annotations

import types

import pytest

import delayq
import delayq.client
import delayq.engine


@pytest.mark.parametrize(
    "package", [delayq, delayq.engine, delayq.client], ids=lambda p: p.__name__
)
def test_public_api_is_exact(package: types.ModuleType) -> None:
    bound = {
        name
        for name, value in vars(package).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"  # from __future__ import annotations
    }
    assert bound == set(package.__all__)
