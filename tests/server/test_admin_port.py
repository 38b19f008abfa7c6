"""The admin service on its own port: the public port does not serve it, the
admin port serves nothing else, and an admin port reachable from other hosts
without TLS is warned about."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from delayq.admin.v1 import admin_pb2 as apb
from delayq.admin.v1 import admin_pb2_grpc as arpc
from delayq.server.listeners import exposed, is_loopback
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as rpc
from tests.support.servers import ServerProcess


def test_loopback_addresses() -> None:
    assert all(is_loopback(a) for a in ("127.0.0.1:7422", "127.9.9.9:0", "[::1]:1", "localhost:2"))
    assert not any(is_loopback(a) for a in ("0.0.0.0:7422", ":7422", "[::]:1", "node-1:7422"))
    assert exposed("0.0.0.0:7422", tls=False) and not exposed("0.0.0.0:7422", tls=True)
    assert not exposed("127.0.0.1:7422", tls=False)


def _code(call: grpc.UnaryUnaryMultiCallable, request: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call(request, timeout=10)
    return err.value.code()


def test_admin_calls_only_on_the_admin_port(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "d").start()
    try:
        assert srv.admin_address != srv.address
        assert srv.admin_address.startswith("127.0.0.1:")
        with grpc.insecure_channel(srv.address) as public:
            assert _code(arpc.ShardAdminStub(public).Status, apb.StatusRequest()) == (
                grpc.StatusCode.UNIMPLEMENTED
            )
            route = rpc.DelayQueueStub(public).GetRoute(pb.GetRouteRequest(), timeout=10)
            assert route.shards[0].admin == srv.admin_address  # for jobs, in its own map
        with grpc.insecure_channel(srv.admin_address) as admin:
            st = arpc.ShardAdminStub(admin).Status(apb.StatusRequest(), timeout=10)
            assert (st.role, st.address) == ("master", srv.address)
            assert _code(rpc.DelayQueueStub(admin).GetRoute, pb.GetRouteRequest()) == (
                grpc.StatusCode.UNIMPLEMENTED
            )
        assert not [r for r in srv.log_records() if "without TLS" in str(r.get("msg"))]
    finally:
        srv.stop()


def test_an_admin_port_open_to_the_network_without_tls_is_warned_about(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "d", ["--admin-listen", "0.0.0.0:0"]).start()
    try:
        warned = [r for r in srv.log_records() if "without TLS" in str(r.get("msg"))]
        assert warned and warned[0]["level"] == "warning", srv.logs()
    finally:
        srv.stop()
