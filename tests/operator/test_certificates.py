"""The operator's CA and certificates (delayq_operator.certificates), decided at
chosen instants and checked by real TLS handshakes (OpenSSL through ``ssl``, over
memory buffers): a server that requires client certificates of its bundle, a
client that checks the server's name.

The plans take the time as an argument; OpenSSL checks validity against the real
clock, so the instants a handshake's certificates are issued at lie within the hour
before it (``T0``; the rotation test starts its CA's life 2/3 of it before ``T0``)."""

from __future__ import annotations

import datetime
import ssl
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from delayq import pki, shardmap
from delayq_operator import desired_objects, parse_spec
from delayq_operator.certificates import (
    Action,
    Authority,
    CertSettings,
    Plan,
    SecretContents,
    cert_times,
    expiry_warning,
    plan_ca,
)
from delayq_operator.crd import pod_name
from delayq_operator.leafcerts import plan_control, plan_topic, server_names
from delayq_operator.status import tls_condition
from tests.operator.test_operator_desired import topic

T0 = datetime.datetime.now(datetime.UTC).replace(microsecond=0) - datetime.timedelta(hours=1)
MINUTE = datetime.timedelta(minutes=1)
DAY = datetime.timedelta(days=1)
SETTINGS = CertSettings()


def contents(plan: Plan) -> SecretContents:
    """The Secret as the plan leaves it."""
    return SecretContents(dict(plan.data), dict(plan.annotations))


def new_authority(now: datetime.datetime = T0) -> tuple[Authority, Plan]:
    plan = plan_ca(None, [], now)
    assert plan.action is Action.ISSUE
    return Authority.from_data(plan.data), plan


def leaf_of(data: dict[str, bytes]) -> Any:
    return pki.load_certs(data["tls.crt"])[0]


class Refused(Exception):
    def __init__(self, side: str, error: ssl.SSLError) -> None:
        super().__init__(f"{side}: {error}")
        self.side = side


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, hostname: str) -> None:
    """A TLS handshake between the two contexts over memory buffers; Refused names the
    side that gave up."""
    # each side reads what the other wrote: the client's output is the server's input
    c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    cli = client.wrap_bio(c_in, c_out, server_hostname=hostname)
    done = {"client": False, "server": False}
    for _ in range(10):
        for side, obj in (("client", cli), ("server", srv)):
            if done[side]:
                continue
            try:
                obj.do_handshake()
                done[side] = True
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError as e:
                raise Refused(side, e) from e
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            # TLS 1.3: the server checks the client's certificate on its last step;
            # one more read on the client side sees a refusal it sent
            try:
                cli.read(1)
            except ssl.SSLWantReadError:
                return
            except ssl.SSLError as e:
                raise Refused("server", e) from e
            return
    raise AssertionError("the handshake did not finish")


def files(tmp_path: Path, name: str, data: dict[str, bytes]) -> tuple[Path, Path]:
    cert, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    pki.Issued(key=data["tls.key"], cert=data["tls.crt"]).write(cert, key)
    return cert, key


def server_context(tmp_path: Path, data: dict[str, bytes]) -> ssl.SSLContext:
    """A pod's admin port: its certificate, client certificates of its bundle required."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*files(tmp_path, "server", data))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=data["ca.crt"].decode())
    return ctx


def client_context(
    tmp_path: Path, bundle: bytes, data: dict[str, bytes] | None = None
) -> ssl.SSLContext:
    """A caller that verifies the server with ``bundle`` and presents ``data``'s certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cadata=bundle.decode())
    if data is not None:
        ctx.load_cert_chain(*files(tmp_path, "client", data))
    return ctx


def pod_host(shard: int, ordinal: int = 0) -> str:
    return f"{pod_name('orders', shard, ordinal)}.orders-shard-{shard}-pods.prod.svc"


