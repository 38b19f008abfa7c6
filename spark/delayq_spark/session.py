"""The job's SparkSession: local mode by default (``local[*]``), or any master
Spark takes (``spark://host:port``, ``k8s://https://...``), the same code either
way. Workers run this interpreter (``PYSPARK_PYTHON``, unless set) so they import
delayq; times are UTC; the web UI is off unless asked for; the driver JVM
compiles with C1 only (a quicker start; ``--conf spark.driver.extraJavaOptions=``
replaces it); the ``delayq`` data source is registered.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from .source import DelayqDataSource

__all__ = ["DEFAULT_MASTER", "spark_session"]

DEFAULT_MASTER = "local[*]"


def spark_session(
    master: str = DEFAULT_MASTER, app: str = "delayq", conf: Mapping[str, str] | None = None
) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app)
    defaults = {
        # the driver JVM does little but plan tasks: its JIT's first tier is enough,
        # and its start (class loading, Scala reflection) is ~15 % quicker without C2
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
    }
    if master.startswith("local") or "://127.0.0.1" in master or "://localhost" in master:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        defaults |= {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}
    for key, value in (defaults | dict(conf or {})).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.dataSource.register(DelayqDataSource)
    return spark
