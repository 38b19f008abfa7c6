"""TLS and mutual TLS on real ``delayq serve`` processes: the public port asks for
client certificates of the clients' CA, the admin port only takes the control
plane's; certificates rotate without a restart; a replica follows its master
over TLS."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

import delayq
from delayq.admin.v1 import admin_pb2 as apb
from delayq.admin.v1 import admin_pb2_grpc as arpc
from delayq.cluster.certs import LOCAL_HOSTS, Issued, issue, new_ca
from delayq.tls import TlsConfig, dial
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as rpc
from tests.replication.nodes import wait_for
from tests.support.servers import ServerProcess


@dataclass
class Pki:
    dir: Path

    def path(self, name: str) -> Path:
        return self.dir / name

    def put(self, name: str, issued: Issued) -> None:
        """``name.crt`` and ``name.key``, each replaced in one rename."""
        for suffix, data in ((".crt", issued.cert), (".key", issued.key)):
            tmp = self.path(name + suffix + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, self.path(name + suffix))

    def put_ca(self, name: str, ca: Issued) -> None:
        self.path(name + ".crt").write_bytes(ca.cert)

    def tls(self, ca: str, client: str | None = None) -> TlsConfig:
        cert = self.path(client + ".crt") if client else None
        key = self.path(client + ".key") if client else None
        return TlsConfig(ca=self.path(ca + ".crt"), cert=cert, key=key)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """The control plane's CA (``control``: it signs the nodes' and the supervisor's
    certificates) and the clients' CA (``clients``), apart."""
    p = Pki(tmp_path_factory.mktemp("pki"))
    control, clients = new_ca("control CA"), new_ca("clients CA")
    p.put_ca("control-ca", control)
    p.put_ca("clients-ca", clients)
    p.put("node", issue(control, "node", hosts=LOCAL_HOSTS, server=True, client=True))
    p.put("supervisor", issue(control, "supervisor", client=True))
    p.put("app", issue(clients, "app", client=True))
    return p


def tls_args(pki: Pki, *, mutual: bool = True) -> list[str]:
    args = ["--tls-cert", str(pki.path("node.crt")), "--tls-key", str(pki.path("node.key"))]
    args += ["--admin-client-ca", str(pki.path("control-ca.crt"))]
    if mutual:
        args += ["--tls-client-ca", str(pki.path("clients-ca.crt"))]
    return args


@pytest.fixture
def server(tmp_path: Path, pki: Pki) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path / "d", tls_args(pki)).start()
    try:
        yield srv
    finally:
        srv.stop()


def refused(call: object, request: object, timeout_s: float = 5) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call(request, timeout=timeout_s)  # type: ignore[operator]
    return err.value.code()


def admin_status(address: str, tls: TlsConfig | None) -> apb.StatusResponse:
    with dial(address, tls) as ch:
        reply: apb.StatusResponse = arpc.ShardAdminStub(ch).Status(apb.StatusRequest(), timeout=10)
        return reply


def test_a_tls_client_with_its_certificate_is_served(server: ServerProcess, pki: Pki) -> None:
    with delayq.Client(server.address, tls=pki.tls("control-ca", "app")) as c:
        s = c.schedule("t", b"over tls", delay=60)
        assert c.lookup(s.id).body == b"over tls"


def test_plaintext_and_certificate_less_clients_are_refused(
    server: ServerProcess, pki: Pki
) -> None:
    request = pb.GetRouteRequest()
    with grpc.insecure_channel(server.address) as plain:
        assert refused(rpc.DelayQueueStub(plain).GetRoute, request) == grpc.StatusCode.UNAVAILABLE
    with dial(server.address, pki.tls("control-ca")) as no_cert:
        assert refused(rpc.DelayQueueStub(no_cert).GetRoute, request) == (
            grpc.StatusCode.UNAVAILABLE
        )
    with dial(server.address, pki.tls("clients-ca", "app")) as wrong_root:  # not the node's CA
        assert refused(rpc.DelayQueueStub(wrong_root).GetRoute, request) == (
            grpc.StatusCode.UNAVAILABLE
        )


def test_the_admin_port_takes_only_the_control_planes_certificates(
    server: ServerProcess, pki: Pki
) -> None:
    assert admin_status(server.admin_address, pki.tls("control-ca", "supervisor")).role == "master"
    for tls in (None, pki.tls("control-ca"), pki.tls("control-ca", "app")):
        with pytest.raises(grpc.RpcError) as err:
            admin_status(server.admin_address, tls)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE, tls


def test_tls_without_a_ca_for_the_admin_port_does_not_start(tmp_path: Path, pki: Pki) -> None:
    args = ["--tls-cert", str(pki.path("node.crt")), "--tls-key", str(pki.path("node.key"))]
    with pytest.raises(AssertionError, match="admin_client_ca"):
        ServerProcess(tmp_path / "d", args).start()


