"""Pure pieces of the client: retry policy, targets it can dial (routing: test_routing)."""

from __future__ import annotations

import grpc
import pytest

from delayq.addresses import check_target
from delayq.client import AsyncClient, Client
from delayq.client.core import RetryPolicy, retry_after_ms


def test_retry_policy_honours_retry_after_and_gives_up() -> None:
    p = RetryPolicy(attempts=3, base_s=0.01, max_s=0.05)
    assert p.delay_s(1, grpc.StatusCode.INVALID_ARGUMENT, None) is None
    assert p.delay_s(1, grpc.StatusCode.RESOURCE_EXHAUSTED, 200) == pytest.approx(0.2)
    # gRPC's own (a message over a size limit, a trailer too large) says no time: final
    assert p.delay_s(1, grpc.StatusCode.RESOURCE_EXHAUSTED, None) is None
    assert 0 <= (p.delay_s(2, grpc.StatusCode.UNAVAILABLE, None) or 0) <= 0.05
    assert p.delay_s(3, grpc.StatusCode.UNAVAILABLE, None) is None
    assert retry_after_ms([("retry-after-ms", "150")]) == 150
    assert retry_after_ms(None) is None


@pytest.mark.parametrize(
    "target",
    [
        "127.0.0.1:7420",
        "[::1]:7420",
        "dq-0.dq.svc:1",
        ":7420",
        "dns:///dq:7420",
        "unix:/tmp/dq.sock",
    ],
)
def test_client_targets_that_can_be_dialled_pass(target: str) -> None:
    check_target(target)
    Client(target).close()  # the client takes them too (gRPC connects lazily)


@pytest.mark.parametrize(
    "target", ["127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1", "host:http", "::1:7420", "localhost:"]
)
def test_client_targets_gRPC_would_misread_are_refused_naming_the_field(target: str) -> None:
    with pytest.raises(ValueError, match=r"^address: "):
        check_target(target)
    with pytest.raises(ValueError, match=r"^address: "):
        Client(target)  # 127.0.0.1:99999 would otherwise dial port 34463
    with pytest.raises(ValueError, match=r"^address: "):
        AsyncClient(target)
