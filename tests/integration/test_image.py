"""The project's image (Dockerfile) as users run it, through testcontainers.

Needs a Docker engine; without one it skips, saying so. Its twin against a real
local process is ``test_server.py::test_messages_arrive_on_time_never_early``
(same command line, same client calls), which always runs.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from delayq import Client
from tests.support.servers import ROOT


def _probe_socket() -> None:
    """Connect to the engine's unix socket (DOCKER_HOST's, or the default) and let go:
    raises when nothing listens. The Docker SDK leaks its socket when it finds no
    engine, so it is only asked once something answers here."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://"):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(host.removeprefix("unix://"))


def _require_engine() -> None:
    """Skip, saying why, unless a Docker engine answers a ping."""
    client: Any = None
    try:
        _probe_socket()
        import docker

        client = docker.from_env(timeout=5)
        client.ping()
    except Exception as e:  # no socket, no daemon, no permission: all mean "no engine"
        pytest.skip(
            f"no Docker engine answers ({type(e).__name__}); the image scenario's twin "
            "test_server.py::test_messages_arrive_on_time_never_early runs against a local process"
        )
    finally:
        if client is not None:
            client.close()


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    _require_engine()
    from testcontainers.core.image import DockerImage

    with DockerImage(path=str(ROOT), tag="delayq:test") as built:
        yield str(built)


def test_image_serves_and_delivers_on_time(image: str) -> None:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    with DockerContainer(image).with_exposed_ports(7420) as container:
        wait_for_logs(container, "serving on", timeout=60)
        address = f"{container.get_container_host_ip()}:{container.get_exposed_port(7420)}"
        with Client(address) as c:
            sent = c.schedule("t", b"hello", delay=0.3).id
            deadline = time.time() + 5
            got = []
            while time.time() < deadline and not got:
                got = c.receive("t", "g", max_messages=10, wait_s=0.5)
        assert [m.id for m in got] == [sent]
        assert got[0].delivered_at_ms >= got[0].deliver_at_ms


def test_image_runs_the_operator_entry_point(image: str) -> None:
    from testcontainers.core.container import DockerContainer

    with DockerContainer(image).with_command("--help") as container:
        container.get_wrapped_container().wait(timeout=30)
        assert b"serve" in container.get_wrapped_container().logs()
    with (
        DockerContainer(image)
        .with_kwargs(entrypoint="delayq-operator")
        .with_command("--help") as container
    ):
        container.get_wrapped_container().wait(timeout=30)
        assert b"DelayTopic" in container.get_wrapped_container().logs()
    with (
        DockerContainer(image)
        .with_kwargs(entrypoint="delayq-spark")
        .with_command("rebalance --help") as container
    ):  # the operator's rebalance Job runs it from this image
        container.get_wrapped_container().wait(timeout=60)
        assert b"--shards" in container.get_wrapped_container().logs()
