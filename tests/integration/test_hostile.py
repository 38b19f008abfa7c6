"""A hostile client against a real ``delayq serve`` process: requests that are not
protobuf, strings that are not UTF-8, names and ids far over their bounds. Each
gets INVALID_ARGUMENT (or NOT_FOUND) with a short text that names the method or
field and quotes at most a prefix of what was sent; the log gets one line per
interval with a count, never a traceback; the clients and the CLI do not retry.
(The random version of this: test_fuzz.py.)"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator

import grpc
import pytest

from delayq import Client
from delayq.admin.v1 import admin_pb2 as apb
from delayq.client import InvalidArgument
from delayq.v1 import delayq_pb2 as pb
from tests.integration.hostile import call_raw, first_string_spoiled, has_string, methods
from tests.support.servers import ROOT, ServerProcess

Start = Callable[..., ServerProcess]
BROKEN = b"\x0a\xff\xff\xff\xff\x0f"  # field 1, 4 GiB long, in 6 bytes
HUGE = "x" * 20_000


def status(channel: grpc.Channel, path: str, request: object) -> tuple[grpc.StatusCode, str]:
    """The status of a unary call of ``request`` (a message, or raw bytes)."""
    data = request if isinstance(request, bytes) else request.SerializeToString()  # type: ignore[attr-defined]
    try:
        channel.unary_unary(path)(data, timeout=10)
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


def refusal_lines(srv: ServerProcess) -> list[dict[str, object]]:
    return [r for r in srv.log_records() if r.get("msg") == "refused undecodable requests"]


def test_undecodable_requests_on_every_method_are_invalid_argument_logged_once(
    start_server: Start,
) -> None:
    srv = start_server("--rocketmq-listen", "127.0.0.1:0")
    every = methods()
    spoiled = 0
    with (
        grpc.insecure_channel(srv.address) as ch,
        grpc.insecure_channel(srv.admin_address) as admin,
        grpc.insecure_channel(srv.rocketmq_address) as rocketmq,
    ):
        ports = {"public": ch, "admin": admin, "rocketmq": rocketmq}
        for m in every:
            port = ports[m.port]
            code, details, _ = call_raw(port, m, BROKEN, 10)
            assert (code, details) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{m.name}: request is not a valid {m.package} message",
            )
            if has_string(m.input):
                spoiled += 1
                code, details, _ = call_raw(port, m, first_string_spoiled(m.input), 10)
                assert code is grpc.StatusCode.INVALID_ARGUMENT
                assert "not valid UTF-8" in details, details
        health = status(ch, "/grpc.health.v1.Health/Check", BROKEN)
        assert health == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "Check: request is not a valid grpc.health.v1 message",
        )
        assert status(ch, "/delayq.v1.DelayQueue/GetRoute", pb.GetRouteRequest())[0] is (
            grpc.StatusCode.OK
        ), "still serving"
    lines = refusal_lines(srv)
    assert [line["refused"] for line in lines] == [1], "one line per minute, the first at once"
    with urllib.request.urlopen(f"http://{srv.metrics_address()}/metrics", timeout=10) as r:
        counted = re.search(rb"^delayq_undecodable_requests_total (\S+)$", r.read(), re.M)
    assert counted and float(counted[1]) == len(every) + spoiled + 1  # + the health check
    srv.stop()
    lines = refusal_lines(srv)
    assert [line["refused"] for line in lines] == [1, len(every) + spoiled], "the rest at shutdown"
    assert "Traceback" not in srv.logs() and "Unexpected" not in srv.logs()


def test_invalid_utf8_is_refused_naming_the_field(start_server: Start) -> None:
    srv = start_server()
    req = pb.ScheduleRequest(
        messages=[pb.NewMessage(topic="t", body=b"x"), pb.NewMessage(topic="t", key="QQ")]
    )
    with grpc.insecure_channel(srv.address) as ch:
        code, details = status(
            ch,
            "/delayq.v1.DelayQueue/Schedule",
            req.SerializeToString().replace(b"QQ", b"\xc3\x28"),
        )
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert details == (
        "messages[1].key: not valid UTF-8; the Schedule request is not a valid delayq.v1 message"
    )


def test_names_and_ids_over_their_bounds_get_short_answers(start_server: Start) -> None:
    srv = start_server()
    path = "/delayq.v1.DelayQueue/"
    with grpc.insecure_channel(srv.address) as ch:
        # the case: 20,000 characters echoed in NOT_FOUND broke the trailer
        assert status(ch, path + "Stats", pb.StatsRequest(topic=HUGE)) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "topic: topic is 20000 characters; at most 128",
        )
        code, details = status(ch, path + "Stats", pb.StatsRequest(topic="a" * 128))
        assert code is grpc.StatusCode.NOT_FOUND
        assert details == f"topic: unknown topic {'a' * 32!r}... (128 characters)"
        code, details = status(ch, path + "Stats", pb.StatsRequest(topic="b" * 30 + " " + HUGE))
        assert code is grpc.StatusCode.INVALID_ARGUMENT and len(details) < 100, details
        code, details = status(ch, path + "GetRoute", pb.GetRouteRequest(topic=HUGE))
        assert code is grpc.StatusCode.INVALID_ARGUMENT and "20000 characters" in details
        code, details = status(
            ch, path + "Receive", pb.ReceiveRequest(topic="t", group="g" + "?" * 200)
        )
        assert code is grpc.StatusCode.INVALID_ARGUMENT and len(details) < 200, details
        code, details = status(ch, path + "Lookup", pb.LookupRequest(id=HUGE))
        assert (code, details) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            f"id: malformed message id {'x' * 32!r}... (20000 characters) (empty or too long)",
        )
        resp = ch.unary_unary(path + "Cancel")(
            pb.CancelRequest(ids=["a", HUGE]).SerializeToString(), timeout=10
        )
        errors = [r.error.message for r in pb.CancelResponse.FromString(resp).results]
        assert errors[1].startswith("ids[1]: malformed message id 'xxx") and len(errors[1]) < 150
        resp = ch.unary_unary(path + "Schedule")(
            pb.ScheduleRequest(
                messages=[
                    pb.NewMessage(topic=HUGE, body=b"x"),
                    pb.NewMessage(topic="ok", body=b"x"),
                ]
            ).SerializeToString(),
            timeout=10,
        )
        results = pb.ScheduleResponse.FromString(resp).results
        assert (results[0].error.field, results[0].error.message) == (
            "messages[0].topic",
            "topic: topic is 20000 characters; at most 128",
        )
        assert results[1].id, "the batch's good message is taken"


def test_admin_names_are_bounded_and_refused_before_they_act(start_server: Start) -> None:
    srv = start_server()
    path = "/delayq.admin.v1.ShardAdmin/"
    with grpc.insecure_channel(srv.admin_address) as ch:
        before = apb.StatusResponse.FromString(ch.unary_unary(path + "Status")(b"", timeout=10))
        follow = apb.FollowRequest(epoch=before.epoch + 1, master="h" * 300 + ":1")
        assert status(ch, path + "Follow", follow) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "master: is 302 characters; at most 256",
        )
        probe = apb.StatusRequest(insync=[f"n{i}" for i in range(65)])
        assert status(ch, path + "Status", probe) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "insync: 65 items; at most 64",
        )
        prepare = apb.PrepareRequest(owners=1, job="j" * 257)
        assert status(ch, path + "Prepare", prepare)[0] is grpc.StatusCode.INVALID_ARGUMENT
        after = apb.StatusResponse.FromString(ch.unary_unary(path + "Status")(b"", timeout=10))
    assert (after.role, after.epoch) == ("master", before.epoch), "nothing was done"


def test_clients_and_the_cli_do_not_retry_invalid_argument(start_server: Start) -> None:
    srv = start_server()
    with Client(srv.address) as c:
        started = time.monotonic()
        with pytest.raises(InvalidArgument) as err:  # the client's own, from gRPC's
            c.stats(HUGE)
        assert err.value.status is grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.message == "topic: topic is 20000 characters; at most 128"
        assert isinstance(err.value.__cause__, grpc.RpcError)
        assert time.monotonic() - started < 2, "not retried"
    cli = subprocess.run(
        [sys.executable, "-m", "delayq.cli.main", "stats", "--server", srv.address, HUGE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 2
    assert cli.stderr == (
        "delayq stats: INVALID_ARGUMENT: topic: topic is 20000 characters; at most 128\n"
    )


def test_a_bad_message_inside_a_stream_ends_it_invalid_argument(start_server: Start) -> None:
    """A replica's stream (Replicate): a good hello, then bytes that do not decode."""
    srv = start_server()
    path = "/delayq.admin.v1.ShardAdmin/"
    with grpc.insecure_channel(srv.admin_address) as ch:
        st = apb.StatusResponse.FromString(ch.unary_unary(path + "Status")(b"", timeout=10))
        hello = apb.ReplicaReport(
            name="r1", epoch=st.epoch, written=st.log_end, flushed=st.log_end, epochs=st.epochs
        )

        def reports() -> Iterator[bytes]:
            yield hello.SerializeToString()
            time.sleep(0.6)  # after the first chunk and a heartbeat
            yield BROKEN

        chunks = 0
        with pytest.raises(grpc.RpcError) as err:
            for _ in ch.stream_stream(path + "Replicate")(reports(), timeout=10):
                chunks += 1
    assert chunks >= 1
    assert (err.value.code(), err.value.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Replicate: request is not a valid delayq.admin.v1 message",
    )
    srv.stop()
    assert "Traceback" not in srv.logs() and '"level": "error"' not in srv.logs()


