"""The failover decision (``delayq.control.failover``) against its invariants: the history
checker (``history_violations``) on clean and broken histories, and a property
test over generated views: any view gets a safe, deterministic action."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from delayq.control.failover import (
    MASTER,
    REPLICA,
    Fence,
    Follow,
    NodeStatus,
    Nothing,
    Promote,
    ShardView,
    Stuck,
    decide,
    history_violations,
)
from tests.control.failover_views import LEASE, NAMES, cannot_deliver, healthy

# -- history_violations --------------------------------------------------------------


def test_history_violations_accepts_a_clean_failover() -> None:
    history = [
        Nothing("x"),
        Fence("a", 3),
        Promote("b", 4, (("a", "b"), ("c", "b"))),
        Follow("c", "b", 4),
        Stuck("y"),
        Promote("c", 5, ()),
    ]
    assert history_violations(history, epoch=3, master="a") == ()


def test_history_violations_finds_each_broken_invariant() -> None:
    assert history_violations([Promote("b", 3, ())], epoch=3, master="a") == (
        "#0: Promote(b) to epoch 3, not above 3",
        "#0: epoch 3 has two masters, a and b",
    )
    assert history_violations([Promote("b", 5, ()), Promote("c", 4, ())]) == (
        "#1: Promote(c) to epoch 4, not above 5",
    )
    assert history_violations([Promote("b", 4, ()), Follow("c", "d", 4)]) == (
        "#1: epoch 4 has two masters, b and d",
    )
    assert history_violations([Follow("c", "c", 1)]) == ("#0: c told to follow itself",)
    assert history_violations([Promote("b", 2, (("c", "d"), ("b", "b")))]) == (
        "#0: Promote(b) tells c to follow d",
        "#0: Promote(b) tells b to follow b",
    )
    assert history_violations([Fence("a", 7), Promote("b", 7, ())]) == (
        "#1: Promote(b) to epoch 7, not above 7",
    )


# -- properties over generated views -------------------------------------------------


@st.composite
def views(draw: st.DrawFn) -> ShardView:
    """Any view, half of them near the usual: most nodes at the recorded epoch, in
    the in-sync set, unfenced replicas (uniform fields alone seldom elect)."""
    usual = draw(st.booleans())

    def pick(usual_values: tuple[Any, ...], anything: st.SearchStrategy[Any]) -> Any:
        return draw(st.sampled_from(usual_values) if usual else anything)

    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    now, epoch = 10_000, draw(st.integers(1, 6))
    master = draw(st.sampled_from(names))
    nodes = []
    for name in names:
        end = draw(st.integers(0, 300))
        flushed = draw(st.integers(0, end))
        nodes.append(
            NodeStatus(
                name=name,
                reachable=draw(st.booleans()),
                seen_ms=draw(st.integers(now - 2 * LEASE, now)),
                role=pick(
                    (MASTER, MASTER, REPLICA) if name == master else (REPLICA,) * 5 + (MASTER,),
                    st.sampled_from((MASTER, REPLICA)),
                ),
                epoch=pick((epoch,) * 4 + (epoch - 1, 0), st.integers(0, 6)),
                log_end=end,
                flushed=flushed,
                fenced=pick((False,) * 5 + (True,), st.booleans()),
                high_water=pick((0, 0, flushed // 2, flushed), st.integers(0, 300)),
            )
        )
    insync = [n for n in names if pick((True, True, True, False), st.booleans())]
    return ShardView(
        epoch=epoch,
        master=master,
        insync=frozenset(insync + draw(st.lists(st.just("z"), max_size=1))),
        nodes=tuple(nodes),
        now_ms=now,
        lease_ms=LEASE,
        min_insync=draw(st.integers(1, 4)),
    )


@settings(max_examples=600, deadline=None)
@given(views(), st.randoms(use_true_random=False))
def test_any_view_gets_a_safe_deterministic_action(v: ShardView, rnd: Any) -> None:
    action = decide(v)
    shuffled = list(v.nodes)
    rnd.shuffle(shuffled)
    assert decide(dataclasses.replace(v, nodes=tuple(shuffled))) == action  # rule 8
    assert decide(v) == action
    top = max(v.epoch, *(n.epoch for n in v.nodes))
    by_name = {n.name: n for n in v.nodes}
    if healthy(v):  # rule 1
        assert isinstance(action, Nothing | Follow)
    match action:
        case Promote(node=name, new_epoch=new, followers=followers):
            chosen = by_name[name]
            assert name in v.insync and chosen.reachable  # rule 4
            if name == v.master:  # a promotion that never landed, or a master come back
                assert chosen.role == REPLICA and 1 <= chosen.epoch <= v.epoch
                assert not chosen.fenced
            hw = max((n.high_water for n in v.nodes if n.role == MASTER), default=0)
            m = by_name[v.master]
            landed = not (m.reachable and m.role == REPLICA and not m.fenced)
            old = v.master if landed or not 1 <= m.epoch < v.epoch else None
            fit = [
                n
                for n in v.nodes
                if n.name in v.insync
                and n.reachable
                and n.name != old
                and n.epoch >= 1
                and n.flushed >= hw
            ]
            need = len(v.insync) - v.min_insync + 1
            if name == v.master and chosen.epoch == v.epoch:  # came back: the last resort
                assert chosen.flushed >= hw and top == v.epoch
                assert not fit or (v.min_insync >= 2 and len(fit) < need)
            else:
                assert chosen in fit
                best = max((n.epoch, n.flushed) for n in fit)
                assert name == min(n.name for n in fit if (n.epoch, n.flushed) == best)
                if v.min_insync >= 2:  # rule 6
                    assert len(fit) >= need
            assert new == top + 1  # rule 5
            assert all(cannot_deliver(v, n) for n in v.nodes if n.name != name)  # rule 3
            assert followers == tuple(  # rule 7
                (n.name, name)
                for n in sorted(v.nodes, key=lambda n: n.name)
                if n.reachable and n.name != name
            )
        case Fence(node=name, epoch=e):
            target = by_name[name]
            assert target.reachable and target.role == MASTER and not target.fenced
            assert e == top and not healthy(v)
        case Follow(node=name, master=leader, epoch=e):
            assert healthy(v) and leader == v.master and e == v.epoch and name != leader
            assert by_name[name].reachable
        case Stuck():
            assert not healthy(v)
            assert all(cannot_deliver(v, n) for n in v.nodes)  # it waits for leases first
        case Nothing():
            if not healthy(v):  # it waits for a node that may still be delivering
                assert not all(cannot_deliver(v, n) for n in v.nodes)
