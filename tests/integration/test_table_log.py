"""Reads of a table's Delta log on the driver (``streaming/storage/log.py``) against delta-rs,
the independent reader and here also an independent writer: the latest version when this
process made the last commit and when another writer did, and the file counts upkeep decides
on."""

from __future__ import annotations

from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from streaming.storage.log import held_files, latest_version

pytestmark = pytest.mark.spark


def _append(spark: SparkSession, path: str, first: int) -> None:
    spark.range(first, first + 40, numPartitions=2).write.format("delta").mode("append").save(path)


def test_latest_version_sees_its_own_commits_and_another_writers(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "t")
    _append(spark, path, 0)
    assert latest_version(spark, path) == 0 == deltalake.DeltaTable(path).version()
    _append(spark, path, 100)
    assert latest_version(spark, path) == 1  # its own commit: the snapshot it holds
    for n in range(2):  # another writer's commits, which this process has not seen
        deltalake.write_deltalake(
            path, pa.table({"id": pa.array([500 + n], pa.int64())}), mode="append"
        )
    assert deltalake.DeltaTable(path).version() == 3
    assert latest_version(spark, path) == 3
    assert spark.read.format("delta").load(path).count() == 82
    assert latest_version(spark, str(tmp_path / "none")) == -1  # no table there


def test_held_files_counts_what_delta_rs_sees(spark: SparkSession, tmp_path: Path) -> None:
    """``held_files`` (what upkeep decides on: live files, small ones) read from Delta's
    checksum in one call per histogram array agrees with delta-rs's file list."""
    path = str(tmp_path / "t")
    for n in range(3):
        _append(spark, path, n * 100)
    spark.read.format("delta").load(path).count()  # the snapshot after the last commit
    sizes = deltalake.DeltaTable(path).get_add_actions(flatten=True).column("size_bytes")
    files = len(sizes)
    assert files == 6 and max(sizes.to_pylist()) < 8192
    assert held_files(spark, path, 16 * 2**20) == (2, files, files)
    assert held_files(spark, path, 8192) == (2, files, files)  # all in the first bin [0, 8K)
    assert held_files(spark, path, 8191) == (2, files, 0)  # no bin ends at or below it


def test_latest_version_on_an_interrupted_thread_fails_with_the_interrupt(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A stopping query interrupts the stream's thread and the batch ends at its next wait in
    the JVM. The existence checks of the held version do not wait; on an interrupted thread
    ``latest_version`` takes Delta's update, which does, so the stop still lands there."""
    path = str(tmp_path / "t")
    _append(spark, path, 0)
    assert latest_version(spark, path) == 0
    thread = spark._jvm.java.lang.Thread  # type: ignore[union-attr]
    thread.currentThread().interrupt()  # py4j runs this test's calls on one JVM thread
    try:
        with pytest.raises(Py4JJavaError, match="InterruptedException"):
            latest_version(spark, path)
    finally:
        thread.interrupted()  # clears the flag if the call did not
    assert latest_version(spark, path) == 0