def test_hostile_group_policies_are_refused_naming_the_field(start_server: Start) -> None:
    """NaN, infinite and huge numbers, unknown enum values and names over their
    bounds in SetGroupPolicy: INVALID_ARGUMENT naming the field, short, nothing
    stored; the other group calls bound their names the same way."""
    srv = start_server()
    path = "/delayq.v1.DelayQueue/"

    def set_policy(policy: pb.GroupPolicy, group: str = "g") -> tuple[grpc.StatusCode, str]:
        req = pb.SetGroupPolicyRequest(topic="t", group=group, policy=policy)
        return status(ch, path + "SetGroupPolicy", req)

    with grpc.insecure_channel(srv.address) as ch:
        for policy, field in (
            (pb.GroupPolicy(rate_per_s=float("nan")), "policy.rate_per_s"),
            (pb.GroupPolicy(rate_per_s=float("inf")), "policy.rate_per_s"),
            (pb.GroupPolicy(rate_per_s=1e300), "policy.rate_per_s"),
            (pb.GroupPolicy(burst=-(2**63)), "policy.burst"),
            (pb.GroupPolicy(max_attempts=2**31 - 1), "policy.max_attempts"),
            (pb.GroupPolicy(max_attempts=-(2**31)), "policy.max_attempts"),
            (
                pb.GroupPolicy(backoff=pb.Backoff(kind=1, multiplier=float("nan"))),
                "policy.backoff.multiplier",
            ),
            (  # a fixed backoff's too (NaN != NaN: the shards would "disagree")
                pb.GroupPolicy(backoff=pb.Backoff(kind=0, multiplier=float("nan"))),
                "policy.backoff.multiplier",
            ),
            (
                pb.GroupPolicy(backoff=pb.Backoff(kind=0, multiplier=-5)),
                "policy.backoff.multiplier",
            ),
            (pb.GroupPolicy(backoff=pb.Backoff(kind=-3)), "policy.backoff.kind"),  # type: ignore[arg-type]
        ):
            code, details = set_policy(policy)
            assert code is grpc.StatusCode.INVALID_ARGUMENT, (field, details)
            assert details.startswith(f"{field}: ") and len(details) < 200, details
        code, details = set_policy(pb.GroupPolicy(), group=HUGE)
        assert (code, details) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "group: consumer group is 20000 characters; at most 124",
        )
        for method, req in (
            ("GetGroupPolicy", pb.GetGroupPolicyRequest(topic=HUGE, group="g")),
            ("PauseGroup", pb.PauseGroupRequest(topic="t", group=HUGE)),
            ("ListGroups", pb.ListGroupsRequest(topic=HUGE)),
            ("Nack", pb.NackRequest(topic="t", group=HUGE, receipts=["r"])),
        ):
            code, details = status(ch, path + method, req)
            assert code is grpc.StatusCode.INVALID_ARGUMENT and len(details) < 100, details
        listed = pb.ListGroupsResponse.FromString(
            ch.unary_unary(path + "ListGroups")(b"", timeout=10)
        )
        assert list(listed.groups) == [], "nothing was stored"
    assert "Traceback" not in srv.logs()
