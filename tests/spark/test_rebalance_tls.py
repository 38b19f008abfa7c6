"""``delayq cluster scale`` of a ``cluster up --tls`` cluster: the rebalance job
(real Spark, local mode) reaches every node's admin port with the supervisor's
certificate (``DELAYQ_TLS_*``) and moves the keyed messages to their new owner
over TLS; every message is pending exactly once after, and old ids still look
up through a TLS client; a group's policy reaches the new shard (the driver's
ListGroups and SetGroupPolicy at the masters, over TLS)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import delayq
from delayq import shardmap
from delayq.cluster.certs import LocalTls, control_tls
from delayq.tls import ENV_CA, ENV_CERT, ENV_KEY
from tests.spark.test_rebalance import NODE_ENV, scale
from tests.spark.workload import exported
from tests.support.cluster import LocalCluster

MESSAGES = 300


@pytest.mark.timeout(900)
def test_a_tls_cluster_scales_with_the_job_over_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in NODE_ENV.items():
        monkeypatch.setenv(key, value)
    with LocalCluster(tmp_path / "c", shards=1, args=("--tls",)) as c:
        files = LocalTls(c.dir / "tls")
        client_tls = delayq.TlsConfig(ca=files.ca)
        policy = delayq.GroupPolicy(max_attempts=5, max_in_flight=8)
        with delayq.Client(c.address(0), tls=client_tls, timeout_s=30) as client:
            client.set_group_policy("p", "g", policy)
            sent = client.schedule_many(
                [
                    delayq.Outgoing(topic="p", body=b"m-%d" % i, key=f"k{i}", delay=7_200)
                    for i in range(MESSAGES)
                ]
            )
        assert all(s.ok for s in sent)
        done = scale(c, 2)
        assert done.returncode == 0, (done.stdout, done.stderr[-3000:], c.logs())
        m = c.current_map()
        assert (m.count, m.owners) == (2, 2)

        control = control_tls(files)
        assert control is not None and control.cert is not None and control.key is not None
        monkeypatch.setenv(ENV_CA, str(control.ca))
        monkeypatch.setenv(ENV_CERT, str(control.cert))
        monkeypatch.setenv(ENV_KEY, str(control.key))
        rows = exported(c.address(0))
        count = Counter(bytes(r["body"]) for r in rows)  # type: ignore[arg-type]
        assert set(count) == {b"m-%d" % i for i in range(MESSAGES)}
        assert max(count.values()) == 1, "pending exactly once"
        assert {r["shard"] for r in rows} == {0, 1}, "some moved to the new shard"
        for r in rows:
            assert r["shard"] == shardmap.shard_of_key(str(r["key"]), 2), r
        with delayq.Client(c.address(0), tls=client_tls, timeout_s=30) as client:
            for s in sent[:: MESSAGES // 20]:
                assert s.id and client.lookup(s.id).state == "pending"
            assert client.group_policy("p", "g") == policy  # both shards hold it
