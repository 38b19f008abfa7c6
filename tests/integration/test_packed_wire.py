"""The packed wire form on real processes: malformed packed fields are refused
INVALID_ARGUMENT naming the field; and across versions, the client of the commit
before the packed form (``OLD``, taken from this repository's history) works with
today's server, and today's client with that commit's server (it meets a server
that ignores the packed fields once, then sends messages)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from delayq import Client
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as pb_grpc
from tests.integration.packedcheck import round_trip
from tests.support.servers import ROOT, ServerProcess

OLD = "98f0ec5"
"""The last commit before the packed form."""


def u32(*values: int) -> bytes:
    return np.array(values, dtype="<u4").tobytes()


@pytest.fixture
def old_service(tmp_path: Path) -> Path:
    """``service/`` of ``OLD``, extracted from git (the clone's history)."""
    done = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", OLD, "service"],
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, (
        f"commit {OLD} is not in this clone's history (a shallow clone?): {done.stderr!r}"
    )
    out = tmp_path / "old"
    with tarfile.open(fileobj=BytesIO(done.stdout)) as tar:
        tar.extractall(out, filter="data")
    return out / "service"


def test_malformed_packed_fields_are_invalid_argument_naming_the_field(
    start_server: Any,
) -> None:
    srv = start_server()
    with grpc.insecure_channel(srv.address) as channel:
        stub = pb_grpc.DelayQueueStub(channel)
        cases = [
            (
                pb.PackedSchedule(topics=["t"], bodies=pb.Blobs(data=b"abc", ends=u32(1, 9))),
                "packed.bodies.ends",
            ),
            (
                pb.PackedSchedule(
                    topics=["t"], bodies=pb.Blobs(data=b"ab", ends=u32(1, 2)), delay_ms=b"\x01"
                ),
                "packed.delay_ms",
            ),
            (
                pb.PackedSchedule(
                    topics=["t"],
                    bodies=pb.Blobs(data=b"ab", ends=u32(1, 2)),
                    topic_index=b"\x00\x00\x07\x00",
                ),
                "packed.topic_index",
            ),
        ]
        for packed, field in cases:
            with pytest.raises(grpc.RpcError) as err:
                stub.Schedule(pb.ScheduleRequest(packed=packed), timeout=5)
            assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, field
            assert field in err.value.details(), err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            stub.Ack(
                pb.AckRequest(
                    topic="t", group="g", packed_receipts=pb.Blobs(data=b"ab", ends=u32(3))
                ),
                timeout=5,
            )
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "packed_receipts.ends" in err.value.details()
        # a well-formed packed batch with a bad message: a per-item error, by index
        bad = pb.PackedSchedule(topics=["t"], bodies=pb.Blobs(data=b"a", ends=u32(1, 1)))
        resp = stub.Schedule(pb.ScheduleRequest(packed=bad), timeout=5)
        assert [e.index for e in resp.packed.errors] == [1]
        assert resp.packed.errors[0].error.field == "messages[1].body"
    assert "Traceback" not in srv.logs()


def test_todays_client_works_with_the_server_before_the_packed_form(
    tmp_path: Path, old_service: Path
) -> None:
    srv = ServerProcess(tmp_path / "data", prefix=["env", f"PYTHONPATH={old_service}"]).start()
    try:
        with Client(srv.address) as client:
            assert client.packed
            out = round_trip(client, "t")
            assert not client.packed, "the client turned to messages"
        assert out["got"] == out["ids"] and out["bodies"] == ["m0", "m1", "m2"]
        assert out["headers"] == ["0", "1", "2"] and out["acks"] == ["acked"] * 3
    finally:
        srv.stop()


OLD_CLIENT = """
import json, sys
sys.path.insert(0, sys.argv[2])
from delayq import Client
from tests.integration.packedcheck import round_trip
with Client(sys.argv[1]) as client:
    print(json.dumps(round_trip(client, "t")))
"""


def test_the_client_before_the_packed_form_works_with_todays_server(
    start_server: Any, old_service: Path
) -> None:
    srv = start_server()
    env = dict(os.environ, PYTHONPATH=str(old_service))
    done = subprocess.run(
        [sys.executable, "-c", OLD_CLIENT, srv.address, str(ROOT)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["got"] == out["ids"] and out["bodies"] == ["m0", "m1", "m2"]
    assert out["headers"] == ["0", "1", "2"] and out["acks"] == ["acked"] * 3
    # the old client's delayq is the old one: its stubs have no packed form
    probe = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert probe.stdout.strip() == "False", probe.stderr


PROBE = """
from delayq.v1 import delayq_pb2 as pb
print("packed" in pb.ScheduleRequest.DESCRIPTOR.fields_by_name)
"""
