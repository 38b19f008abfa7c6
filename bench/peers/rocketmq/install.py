"""The RocketMQ peer's files, made on first use and cached outside the repository
(``bench.peers.javabuild``):

    $DELAYQ_BENCH_CACHE (default ~/.cache/delayq-bench)/rocketmq-<version>/
        lib/*.jar          pom.xml's dependencies (broker, name server, client, admin
                           tools, gRPC proxy), from Maven Central by
                           ``mvn dependency:copy-dependencies`` (~100 MB)
        classes/Driver.class   Driver.java, compiled by javac against lib/
        stamp              the hash of pom.xml and Driver.java the cache was made from

A cache whose stamp differs is made again (the jars only when pom.xml changed).
Needs ``mvn`` and a JDK 17 (``javac``); says how to get them when they are missing.
"""

from __future__ import annotations

from pathlib import Path

from bench.peers import javabuild
from bench.peers.javabuild import JavaBuild as Peer

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
DRIVER = HERE / "Driver.java"

__all__ = ["Peer", "ensure", "version"]


def version() -> str:
    """The RocketMQ version pom.xml pins."""
    return javabuild.pom_property(POM, "rocketmq.version")


def ensure() -> Peer:
    """The peer's jars and driver, fetched and compiled if the cache lacks them."""
    return javabuild.ensure(
        f"rocketmq-{version()}",
        POM,
        [DRIVER],
        expect="rocketmq-broker-*.jar",
        size="~100 MB",
    )


if __name__ == "__main__":
    print(ensure().classpath)