def test_a_rotated_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    """The node's certificate is replaced by one of another CA: new connections get
    it (a client trusting only the new CA gets in, one trusting only the old no
    longer does), the process is the same."""
    pki = Pki(tmp_path / "pki")
    pki.dir.mkdir()
    old, new = new_ca("old CA"), new_ca("new CA")
    pki.put_ca("old-ca", old)
    pki.put_ca("new-ca", new)
    pki.put("node", issue(old, "node", hosts=LOCAL_HOSTS, server=True, client=True))
    args = ["--tls-cert", str(pki.path("node.crt")), "--tls-key", str(pki.path("node.key"))]
    srv = ServerProcess(
        tmp_path / "d", [*args, "--admin-client-ca", str(pki.path("old-ca.crt"))]
    ).start()
    try:
        pid = srv.proc.pid if srv.proc else 0

        def works(ca: str) -> bool:
            with dial(srv.address, pki.tls(ca)) as ch:
                try:
                    rpc.DelayQueueStub(ch).GetRoute(pb.GetRouteRequest(), timeout=5)
                except grpc.RpcError:
                    return False
                return True

        assert works("old-ca") and not works("new-ca")
        time.sleep(0.01)  # another mtime
        pki.put("node", issue(new, "node", hosts=LOCAL_HOSTS, server=True, client=True))
        wait_for("the new certificate", lambda: works("new-ca"), timeout_s=10)
        assert not works("old-ca")
        assert srv.proc is not None and srv.proc.pid == pid and srv.proc.poll() is None
        said = [r["msg"] for r in srv.log_records()]
        assert "public TLS: certificate files reloaded" in said, said
    finally:
        srv.stop()


def test_a_replica_follows_its_master_over_tls(tmp_path: Path, pki: Pki) -> None:
    args = [*tls_args(pki), "--flush-interval", "200ms"]
    m = ServerProcess(tmp_path / "m", ["--node-name", "m", *args]).start()
    r = None
    try:
        r = ServerProcess(
            tmp_path / "r", ["--node-name", "r", "--follow", m.admin_address, *args]
        ).start()
        control = pki.tls("control-ca", "supervisor")
        with delayq.Client(m.address, tls=pki.tls("control-ca", "app")) as c:
            c.schedule("t", b"x", delay=60)

        def caught_up() -> bool:
            st = admin_status(r.admin_address, control)  # type: ignore[union-attr]
            return st.streaming and st.log_end == admin_status(m.admin_address, control).log_end

        wait_for("the replica over TLS", caught_up)
        assert admin_status(r.admin_address, control).master == m.admin_address
    finally:
        if r is not None:
            r.stop()
        m.stop()


def test_the_rocketmq_port_serves_with_the_public_ports_tls(tmp_path: Path, pki: Pki) -> None:
    from delayq.rocketmq.v2 import service_pb2 as rsvc
    from delayq.rocketmq.v2 import service_pb2_grpc as rrpc

    srv = ServerProcess(tmp_path / "d", [*tls_args(pki), "--rocketmq-listen", "127.0.0.1:0"])
    srv.start()
    try:
        request = rsvc.HeartbeatRequest()
        with dial(srv.rocketmq_address, pki.tls("control-ca", "app")) as ch:
            assert rrpc.MessagingServiceStub(ch).Heartbeat(request, timeout=10).status.code
        with grpc.insecure_channel(srv.rocketmq_address) as plain:
            stub = rrpc.MessagingServiceStub(plain)
            assert refused(stub.Heartbeat, request) == grpc.StatusCode.UNAVAILABLE
        with dial(srv.rocketmq_address, pki.tls("control-ca")) as no_cert:
            stub = rrpc.MessagingServiceStub(no_cert)
            assert refused(stub.Heartbeat, request) == grpc.StatusCode.UNAVAILABLE
    finally:
        srv.stop()


def test_public_tls_off_serves_tls_on_the_admin_port_only(tmp_path: Path, pki: Pki) -> None:
    """The operator's default: the admin port takes only the control plane's
    certificates, the public and RocketMQ ports speak plaintext."""
    from delayq.rocketmq.v2 import service_pb2 as rsvc
    from delayq.rocketmq.v2 import service_pb2_grpc as rrpc

    args = [*tls_args(pki, mutual=False), "--public-tls", "false"]
    srv = ServerProcess(tmp_path / "d", [*args, "--rocketmq-listen", "127.0.0.1:0"]).start()
    try:
        with delayq.Client(srv.address) as c:
            s = c.schedule("t", b"plain public port", delay=60)
            assert c.lookup(s.id).body == b"plain public port"
        with grpc.insecure_channel(srv.rocketmq_address) as plain:
            reply = rrpc.MessagingServiceStub(plain).Heartbeat(rsvc.HeartbeatRequest(), timeout=10)
            assert reply.status.code
        with dial(srv.address, pki.tls("control-ca", "app")) as tls_to_plain:
            stub = rpc.DelayQueueStub(tls_to_plain)
            assert refused(stub.GetRoute, pb.GetRouteRequest()) == grpc.StatusCode.UNAVAILABLE
        control = pki.tls("control-ca", "supervisor")
        assert admin_status(srv.admin_address, control).role == "master"
        for tls in (None, pki.tls("control-ca"), pki.tls("control-ca", "app")):
            with pytest.raises(grpc.RpcError) as err:
                admin_status(srv.admin_address, tls)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE, tls
    finally:
        srv.stop()
