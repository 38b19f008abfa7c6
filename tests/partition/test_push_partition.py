"""Push delivery under network faults: a replicated shard in network namespaces
(``rig.Rig``: sync mode, 3 nodes, lease 1 s, the queue workload running beside),
a push receiver in a namespace of its own (``rx``), every node allowed to reach
the rig's private subnet (``DELAYQ_PUSH_ALLOW``), and a push load scheduled from
this process. Nemeses: the master cut off from the receiver for 10 s (its pushes
fail, its circuit opens, it must not lose what it could not push), and the master
isolated from its control plane and replicas (its lease lapses mid-push: it stops,
the new master pushes what it held in flight). Then heal, and the receiver's
verdicts: every acknowledged message answered 2xx, none early, all signed;
duplicates counted and printed, and bounded: only a push under way when its
master lost office is pushed again by the next, so at most the group's in-flight
limit (``WINDOW``) a fault. The rig's own invariants are checked too.

Marked ``partition``; needs root and network namespaces (as ``test_nemeses``)."""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from delayq import Client, GroupPolicy, PushTarget
from tests.partition.nemeses import isolate_master
from tests.partition.rig import LEASE_MS, Rig
from tests.support.pushing import (
    PushLoad,
    Receiver,
    check_verdicts,
    secret,
    wait_arrived,
    write_secret,
)

pytestmark = [
    pytest.mark.partition,
    pytest.mark.timeout(600),
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]

RX_PORT = 7990
CUT_S = 10.0
WINDOW = 64  # the push group's in-flight limit: the pushes under way at a fault, at most
ISOLATIONS = 2


def _cut_from_receiver(rig: Rig) -> None:
    rig.net.cut(rig.master(), "rx")
    time.sleep(CUT_S)


def _isolate(rig: Rig) -> None:
    for _ in range(ISOLATIONS):
        isolate_master(rig, random.Random(7), 0)
        time.sleep(3 * LEASE_MS / 1000)  # the lease lapses: a new master takes over
        rig.net.heal()
        rig.wait_insync()



@pytest.mark.parametrize(
    ("fault", "faults"),
    [(_cut_from_receiver, 1), (_isolate, ISOLATIONS)],
    ids=["master-receiver-cut", "isolate-master"],
)
def test_push_loses_nothing_acknowledged_under_partitions(
    tmp_path: Path, fault: Callable[[Rig], None], faults: int
) -> None:
    """``faults``: how many times ``fault`` takes a master's office or reach."""
    key = secret()
    secrets = tmp_path / "secrets"
    write_secret(secrets, "hooks", key)
    env = {"DELAYQ_PUSH_ALLOW": "10.231.0.0/16", "DELAYQ_PUSH_SECRET_DIR": str(secrets)}
    with Rig(tmp_path, extra=("rx",), env=env) as rig:
        rx = Receiver(
            tmp_path / "rx", secrets=[key], host=rig.net.address("rx"), port=RX_PORT,
            prefix=rig.net.exec_prefix("rx"),
        ).start()  # fmt: skip
        try:
            with Client(rig.public_address(rig.master())) as c:
                target = PushTarget(url=rx.url(), secret_ref="hooks")
                c.set_group_policy("t", "hooks", GroupPolicy(push=target, max_in_flight=WINDOW))
            load = PushLoad(rig.public_address(rig.nodes[1]), ahead_ms=300).start()
            try:
                deadline = time.monotonic() + 60
                while len(rx.verdicts()) < 100:  # pushing before the fault
                    assert time.monotonic() < deadline, "nothing pushed"
                    time.sleep(0.05)
                fault(rig)
                rig.net.heal()
                time.sleep(2)  # pushing after the heal
            finally:
                acked = load.stop()
            got = wait_arrived(rx, acked, timeout_s=180)
        finally:
            rx.stop()
        findings = rig.finish(fault.__name__)
    counts = check_verdicts(acked, got)
    print(json.dumps({"errors": dict(load.errors), **counts.__dict__}))
    print(findings.line())
    assert len(acked) > 200, len(acked)
    assert (counts.lost, counts.early, counts.unverified) == (0, 0, 0), counts
    assert counts.duplicates <= WINDOW * faults, counts
    c = findings.counts
    assert (c["lost"], c["early"], c["cancel_broken"]) == (0, 0, 0), c
    assert findings.two_deliverers == [], "two nodes delivering at once"