def addresses(body: dict[str, Any]) -> set[str]:
    """Every name the desired objects dial the topic's pods by: the map's addresses
    (masters, replicas, admin, RocketMQ) and the Services, short and in the namespace."""
    objs = desired_objects(body)
    (config_map,) = [o for o in objs if o["kind"] == "ConfigMap"]
    topo = shardmap.parse(config_map["data"]["shards.json"])
    hosts = set()
    for e in topo.shards:
        for address in (e.master, *e.replicas, e.admin, e.rocketmq):
            hosts.add(address.rsplit(":", 1)[0])
    for o in objs:
        if o["kind"] == "Service":
            name = o["metadata"]["name"]
            hosts |= {name, f"{name}.prod.svc", f"{name}.prod.svc.cluster.local"}
    return hosts


def test_the_server_certificate_names_every_pod_and_service_of_every_shard(
    tmp_path: Path,
) -> None:
    ca, _ = new_authority()
    body = topic(shards=3, replicasPerShard=2)
    plan = plan_topic("orders", "prod", parse_spec(body), None, ca, T0)
    assert plan.action is Action.ISSUE and plan.warning == ""
    assert set(plan.data) == {"tls.crt", "tls.key", "ca.crt"}
    sans = pki.san_names(leaf_of(plan.data))
    wanted = addresses(body)
    assert len(wanted) == 3 * (2 + 2 * 3)  # 2 pods, 2 Services x 3 spellings
    assert wanted <= sans
    assert pod_host(2, 1) + ".cluster.local" in sans
    # the client side: a pod of each shard, dialled by name, with the bundle
    control = plan_control(None, ca, T0)
    for host in (pod_host(0), pod_host(2, 1), "orders-shard-1.prod.svc", "orders-shard-2-pods"):
        handshake(
            server_context(tmp_path, plan.data),
            client_context(tmp_path, plan.data["ca.crt"], control.data),
            host,
        )
    with pytest.raises(Refused) as refused:
        handshake(
            server_context(tmp_path, plan.data),
            client_context(tmp_path, plan.data["ca.crt"], control.data),
            pod_host(3),
        )
    assert refused.value.side == "client" and "Hostname mismatch" in str(refused.value)


def test_a_shard_added_gets_a_certificate_naming_it_at_once(tmp_path: Path) -> None:
    ca, _ = new_authority()
    three = plan_topic("orders", "prod", parse_spec(topic(shards=3)), None, ca, T0)
    later = T0 + 30 * MINUTE
    same = plan_topic("orders", "prod", parse_spec(topic(shards=3)), contents(three), ca, later)
    assert same.action is Action.NOTHING and same.data == three.data

    body = topic(shards=4)
    four = plan_topic("orders", "prod", parse_spec(body), contents(three), ca, later)
    assert four.action is Action.REISSUE
    assert "does not name" in four.reason
    assert addresses(body) <= pki.san_names(leaf_of(four.data))
    assert four.data["tls.crt"] != three.data["tls.crt"]
    # at once even for a new topic: the same CA signs it, which every pod trusts
    young = plan_topic("orders", "prod", parse_spec(body), contents(three), ca, T0 + MINUTE)
    assert young.action is Action.REISSUE, young.reason
    control = plan_control(None, ca, later)
    handshake(
        server_context(tmp_path, four.data),
        client_context(tmp_path, four.data["ca.crt"], control.data),
        pod_host(3),
    )
    # a shrink in progress: the map still lists the leaving shard, so its name stays
    shrinking = plan_topic(
        "orders", "prod", parse_spec(topic(shards=3)), contents(four), ca, later, shards=4
    )
    assert shrinking.action is Action.NOTHING


