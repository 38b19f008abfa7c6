"""A full disk under a real ``delayq serve``: its data directory is a small tmpfs,
mounted in a private mount namespace (``unshare``) and filled by the server's own
writes, with a ballast file taking most of it. Schedules are then refused with
RESOURCE_EXHAUSTED naming the disk, the server stays up and logs the trouble
without a flood, and once the ballast is deleted (through ``/proc/PID/root``)
every acknowledged message is delivered. The engine-level twin,
``tests/engine/test_disk_full.py``, runs wherever namespaces are not allowed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from delayq import Client
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc
from tests.support.servers import EPHEMERAL, ROOT, ServerProcess

MOUNT = 'mount -t tmpfs -o size="$1" tmpfs "$2" && head -c "$3" /dev/zero > "$2/ballast"'


def _namespace() -> list[str]:
    """A command prefix giving the command a private mount namespace in which it may
    mount: plain ``unshare`` as root, with a user namespace mapped to root else."""
    if os.geteuid() == 0:
        return ["unshare", "--mount"]
    return ["unshare", "--user", "--map-root-user", "--mount"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Callable[[str, str], list[str]]:
    """``make(size, ballast)``: a prefix that runs a command on a tmpfs of ``size``
    mounted at ``tmp_path/mnt`` and holding ``mnt/ballast`` of ``ballast`` bytes.
    Skips (naming the twin) where this kernel or sandbox forbids the namespace."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    probe = subprocess.run(
        [*_namespace(), "sh", "-c", MOUNT, "sh", "1m", str(mnt), "1k"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(
            f"no private mount namespace here ({probe.stderr.strip()}); "
            "tests/engine/test_disk_full.py covers the same faults"
        )

    def make(size: str, ballast: str) -> list[str]:
        script = f'{MOUNT} && shift 3 && exec "$@"'
        return [*_namespace(), "sh", "-c", script, "sh", size, str(mnt), ballast]

    return make


def _schedule(stub: delayq_pb2_grpc.DelayQueueStub, n: int, delay_ms: int) -> list[str]:
    request = pb.ScheduleRequest(
        messages=[pb.NewMessage(topic="t", body=bytes(1000), delay_ms=delay_ms)] * n
    )
    return [r.id for r in stub.Schedule(request, timeout=10).results]


def test_a_full_disk_refuses_schedules_clearly_and_loses_nothing_acknowledged(
    tmp_path: Path, small_disk: Callable[[str, str], list[str]]
) -> None:
    # 64 MiB, of which the ballast takes 40 and the files made at start about 11
    srv = ServerProcess(tmp_path / "mnt" / "data", prefix=small_disk("64m", str(40 << 20)))
    srv.start()
    assert srv.proc is not None
    try:
        with grpc.insecure_channel(srv.address) as channel:
            stub = delayq_pb2_grpc.DelayQueueStub(channel)
            # due soon: most likely while the disk is full, so their release waits too
            acked: list[str] = _schedule(stub, 100, 1500)
            with pytest.raises(grpc.RpcError) as refused:
                for _ in range(1000):  # ~13 MiB left: full long before 100 MB
                    acked += _schedule(stub, 100, 6000)
            err = refused.value
            assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, err
            assert "no space left to append to the commitlog" in err.details(), err.details()
            assert ("retry-after-ms", "1000") in tuple(err.trailing_metadata() or ())
            assert len(acked) > 1000

            time.sleep(2)  # full for a while: the stages keep failing meanwhile
            assert srv.proc.poll() is None, "the server stays up"
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            assert stub.Lookup(pb.LookupRequest(id=acked[-1]), timeout=10).topic == "t"
            with urllib.request.urlopen(f"http://{srv.metrics_address()}/metrics") as resp:
                metrics = resp.read().decode()
            assert 'delayq_congestion_rejections_total{reason="disk"} 100.0' in metrics

            os.unlink(f"/proc/{srv.proc.pid}/root{tmp_path}/mnt/ballast")  # space again
            acked += _schedule(stub, 100, 1000)

        with Client(srv.address) as client:
            seen: set[str] = set()
            deadline = time.monotonic() + 60
            while not set(acked) <= seen and time.monotonic() < deadline:
                got = client.receive("t", "g", max_messages=1000, wait_s=1, auto_ack=True)
                seen.update(m.id for m in got)
        assert set(acked) <= seen, f"{len(set(acked) - seen)} acknowledged messages lost"
        assert srv.stop() == 0
    finally:
        if srv.proc is not None and srv.proc.poll() is None:
            srv.stop(9)
    said = [str(r.get("msg", "")) for r in srv.log_records()]
    failed = [m.removesuffix(" failed; retrying") for m in said if m.endswith("failed; retrying")]
    assert failed, "the trouble is logged (the checkpoint cannot write, at least)"
    assert len(failed) + sum("still failing" in m for m in said) <= 10, "no flood of errors"
    for what in failed:  # each run of failures ends with a line saying so
        assert any(m.startswith(f"{what} recovered after") for m in said), said


def test_serve_on_a_disk_too_small_to_start_says_so_in_one_line(
    small_disk: Callable[[str, str], list[str]], tmp_path: Path
) -> None:
    data = tmp_path / "mnt" / "data"
    cmd = [sys.executable, "-m", "delayq.cli.main", "serve", "--data-dir", str(data)]
    got = subprocess.run(
        [*small_disk("4m", "1k"), *cmd, *EPHEMERAL],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert got.returncode == 2, got.stderr
    assert "Traceback" not in got.stderr, got.stderr
    assert got.stderr.strip().splitlines()[-1] == (
        f"delayq serve: data directory {data} cannot be used: No space left on device; "
        "free space or grow the volume"
    )
