"""Spark tests: one local SparkSession for the session's tests (``local[2]``, two
shuffle partitions, UI off, UTC), one Spark standalone master + worker for those
that run a job on a cluster, and a local delayq cluster with a short wheel window,
so that far-future messages roll in test time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from delayq_spark.session import spark_session
from tests.spark.standalone import StandaloneSpark
from tests.support.cluster import LocalCluster

ROLLING_ENV = {"DELAYQ_WINDOW": "2s", "DELAYQ_PRECISION": "100ms", "DELAYQ_FLUSH_INTERVAL": "100ms"}
"""Nodes' settings (their env twins): a 2 s window, so messages due later roll."""


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[2]", "delayq-tests", {"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def standalone_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneSpark]:
    """A Spark master and worker on loopback, shared by the tests that use it
    (they run in one xdist worker: ``tests/support/scheduling.py``)."""
    with StandaloneSpark(tmp_path_factory.mktemp("spark-standalone")) as cluster:
        yield cluster


@pytest.fixture
def rolling_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    """Two shards of real ``delayq serve`` processes whose wheel window is 2 s."""
    for key, value in ROLLING_ENV.items():
        monkeypatch.setenv(key, value)
    with LocalCluster(tmp_path / "cluster", shards=2) as c:
        yield c
