"""The startup check of the running Spark and Delta versions (``core.versions``,
``platform.versions``) passes on the real session: the one ``build_session`` made for the
tests has already passed it."""

from __future__ import annotations

from importlib import metadata

import pytest
from pyspark.sql import SparkSession

from streaming.core.versions import SUPPORTED_DELTA, SUPPORTED_SPARK, check_platform, release
from streaming.platform.versions import delta_jvm_version, running

pytestmark = pytest.mark.spark


def test_the_running_versions_are_the_supported_ones(spark: SparkSession) -> None:
    now = running(spark)
    assert release(now.spark) == SUPPORTED_SPARK
    assert now.delta_package == metadata.version("delta-spark")
    assert release(now.delta_package) == SUPPORTED_DELTA
    jar = delta_jvm_version(spark)
    assert jar is not None and release(jar) == SUPPORTED_DELTA, jar
    check_platform(now)
