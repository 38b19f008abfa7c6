"""Fixtures of the RocketMQ client tests: the Java client built (fetched and compiled
on a cold cache; a missing ``mvn`` or ``javac`` is an error, never a skip), and
drivers against an endpoint or a fresh ``delayq serve`` with a RocketMQ port, killed
at the end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from bench.peers.javabuild import JavaBuild

from tests.rocketmq import javaclient
from tests.rocketmq.javaclient import Drivers
from tests.support.servers import ServerProcess


@pytest.fixture(scope="session")
def java_client() -> JavaBuild:
    return javaclient.ensure()


@pytest.fixture
def drivers_for(java_client: JavaBuild, tmp_path: Path) -> Iterator[Callable[[str], Drivers]]:
    made: list[Drivers] = []

    def make(endpoint: str) -> Drivers:
        made.append(Drivers(endpoint, tmp_path / "client-logs", java_client))
        return made[-1]

    yield make
    for drivers in made:
        drivers.close()


@pytest.fixture
def rocketmq(
    start_server: Callable[..., ServerProcess], drivers_for: Callable[[str], Drivers]
) -> Drivers:
    """Drivers against a fresh ``delayq serve --rocketmq-listen 127.0.0.1:0``."""
    server = start_server("--rocketmq-listen", "127.0.0.1:0")
    assert server.rocketmq_address, "the ready line names no rocketmq address"
    return drivers_for(server.rocketmq_address)