def test_a_leaf_is_renewed_at_two_thirds_of_its_lifetime_not_before() -> None:
    ca, _ = new_authority()
    spec = parse_spec(topic(shards=2))
    issued = plan_topic("orders", "prod", spec, None, ca, T0)
    renew_at = T0 + SETTINGS.leaf_lifetime * 2 / 3
    assert renew_at == T0 + 60 * DAY
    before = plan_topic(
        "orders", "prod", spec, contents(issued), ca, renew_at - datetime.timedelta(seconds=1)
    )
    assert before.action is Action.NOTHING and before.data == issued.data
    at = plan_topic("orders", "prod", spec, contents(issued), ca, renew_at)
    assert at.action is Action.REISSUE and "lifetime" in at.reason
    new = leaf_of(at.data)
    assert new.not_valid_after_utc == renew_at + SETTINGS.leaf_lifetime
    assert pki.signed_by(new, ca.cert)
    control = plan_control(None, ca, T0)
    assert plan_control(contents(control), ca, renew_at).action is Action.REISSUE


def test_the_admin_port_refuses_a_client_without_a_certificate_or_of_another_ca(
    tmp_path: Path,
) -> None:
    ca, _ = new_authority()
    other, _ = new_authority()
    pods = plan_topic("orders", "prod", parse_spec(topic()), None, ca, T0)
    assert pki.signed_by(leaf_of(pods.data), ca.cert)
    ours = plan_control(None, ca, T0)
    theirs = plan_control(None, other, T0)
    bundle = pods.data["ca.crt"]
    host = pod_host(0)

    handshake(
        server_context(tmp_path, pods.data), client_context(tmp_path, bundle, ours.data), host
    )
    # the pods present their own certificate to each other (the replication stream)
    handshake(
        server_context(tmp_path, pods.data), client_context(tmp_path, bundle, pods.data), host
    )
    for client, why in ((None, "did not return a certificate"), (theirs.data, "issuer")):
        with pytest.raises(Refused) as refused:
            handshake(
                server_context(tmp_path, pods.data), client_context(tmp_path, bundle, client), host
            )
        assert refused.value.side == "server" and why in str(refused.value)
    # and a client of the other CA does not trust our pods either
    with pytest.raises(Refused) as refused:
        handshake(
            server_context(tmp_path, pods.data),
            client_context(tmp_path, theirs.data["ca.crt"], theirs.data),
            host,
        )
    assert refused.value.side == "client"


