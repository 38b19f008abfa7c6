"""The calls that read and set consumer groups' delivery policies at a shard's
master for the resharding driver's hosts (``reshardinghost``: the local
cluster's ``scaling``, the operator's ``resharder``): ``ListGroups`` (the
policies set there) and ``SetGroupPolicy``. What to copy where is
``policyspread``'s. Over gRPC only; one fresh channel a call (a driver asks once
a change).
"""

from __future__ import annotations

import grpc

from ..tls import TlsConfig, dial
from ..v1 import delayq_pb2, delayq_pb2_grpc
from .policyspread import HeldPolicy

__all__ = ["held_policies", "set_policy"]

_OPTIONS = [("grpc.use_local_subchannel_pool", 1)]


def held_policies(
    address: str, tls: TlsConfig | None = None, timeout_s: float = 5.0, server_name: str = ""
) -> list[HeldPolicy] | None:
    """The policies set explicitly on the node at ``address`` (its ``ListGroups``);
    None when it does not answer (or refuses: a recovering node, a replica)."""
    with dial(address, tls, _OPTIONS, server_name=server_name) as ch:
        try:
            r = delayq_pb2_grpc.DelayQueueStub(ch).ListGroups(
                delayq_pb2.ListGroupsRequest(), timeout=timeout_s
            )
        except grpc.RpcError:
            return None
    return [
        HeldPolicy(topic=g.topic, group=g.group, policy=g.policy) for g in r.groups if g.explicit
    ]


def set_policy(
    address: str,
    held: HeldPolicy,
    tls: TlsConfig | None = None,
    timeout_s: float = 10.0,
    server_name: str = "",
) -> str:
    """``held`` set on the node at ``address`` (``SetGroupPolicy``: durable and
    replicated once answered); "" when done, else why not."""
    request = delayq_pb2.SetGroupPolicyRequest(
        topic=held.topic, group=held.group, policy=held.policy
    )
    with dial(address, tls, _OPTIONS, server_name=server_name) as ch:
        try:
            delayq_pb2_grpc.DelayQueueStub(ch).SetGroupPolicy(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
    return ""
