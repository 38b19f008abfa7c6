"""A push group's target moves with a change of the shard count: the resharding
driver's copy (``control.policycopy``) reads a group's policy at one master
(ListGroups answers the target as set: credentials, query, headers, CA bundle)
and sets it at another, which then answers the same target; nothing to copy
stays a pull group."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import delayq
from delayq.control.policycopy import held_policies, set_policy
from tests.support.servers import ServerProcess

Start = Callable[..., ServerProcess]

POLICY = delayq.GroupPolicy(
    max_attempts=4,
    push=delayq.PushTarget(
        url="https://ops:hunter2@hooks.example.com/in?token=abc",
        method="PATCH",
        headers={"X-Env": "prod"},
        timeout_ms=2500,
        ca_bundle="-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    ),
)


def test_a_copy_carries_the_push_target_as_set(start_server: Start, tmp_path: Path) -> None:
    source = start_server(data_dir=tmp_path / "source")
    target = start_server(data_dir=tmp_path / "target")
    with delayq.Client(source.address) as c:
        c.set_group_policy("orders", "hook", POLICY)
        c.set_group_policy("orders", "pull", delayq.GroupPolicy(max_attempts=2))
    held = held_policies(source.address)
    assert held is not None
    by_group = {h.group: h for h in held}
    assert by_group["hook"].policy.push.url == POLICY.push.url  # type: ignore[union-attr]
    assert not by_group["pull"].policy.HasField("push")
    for h in held:
        assert set_policy(target.address, h) == ""
    with delayq.Client(target.address) as c:
        assert c.group_policy("orders", "hook") == POLICY
        assert c.group_policy("orders", "pull").push is None
