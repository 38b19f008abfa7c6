"""The public API is what ``__all__`` says, no more and no less: every public
name a package's ``__init__`` binds (submodules aside) is listed, every listed
name exists (``delayq``'s embedded API loads on first use: PEP 562), and
``dir()`` shows them all."""

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
    for name in package.__all__:
        getattr(package, name)  # a lazy name is bound once read
    bound = {
        name
        for name, value in vars(package).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"  # from __future__ import annotations
    }
    assert bound == set(package.__all__)
    assert set(package.__all__) <= set(dir(package))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = delayq.Nope  # type: ignore[attr-defined]


def test_delayq_names_the_clients_values_and_one_exception_tree() -> None:
    # no name of delayq means two things: the values are the client's, the
    # errors the tree's, which the client's errors subclass
    assert delayq.MessageState is delayq.client.MessageState
    assert delayq.AckOutcome is delayq.client.AckOutcome
    assert delayq.Lookup is delayq.client.Lookup
    assert delayq.ReceivedBatch is delayq.client.ReceivedBatch
    for name in ("InvalidArgument", "NotFound", "FailedPrecondition", "WrongShard",
                 "Unavailable", "Congested"):  # fmt: skip
        ours, clients = getattr(delayq, name), getattr(delayq.client, name)
        assert issubclass(clients, ours) and issubclass(clients, delayq.ClientError), name
        assert issubclass(ours, delayq.DelayqError)
    assert issubclass(delayq.client.InvalidArgument, ValueError)
    # the engine's own values are named under delayq.engine only
    for name in ("ScheduleRequest", "LookupResult", "MessageId"):
        assert name not in delayq.__all__
    assert delayq.engine.MessageState is not delayq.MessageState
