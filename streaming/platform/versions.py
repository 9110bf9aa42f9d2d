"""The running Spark and Delta versions, for ``core.versions`` to judge at startup.

Spark's from the public ``SparkSession.version``; the delta-spark Python package's from its
installed metadata (``importlib.metadata``); the Delta jar's from the JVM: Delta's
``io.delta.VERSION`` (the package object ``io.delta.package``, through ``SparkContext._jvm``),
None when it cannot be read.
"""

from __future__ import annotations

from importlib import metadata

from pyspark.sql import SparkSession

from streaming.core.versions import Running

__all__ = ["delta_jvm_version", "running"]


def delta_jvm_version(spark: SparkSession) -> str | None:
    """The version of the Delta jar the driver JVM loaded (``io.delta.package.VERSION()``);
    None if it cannot be read (a Delta without it, a class that does not load)."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        return None
    try:
        return str(jvm.io.delta.package.VERSION())
    except Exception:
        return None


def running(spark: SparkSession) -> Running:
    """What runs: Spark, the delta-spark package and the Delta jar."""
    try:
        package = metadata.version("delta-spark")
    except metadata.PackageNotFoundError:
        package = "(not installed)"
    return Running(spark.version, package, delta_jvm_version(spark))
