"""The client's calls about consumer groups' delivery policies (pure: the shells
send them). A policy is the group's over the whole topic but each shard keeps its
own copy, so every call goes to every shard's master (``ShellState.fanout_groups``)
and the answers are put together here:

- ``set_policy``, ``pause``, ``policy`` (SetGroupPolicy, PauseGroup/ResumeGroup,
  GetGroupPolicy): every shard must answer, and with the same policy
  (``agreed``); a shard that failed fails the call with its error's kind, naming
  the shard (and, for a write, the shards that did take it: writes are
  idempotent, calling again mends them); shards that disagree fail it
  ``FailedPrecondition`` naming them (set the policy again);
- ``listing`` (ListGroups): the groups of every shard merged (``merge_groups``),
  disagreements told per group (``GroupInfo.disagreeing``), not raised.

Invariants: a policy's times are in ms and its rate per second, as on the wire
(read by ``GroupPolicy.of``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc

from ..v1 import delayq_pb2 as pb
from .core import Call, policy_of
from .errors import ClientError, FailedPrecondition, ServerError, from_rpc
from .results import GroupInfo, GroupPolicy, PushTarget

__all__ = [
    "Answer",
    "Failed",
    "agreed",
    "listing",
    "merge_groups",
    "pause",
    "policy",
    "policy_wire",
    "set_policy",
]

Answer = tuple[str, str, GroupPolicy, bool]
"""One shard's answer about a group: (topic, group, policy, explicitly set)."""


class Failed:
    """A shard's error, kept in place of its answer (``Fanout.on_error``) so that the
    call can name the shard."""

    __slots__ = ("error",)

    def __init__(self, error: grpc.RpcError) -> None:
        self.error = error


def policy_wire(p: GroupPolicy) -> pb.GroupPolicy:
    """``p`` as the wire's ``GroupPolicy`` (``max_attempts`` None: left out, the
    server's default; ``push`` None: left out, a pull group)."""
    b = p.backoff
    return pb.GroupPolicy(
        max_attempts=p.max_attempts,  # None: not present
        backoff=pb.Backoff(
            kind=pb.BackoffKind.Value(f"BACKOFF_KIND_{b.kind.name}"),
            initial_ms=b.initial_ms,
            multiplier=b.multiplier,
            max_ms=b.max_ms,
            jitter=pb.Jitter.Value(f"JITTER_{b.jitter.name}"),
        ),
        rate_per_s=p.rate_per_s,
        burst=p.burst,
        max_in_flight=p.max_in_flight,
        paused=p.paused,
        push=_push_wire(p.push) if p.push is not None else None,
    )


def _push_wire(t: PushTarget) -> pb.PushTarget:
    return pb.PushTarget(
        url=t.url,
        method=t.method,
        headers=dict(t.headers),
        timeout_ms=t.timeout_ms,
        ca_bundle=t.ca_bundle,
        secret_ref=t.secret_ref,
    )


def _answer(r: Any) -> Answer:
    return (r.topic, r.group, policy_of(r.policy), r.explicit)


def set_policy(topic: str, group: str, p: GroupPolicy, timeout_s: float) -> Call[Answer]:
    req = pb.SetGroupPolicyRequest(topic=topic, group=group, policy=policy_wire(p))
    return Call("SetGroupPolicy", req, timeout_s, _answer)


def pause(topic: str, group: str, paused: bool, timeout_s: float) -> Call[Answer]:
    req = pb.PauseGroupRequest(topic=topic, group=group)
    return Call("PauseGroup" if paused else "ResumeGroup", req, timeout_s, _answer)


def policy(topic: str, group: str, timeout_s: float) -> Call[Answer]:
    req = pb.GetGroupPolicyRequest(topic=topic, group=group)
    return Call("GetGroupPolicy", req, timeout_s, _answer)


def listing(topic: str, timeout_s: float) -> Call[list[Answer]]:
    def parse(resp: Any) -> list[Answer]:
        return [_answer(g) for g in resp.groups]

    return Call("ListGroups", pb.ListGroupsRequest(topic=topic), timeout_s, parse)


def _shards(shards: Sequence[int]) -> str:
    return ("shard " if len(shards) == 1 else "shards ") + ", ".join(map(str, shards))


def _failure(exc: grpc.RpcError, message: str) -> ClientError:
    """``exc``'s kind of error (``from_rpc``) with ``message`` for its text."""
    err = from_rpc(exc)
    return type(err)(
        message,
        status=err.status,
        retry_after_ms=err.retry_after_ms,
        trailers=err.trailers,
        field=err.field,
    )


def _no_failure(what: str, answers: Sequence[Any], write: bool = False) -> None:
    """Raise the first shard's failure among ``answers``, naming the shard (and, for
    a ``write``, those that took it)."""
    failed = [(s, a.error) for s, a in enumerate(answers) if isinstance(a, Failed)]
    if failed:
        shard, exc = failed[0]
        details = exc.details() if hasattr(exc, "details") else str(exc)
        text = f"{what}: shard {shard} failed: {details}"
        good = [s for s, a in enumerate(answers) if a is not None and not isinstance(a, Failed)]
        if write and good:
            text += f" (done on {_shards(good)}; call again to finish)"
        raise _failure(exc, text) from exc


def agreed(
    what: str, answers: Sequence[Answer | Failed | None], write: bool = False
) -> tuple[GroupPolicy, bool]:
    """The policy every shard answered (and whether it was set on all), for ``what``
    (``group g of t``); raises naming the shards that failed (a ``write``: and
    those that took it) or disagree. A shard gone from the map meanwhile (None)
    is left out."""
    _no_failure(what, answers, write)
    good = [(s, a) for s, a in enumerate(answers) if a is not None and not isinstance(a, Failed)]
    if not good:
        raise ServerError(f"{what}: no shard answered")
    first = good[0][1][2]
    differ = [s for s, a in good if a[2] != first]
    if differ:
        raise FailedPrecondition(
            f"{what}: {_shards(differ)} disagree with shard {good[0][0]} "
            f"({good[0][1][2]} there); set the group's policy again"
        )
    return first, all(a[3] for _, a in good)


def merge_groups(answers: Sequence[list[Answer] | Failed | None]) -> list[GroupInfo]:
    """Every shard's groups as one list, by topic then group; a group's policy the
    lowest shard's that knows it, ``disagreeing`` the shards whose policy differs.
    Raises a shard's failure, naming it."""
    _no_failure("groups", answers)
    seen: dict[tuple[str, str], list[tuple[int, GroupPolicy, bool]]] = {}
    for shard, listed in enumerate(answers):
        if isinstance(listed, Failed):
            continue
        for topic, group, p, explicit in listed or ():
            seen.setdefault((topic, group), []).append((shard, p, explicit))
    out = []
    for (topic, group), held in sorted(seen.items()):
        first = held[0][1]
        out.append(
            GroupInfo(
                topic,
                group,
                first,
                any(e for _, _, e in held),
                tuple(s for s, _, _ in held),
                tuple(s for s, p, _ in held if p != first),
            )
        )
    return out
