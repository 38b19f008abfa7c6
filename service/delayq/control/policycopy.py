"""Consumer groups' delivery policies carried to the shards of a change of the
shard count, so that a shard taking moved messages enforces its topics' groups'
policies before it hands any out (``reshardingdriver``, before the job starts).

A policy is topic-wide, but each shard keeps its own copy (POLICY records of its
log): the typed client sets it on every shard's master, and a shard that joins
later holds none. The sources are the shards the map lists as not joining;
every listed shard gets each policy set explicitly on a source that it does not
hold explicitly itself (``missing``): a policy a shard holds is never
overwritten, so a policy set through the client during the change (it reaches
every listed shard, joining ones too) is kept. Sources that disagree (a set that
reached some shards only) give the lowest-numbered source's policy, and are
named (``disagreeing``). ``paused`` is part of a policy: a paused group stays
paused on the shards it joins.

Over gRPC only (``ListGroups``, ``SetGroupPolicy``; one fresh channel a call: a
driver asks once a change); ``missing`` and ``disagreeing`` are pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import grpc

from ..tls import TlsConfig, dial
from ..v1 import delayq_pb2, delayq_pb2_grpc

__all__ = ["HeldPolicy", "disagreeing", "held_policies", "missing", "set_policy"]

_OPTIONS = [("grpc.use_local_subchannel_pool", 1)]


@dataclass(frozen=True, kw_only=True)
class HeldPolicy:
    """A group's policy as one shard holds it (set explicitly)."""

    topic: str
    group: str
    policy: delayq_pb2.GroupPolicy

    @property
    def name(self) -> tuple[str, str]:
        return self.topic, self.group


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


def _first(held: Mapping[int, Sequence[HeldPolicy]], sources: Iterable[int]) -> list[HeldPolicy]:
    """Each group's policy on the lowest-numbered source holding it."""
    out: dict[tuple[str, str], HeldPolicy] = {}
    for shard in sorted(sources):
        for h in held.get(shard, ()):
            out.setdefault(h.name, h)
    return [out[k] for k in sorted(out)]


def missing(
    held: Mapping[int, Sequence[HeldPolicy]], sources: Iterable[int], targets: Iterable[int]
) -> dict[int, list[HeldPolicy]]:
    """Per target shard, the sources' policies it does not hold explicitly (by
    topic and group; none listed for a shard lacking nothing)."""
    wanted = _first(held, sources)
    out: dict[int, list[HeldPolicy]] = {}
    for shard in sorted(targets):
        has = {h.name for h in held.get(shard, ())}
        lacking = [h for h in wanted if h.name not in has]
        if lacking:
            out[shard] = lacking
    return out


def disagreeing(held: Mapping[int, Sequence[HeldPolicy]], sources: Iterable[int]) -> list[str]:
    """The groups whose policy differs between sources: ``topic/group``."""
    seen: dict[tuple[str, str], delayq_pb2.GroupPolicy] = {}
    odd: set[tuple[str, str]] = set()
    for shard in sorted(sources):
        for h in held.get(shard, ()):
            first = seen.setdefault(h.name, h.policy)
            if first != h.policy:
                odd.add(h.name)
    return [f"{t}/{g}" for t, g in sorted(odd)]