def test_ca_rotation_trusts_both_cas_until_every_leaf_is_reissued(tmp_path: Path) -> None:
    born = T0 - SETTINGS.ca_lifetime * 2 / 3
    _, ca_plan = new_authority(born)
    ca_secret = contents(ca_plan)
    rotate_at = born + SETTINGS.ca_lifetime * 2 / 3
    assert rotate_at == T0
    spec = parse_spec(topic(shards=2))
    host = pod_host(1)

    # leaves of the old CA, issued shortly before its rotation
    old = Authority.from_data(ca_secret.data)
    t = rotate_at - DAY
    pods = contents(plan_topic("orders", "prod", spec, None, old, t))
    control = contents(plan_control(None, old, t))
    assert plan_ca(ca_secret, [pods.data, control.data], rotate_at - DAY).action is Action.NOTHING

    rotated = plan_ca(ca_secret, [pods.data, control.data], rotate_at)
    assert rotated.action is Action.ROTATE_CA
    ca_secret = contents(rotated)
    new = Authority.from_data(ca_secret.data)
    assert new.previous is not None and pki.fingerprint(new.previous) == pki.fingerprint(old.cert)
    assert [pki.fingerprint(c) for c in pki.load_certs(new.bundle())] == [
        pki.fingerprint(new.cert),
        pki.fingerprint(old.cert),
    ]

    # 1. the leaf Secrets trust both CAs; their certificates stay (not yet settled)
    step = plan_topic("orders", "prod", spec, pods, new, rotate_at)
    assert step.action is Action.TRUST and "waits" in step.reason
    assert step.data["tls.crt"] == pods.data["tls.crt"] and step.data["ca.crt"] == new.bundle()
    pods = contents(step)
    control = contents(plan_control(control, new, rotate_at))
    assert control.data["ca.crt"] == new.bundle()
    soon = rotate_at + SETTINGS.settle / 2
    assert plan_topic("orders", "prod", spec, pods, new, soon).action is Action.NOTHING
    assert plan_ca(ca_secret, [pods.data, control.data], soon).action is Action.NOTHING

    # 2. once every pod trusts the new CA, the leaves are reissued under it, one at a time:
    # in between, old and new certificates work together
    settled = rotate_at + SETTINGS.settle
    step = plan_topic("orders", "prod", spec, pods, new, settled)
    assert step.action is Action.REISSUE and "previous CA" in step.reason
    assert pki.signed_by(leaf_of(step.data), new.cert)
    pods = contents(step)
    bundle = new.bundle()
    handshake(
        server_context(tmp_path, dict(pods.data)),
        client_context(tmp_path, bundle, dict(control.data)),  # still the old CA's
        host,
    )
    assert plan_ca(ca_secret, [pods.data, control.data], settled).action is Action.NOTHING
    step = plan_control(control, new, settled)
    assert step.action is Action.REISSUE
    old_control = dict(control.data)
    control = contents(step)

    # 3. the old CA goes once every leaf is the new CA's and has reached its pods
    assert plan_ca(ca_secret, [pods.data, control.data], settled).action is Action.NOTHING
    done_at = settled + SETTINGS.settle
    dropped = plan_ca(ca_secret, [pods.data, control.data], done_at)
    assert dropped.action is Action.DROP_OLD_CA and "previous.crt" not in dropped.data
    final = Authority.from_data(dropped.data)
    assert final.previous is None and final.bundle() == new.issued.cert

    step = plan_topic("orders", "prod", spec, pods, final, done_at)
    assert step.action is Action.TRUST and step.data["tls.crt"] == pods.data["tls.crt"]
    pods = contents(step)
    assert plan_topic("orders", "prod", spec, pods, final, done_at).action is Action.NOTHING
    control = contents(plan_control(control, final, done_at))
    server = dict(pods.data)
    handshake(
        server_context(tmp_path, server),
        client_context(tmp_path, final.bundle(), dict(control.data)),
        host,
    )
    # a certificate of the old CA is refused now
    with pytest.raises(Refused) as refused:
        handshake(
            server_context(tmp_path, server), client_context(tmp_path, bundle, old_control), host
        )
    assert refused.value.side == "server"
    assert plan_ca(contents(dropped), [pods.data, control.data], done_at).action is Action.NOTHING


def test_an_expiry_renewal_has_not_fixed_warns_fourteen_days_ahead() -> None:
    ca, _ = new_authority()
    # a Secret the operator did not renew (a user's spec.tls, say)
    leaf = plan_control(None, ca, T0).data
    expires = leaf_of(leaf).not_valid_after_utc
    assert expiry_warning(leaf, expires - 14 * DAY - datetime.timedelta(seconds=1), 14 * DAY) == ""
    warning = expiry_warning(leaf, expires - 14 * DAY, 14 * DAY)
    assert "certificate expires at" in warning
    assert "expired" in expiry_warning(leaf, expires, 14 * DAY)

    # a leaf past its renewal whose reissue must wait for a new CA to reach the pods
    spec = parse_spec(topic())
    rotate_at = T0 + SETTINGS.ca_lifetime * 2 / 3
    stale = contents(plan_topic("orders", "prod", spec, None, ca, rotate_at - 80 * DAY))
    ca_secret = SecretContents(ca.data())
    rotated = plan_ca(ca_secret, [stale.data], rotate_at)
    assert rotated.action is Action.ROTATE_CA
    new = Authority.from_data(rotated.data)
    waiting = plan_topic("orders", "prod", spec, stale, new, rotate_at)
    assert waiting.action is Action.TRUST
    assert "certificate expires at" in waiting.warning
    reissued = plan_topic(
        "orders", "prod", spec, contents(waiting), new, rotate_at + SETTINGS.settle
    )
    assert reissued.action is Action.REISSUE and reissued.warning == ""

    # the CA itself, when its rotation is set too late to leave 14 days
    late = CertSettings(renew_after=0.995)
    ca_at = plan_ca(ca_secret, [], T0 + SETTINGS.ca_lifetime - 15 * DAY, late)
    assert ca_at.action is Action.NOTHING and ca_at.warning == ""
    ca_at = plan_ca(ca_secret, [], T0 + SETTINGS.ca_lifetime - 14 * DAY, late)
    assert ca_at.action is Action.NOTHING and "the CA expires" in ca_at.warning


