"""``delayq cluster up --tls``: a throwaway CA in DIR/tls/, every node serving TLS,
the admin ports taking only the supervisor's certificate, failover and
``cluster status`` over TLS."""

from __future__ import annotations

import signal
from pathlib import Path

import grpc
import pytest

import delayq
from delayq.admin.v1 import admin_pb2 as apb
from delayq.admin.v1 import admin_pb2_grpc as arpc
from delayq.cluster.certs import LocalTls, control_tls, issue, new_ca
from delayq.tls import TlsConfig, dial
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as rpc
from tests.support.cluster import LocalCluster


def test_a_tls_cluster_serves_fails_over_and_reports(tmp_path: Path) -> None:
    args = ("--tls", "--replication", "sync")  # an ack: on both nodes
    with LocalCluster(tmp_path / "c", shards=1, replicas=2, args=args) as c:
        files = LocalTls(c.dir / "tls")
        c.wait_insync(0, 2)
        assert c.lines[-1].endswith(f", TLS: CA {files.ca}")
        client_tls = TlsConfig(ca=files.ca)
        with delayq.Client(c.address(0), tls=client_tls, timeout_s=30) as client:
            sent = client.schedule("t", b"over tls", delay=3600)
        with grpc.insecure_channel(c.address(0)) as plain, pytest.raises(grpc.RpcError):
            rpc.DelayQueueStub(plain).GetRoute(pb.GetRouteRequest(), timeout=5)

        admin = c.admin_address(0, 0)
        other = files.dir / "other"
        other.mkdir()
        stranger = issue(new_ca("another CA"), "app", client=True)
        stranger.write(other / "app.crt", other / "app.key")
        for tls in (
            client_tls,
            TlsConfig(ca=files.ca, cert=other / "app.crt", key=other / "app.key"),
        ):
            with dial(admin, tls) as ch, pytest.raises(grpc.RpcError) as err:
                arpc.ShardAdminStub(ch).Status(apb.StatusRequest(), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        with dial(admin, control_tls(files)) as ch:
            assert arpc.ShardAdminStub(ch).Status(apb.StatusRequest(), timeout=5).role == "master"

        rows = {r["node"]: r for r in c.status()["nodes"]}
        assert (rows["node-0"]["role"], rows["node-1"]["role"]) == ("master", "replica")
        assert all(r["state"] == "serving" for r in rows.values()), rows

        c.kill(0, 0, signal.SIGKILL)  # the replica, streaming over TLS, takes over
        rec = c.wait_record(0, lambda r: r["master"] == "node-1")
        assert rec["epoch"] == 2
        retry = delayq.RetryPolicy(attempts=200, base_s=0.05, max_s=0.3)  # while the map moves
        with delayq.Client(c.node_address(0, 1), tls=client_tls, retry=retry) as client:
            assert client.lookup(sent.id).body == b"over tls"
