"""The failover decision (``delayq.control.failover``) in a simulation of a shard's nodes
and its control plane (``failover_sim.py``) under crashes, restarts, partitions,
lost answers, lost commands, slow links (messages past their deadline, handled
late and out of order), messages held through a cut and delivered at the heal,
and at most one disaster a run (a lost disk, lost fsynced records, a self-fenced
master), checked against the ground truth: at no time two nodes delivering,
never two masters for one epoch, epochs only rise, promotions only from the
in-sync set and only after the old master is fenced or its lease has run out,
no committed (or, in sync mode, acknowledged) record lost by a promotion, and a
healed shard always settles on one healthy master. The simulation runs 250
times, 5000 with ``--long``, or ``DELAYQ_FAILOVER_EXAMPLES`` times. And the
stories the network-fault harness found, which the model finds unsafe under the
old lease rule and safe under the token rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delayq.control.failover import (
    REPLICA,
    Nothing,
    Promote,
    history_violations,
)
from tests.control.failover_sim import SIM_LEASE, Sim
from tests.support.sizes import size

FAULTS = (
    *("crash", "restart", "cut", "heal", "lose_answer", "lose_command", "flush"),
    *("slow", "fast"),
    *("write", "write", "write", "sync", "sync", "sync"),
)
DISASTERS = ("wipe", "torn", "self_fence")
steps = st.lists(
    st.tuples(
        st.lists(st.tuples(st.sampled_from(FAULTS), st.integers(-4, 11)), max_size=3),
        st.sampled_from((0, 150, 400, 999, 1000, 1001, 2500)),
    ),
    min_size=20,
    max_size=80,
)


@pytest.mark.long
@settings(max_examples=size("DELAYQ_FAILOVER_EXAMPLES", ci=250, long=5000), deadline=None)
@given(
    count=st.sampled_from((2, 3, 3, 4, 4)),
    min_insync=st.sampled_from((1, 2, 2, 3)),
    schedule=steps,
    disaster=st.none()
    | st.tuples(st.integers(0, 79), st.sampled_from(DISASTERS), st.integers(-4, 11)),
)
def test_simulated_failovers_are_safe_and_a_healed_shard_settles(
    count: int,
    min_insync: int,
    schedule: list[tuple[list[tuple[str, int]], int]],
    disaster: tuple[int, str, int] | None,
) -> None:
    sim = Sim.start(count, min_insync)
    for i, (events, advance) in enumerate(schedule):
        if disaster is not None and disaster[0] % len(schedule) == i:
            events = [*events, disaster[1:]]
        for kind, arg in events:
            sim.event(kind, arg)
            sim.check_one_deliverer()
        sim.now += advance
        sim.step()
    assert history_violations(sim.actions, epoch=1, master="a") == ()
    epochs = [a.new_epoch for a in sim.actions if isinstance(a, Promote)]
    assert epochs == sorted(set(epochs))
    if sim.disaster:
        return  # a lost disk or a fenced last in-sync member: Stuck for good is right

    # heal everything: within a few rounds the shard has one healthy master and no strays
    for n in sim.nodes.values():
        n.up, n.lose_answer, n.lose_command, n.delay = True, False, False, 0
        sim.heal(n)
    rounds = (3 * count + 3) * 5  # probes every quarter lease
    for _ in range(rounds):
        sim.now += SIM_LEASE // 4
        healthy = sim.step() == Nothing(f"master {sim.master} is healthy at epoch {sim.epoch}")
        if healthy and sim.nodes[sim.master].delivering(sim.now):
            break
    else:
        pytest.fail(f"no settled master after healing: {sim.actions[-rounds:]}")
    assert history_violations(sim.actions, epoch=1, master="a") == ()
    m = sim.nodes[sim.master]
    assert m.delivering(sim.now) and m.epoch == sim.epoch
    for n in sim.nodes.values():
        if n is not m:
            assert (n.role, n.epoch, n.fenced) == (REPLICA, sim.epoch, False)


STORIES = {
    # probes take half a lease to reach the master: past their deadline, unanswered
    "a slow link to the master": [([], 100)] * 3 + [([("slow", 4)], 100)] + [([], 100)] * 12,
    # probes queue up while the master is cut off and reach it when the cut heals
    "probes held in a cut, delivered at the heal": [([], 100)] * 3
    + [([("cut", 0)], 100)]
    + [([], 100)] * 11
    + [([("heal", 0)], 0)]
    + [([], 100)] * 5,
}


@pytest.mark.parametrize("story", sorted(STORIES))
def test_the_model_finds_a_renewal_counted_from_the_probe_unsafe_and_the_token_rule_safe(
    story: str,
) -> None:
    """What the network-fault harness found (a deposed master still acking after a
    slow or late probe) shows in the model under the old rule, and not under the
    token rule: the model can find what the harness found."""

    def run(old_rule: bool) -> Sim:
        sim = Sim.start(2, 1, old_rule=old_rule)
        for events, advance in STORIES[story]:
            for kind, arg in events:
                sim.event(kind, arg)
                sim.check_one_deliverer()
            sim.now += advance
            sim.step()
        return sim

    with pytest.raises(AssertionError, match="deliverer"):
        run(old_rule=True)
    sim = run(old_rule=False)
    assert sim.master == "b" and sim.epoch == 2, "the failover still happens"
