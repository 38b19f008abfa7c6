"""Fixtures of the RocketMQ client tests: the Java and Go clients built (fetched and compiled
on a cold cache; a missing ``mvn`` or ``javac`` is an error, never a skip), and
drivers against an endpoint or a fresh ``delayq serve`` with a RocketMQ port, killed
at the end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import pytest
from bench.peers.javabuild import JavaBuild

from tests.rocketmq import goclient, javaclient
from tests.rocketmq.javaclient import Drivers
from tests.support.servers import ServerProcess


class _Closing(Protocol):
    def close(self) -> None: ...


D = TypeVar("D", bound=_Closing)


def _collected(new: Callable[[str], D]) -> Iterator[Callable[[str], D]]:
    """A factory of drivers against an endpoint, each closed (its runs killed) at the end."""
    made: list[D] = []

    def make(endpoint: str) -> D:
        made.append(new(endpoint))
        return made[-1]

    yield make
    for drivers in made:
        drivers.close()


def _serving(start_server: Callable[..., ServerProcess]) -> str:
    """The RocketMQ address of a fresh ``delayq serve --rocketmq-listen 127.0.0.1:0``."""
    server = start_server("--rocketmq-listen", "127.0.0.1:0")
    assert server.rocketmq_address, "the ready line names no rocketmq address"
    return server.rocketmq_address


@pytest.fixture(scope="session")
def java_client() -> JavaBuild:
    return javaclient.ensure()


@pytest.fixture
def drivers_for(java_client: JavaBuild, tmp_path: Path) -> Iterator[Callable[[str], Drivers]]:
    yield from _collected(lambda endpoint: Drivers(endpoint, tmp_path / "client-logs", java_client))


@pytest.fixture
def rocketmq(
    start_server: Callable[..., ServerProcess], drivers_for: Callable[[str], Drivers]
) -> Drivers:
    """Java drivers against a fresh ``delayq serve --rocketmq-listen 127.0.0.1:0``."""
    return drivers_for(_serving(start_server))


@pytest.fixture(scope="session")
def go_client() -> Path:
    return goclient.ensure()


@pytest.fixture
def go_drivers_for(go_client: Path, tmp_path: Path) -> Iterator[Callable[[str], goclient.Drivers]]:
    yield from _collected(
        lambda endpoint: goclient.Drivers(endpoint, tmp_path / "client-logs", go_client)
    )


@pytest.fixture
def go(
    start_server: Callable[..., ServerProcess],
    go_drivers_for: Callable[[str], goclient.Drivers],
) -> goclient.Drivers:
    """Go drivers against a fresh ``delayq serve --rocketmq-listen 127.0.0.1:0``."""
    return go_drivers_for(_serving(start_server))