def test_an_unusable_secret_is_issued_afresh() -> None:
    ca, _ = new_authority()
    spec = parse_spec(topic())
    good = plan_topic("orders", "prod", spec, None, ca, T0)
    other = plan_topic("orders", "prod", spec, None, ca, T0)
    mixed = SecretContents({**good.data, "tls.key": other.data["tls.key"]})
    assert plan_topic("orders", "prod", spec, mixed, ca, T0).action is Action.ISSUE
    assert plan_ca(SecretContents({"ca.crt": b"junk"}), [], T0).action is Action.ISSUE
    # a leaf of a CA no longer trusted (the CA Secret was lost) is replaced at once
    lost, _ = new_authority()
    replaced = plan_topic("orders", "prod", spec, contents(good), lost, T0 + DAY)
    assert replaced.action is Action.REISSUE
    assert pki.signed_by(leaf_of(replaced.data), lost.cert)


def test_server_names_count_and_settings_checks() -> None:
    names = server_names("orders", "prod", shards=4, replicas=3)
    assert len(names) == 4 * (3 * 2 + 2 * 4)
    with pytest.raises(ValueError):
        CertSettings(renew_after=1.0)
    with pytest.raises(ValueError):
        CertSettings(leaf_lifetime=10 * DAY, ca_lifetime=DAY)
    assert replace(SETTINGS, settle=DAY).settle == DAY


def test_cert_times_are_the_earlier_end_and_the_renewal_instant() -> None:
    ca, _ = new_authority()
    plan = plan_control(None, ca, T0)
    end, renew = cert_times(plan.data)
    leaf = leaf_of(plan.data)
    assert end == min(leaf.not_valid_after_utc, ca.cert.not_valid_after_utc)
    assert renew is not None and T0 < renew < end
    assert cert_times({"tls.crt": b"junk"}) == (None, None)


def test_the_admin_tls_condition_warns_when_disabled_or_expiring() -> None:
    ok = tls_condition("operator", "t-shard-tls", "")
    assert (ok["status"], ok["reason"]) == ("True", "MutualTLS")
    assert "operator's CA" in ok["message"]
    off = tls_condition("disabled", "", "")
    assert (off["status"], off["reason"]) == ("False", "Disabled") and "open" in off["message"]
    soon = tls_condition("secret", "mine", "the certificate expires at 2027-01-01T00:00:00Z")
    assert (soon["status"], soon["reason"]) == ("False", "CertificateExpiring")
    assert soon["message"].startswith("mine: the certificate expires")


def test_the_operators_certificate_flags_and_round_period() -> None:
    from delayq_operator.handlers import cert_period
    from delayq_operator.main import parse_args

    args = parse_args(["--leaf-lifetime", "20s", "--ca-lifetime", "45s", "--cert-settle", "3s"])
    s = args.cert_settings
    assert (s.leaf_lifetime, s.ca_lifetime, s.settle) == (
        datetime.timedelta(seconds=20),
        datetime.timedelta(seconds=45),
        datetime.timedelta(seconds=3),
    )
    assert cert_period(s) == 1.5 and cert_period(SETTINGS) == 30.0
    assert parse_args([]).cert_settings == SETTINGS
    for bad in (["--leaf-lifetime", "ninety"], ["--cert-settle", "0s"], ["--ca-lifetime", "1d"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
