"""Push delivery across failovers: 1 shard x 3 real nodes in sync replication
(``delayq cluster up``, a 1 s lease), a push group signed with a secret every node
reads, a load scheduled through the client, and the master SIGKILLed mid-push
(1 kill; 10 with ``--long``, or ``DELAYQ_PUSH_KILLS``), each time waiting for the
new master and for the dead node to rejoin the in-sync set. Every acknowledged
schedule must reach the receiver (a 2xx), none early, every signature verified;
duplicates (a push under way when its master died, pushed again by the next) are
counted and printed."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from delayq import Client, GroupPolicy, PushTarget
from tests.support.cluster import LocalCluster
from tests.support.pushing import PushLoad, Receiver, check_verdicts, secret, wait_arrived
from tests.support.pushing import write_secret as put_secret
from tests.support.sizes import size

pytestmark = pytest.mark.timeout(900)

KILLS = size("DELAYQ_PUSH_KILLS", ci=1, long=10)
FAST = ("--lease", "1s", "--probe-interval", "100ms")


def _master(c: LocalCluster) -> int:
    return int(c.record(0)["master"].removeprefix("node-"))


@pytest.mark.long
def test_sigkill_of_the_master_mid_push_leaves_no_acknowledged_message_unpushed(
    tmp_path: Path,
) -> None:
    key = secret()
    secrets = tmp_path / "secrets"
    put_secret(secrets, "hooks", key)
    env = {"DELAYQ_PUSH_ALLOW": "127.0.0.1/32", "DELAYQ_PUSH_SECRET_DIR": str(secrets)}
    args = ("--replication", "sync", *FAST)
    with (
        Receiver(tmp_path / "rx", secrets=[key]) as rx,
        LocalCluster(tmp_path / "c", shards=1, replicas=3, args=args, env=env) as c,
    ):
        c.wait_insync(0, 3)
        with Client(c.address(0)) as client:
            target = PushTarget(url=rx.url(), secret_ref="hooks")
            client.set_group_policy("t", "hooks", GroupPolicy(push=target))
        load = PushLoad(c.node_address(0, 1), ahead_ms=300).start()
        try:
            for _ in range(KILLS):
                before = len(rx.verdicts())
                deadline = time.monotonic() + 60
                while len(rx.verdicts()) < before + 100:  # pushes under way now
                    assert time.monotonic() < deadline, "nothing pushed"
                    time.sleep(0.05)
                epoch = c.record(0)["epoch"]
                dead = _master(c)
                c.kill(0, dead, signal.SIGKILL)
                rec = c.wait_record(0, lambda r, e=epoch: r["epoch"] > e, timeout_s=30)
                assert rec["master"] != f"node-{dead}"
                c.wait_insync(0, 3, timeout_s=60)  # the dead one back, caught up, in
            time.sleep(1)  # the new master pushes a while
        finally:
            acked = load.stop()
        try:
            got = wait_arrived(rx, acked, timeout_s=120)
        except AssertionError:
            missing = sorted(set(acked) - {v.id for v in rx.verdicts() if v.status == 200})
            print(json.dumps(c.explain(0, missing[:10]), indent=1, default=str))
            raise
        counts = check_verdicts(acked, got)
        print(json.dumps({"kills": KILLS, "errors": dict(load.errors), **counts.__dict__}))
        assert c.record(0)["failovers"] >= KILLS
    assert len(acked) > 200, len(acked)
    assert (counts.lost, counts.early, counts.unverified) == (0, 0, 0), counts
