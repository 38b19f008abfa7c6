"""What the operator sets on a topic's shards for its declared consumer groups,
and the ``status.groups`` that follows (pure: no cluster, no I/O).

A round reads every group the shards know (``Observed``: the typed client's
``groups()``, agreed over the shards' masters), then ``plan`` says which
policies to set: a declared group whose shards hold another policy, or none
set explicitly, gets its ``GroupSpec.desired``; a group the operator set before
(named in ``status.groups``) and no longer declared goes back to
``groups.DEFAULT_POLICY`` (not paused), unless the shards hold that already or
know nothing of it. Nothing else is touched: groups no one declared keep what
``delayq group set`` gave them. A group paused on any shard is taken as paused
(``Observed.paused``), even while the shards disagree: only ``paused: false``
resumes it. ``group_status`` is ``status.groups`` after the sets: one entry per
declared group (``applied``, ``paused``, ``inFlight``, ``push`` for a push
group: its ``safe_url`` and Secret's name, never a credential; ``message`` when
a set failed), and one per removed group whose reset failed (so the next round tries
again: the status is the operator's memory of what it manages).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .groups import DEFAULT_POLICY, GroupSpec, Policy
from .pushspec import push_status

__all__ = ["Observed", "group_status", "managed_groups", "plan"]


@dataclass(frozen=True, kw_only=True)
class Observed:
    """A group as the topic's shards report it."""

    name: str
    policy: Policy | None
    """The policy the shards hold; None when they disagree (a set half done)."""
    explicit: bool = True
    """Set explicitly (else the server's defaults)."""
    in_flight: int = 0
    """Handed out and not yet settled, over the shards."""
    paused_on_a_shard: bool = False
    """Some shard reports the group paused (its stats), whether or not they agree."""

    @property
    def paused(self) -> bool:
        """Paused on any shard: a group the shards disagree about is not resumed
        unless the spec says ``paused: false``."""
        return self.paused_on_a_shard or (self.policy is not None and self.policy.paused)


def managed_groups(status: Mapping[str, Any] | None) -> frozenset[str]:
    """The groups the operator manages: those its last round wrote into ``status.groups``."""
    docs = (status or {}).get("groups") or []
    return frozenset(str(d["name"]) for d in docs if isinstance(d, Mapping) and d.get("name"))


def plan(
    declared: Sequence[GroupSpec],
    managed: Collection[str],
    observed: Mapping[str, Observed],
) -> list[tuple[str, Policy]]:
    """The (group, policy) pairs to set on every shard this round, declared groups
    first, in their order."""
    out: list[tuple[str, Policy]] = []
    for group in declared:
        seen = observed.get(group.name)
        want = group.desired(seen.paused if seen is not None else False)
        if seen is None or not seen.explicit or seen.policy != want:
            out.append((group.name, want))
    names = {g.name for g in declared}
    for name in sorted(set(managed) - names):
        seen = observed.get(name)
        if seen is not None and seen.explicit and seen.policy != DEFAULT_POLICY:
            out.append((name, DEFAULT_POLICY))
    return out


def group_status(
    declared: Sequence[GroupSpec],
    observed: Mapping[str, Observed],
    sets: Sequence[tuple[str, Policy]],
    failures: Mapping[str, str],
) -> list[dict[str, Any]]:
    """``status.groups`` after this round's ``sets``, of which those named in
    ``failures`` (group -> why) failed."""
    wanted = dict(sets)
    out: list[dict[str, Any]] = []
    for group in declared:
        seen = observed.get(group.name)
        failed = failures.get(group.name)
        if group.name in wanted and failed is None:
            paused = wanted[group.name].paused
        else:
            paused = seen.paused if seen is not None else False
        entry: dict[str, Any] = {
            "name": group.name,
            "applied": failed is None,
            "paused": paused,
            "inFlight": seen.in_flight if seen is not None else 0,
        }
        if group.policy.push is not None:
            entry["push"] = push_status(group.policy.push)
        if failed is not None:
            entry["message"] = failed
        out.append(entry)
    names = {g.name for g in declared}
    for name, why in sorted(failures.items()):
        if name not in names:
            out.append(
                {"name": name, "applied": False, "message": f"going back to the defaults: {why}"}
            )
    return out
