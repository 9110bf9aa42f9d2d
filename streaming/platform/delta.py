"""Delta's ``DeltaLog`` of a table, read on the driver: its versions, the snapshot this process
holds (its checksum, file list and file-size histogram), its schema and properties, its commit
files. No Spark job where Delta can answer without one.

Internals used: ``org.apache.spark.sql.delta.DeltaLog.forTable`` (the class through
``platform.spark.jclass``) over PySpark's ``SparkSession._jsparkSession``: its
``unsafeVolatileSnapshot``, ``update``, ``store``, ``logPath`` and ``newDeltaHadoopConf``; the
``Snapshot``'s ``checksumOpt``, ``allFiles``, ``schema``, ``metadata`` (its JSON) and
``tableCommitCoordinatorClientOpt``. delta-spark's public Python API
(``delta.tables.DeltaTable``) answers these with a Spark job each (``history``, ``detail``),
which is what this avoids.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from streaming.platform.spark import jclass

__all__ = [
    "FileSizes",
    "HeldFiles",
    "commit_texts",
    "held_file_sizes",
    "held_files",
    "held_size",
    "known_version",
    "latest_version",
    "table_state",
]


def _delta_log(spark: SparkSession, path: str) -> Any:
    """Delta's ``DeltaLog`` of the table at ``path`` (cached by Delta per path, in the JVM)."""
    delta_log = jclass(spark, "org.apache.spark.sql.delta.DeltaLog")
    return delta_log.forTable(spark._jsparkSession, path)


def latest_version(spark: SparkSession, path: str) -> int:
    """The table's latest version, from its log on the driver (no Spark job, unlike
    ``DeltaTable.history``).

    When this process holds the snapshot at version v (as after its own last commit), v's commit
    file is still there and v + 1's is not, v is the latest: two existence checks. Otherwise —
    and always where a commit may be durable before its commit file is (a configured log store
    such as S3 + DynamoDB, a table with a commit coordinator) — Delta's own update, which lists
    the whole ``_delta_log`` folder on a Hadoop file system: every commit the log's retention
    keeps, costing more with every commit (on a local disk ~10 ms at 450 entries, ~50 ms at
    2,700).

    A stopping query interrupts the stream's thread; Delta's update waits on its snapshot lock
    interruptibly and fails there. The existence checks do not wait, so on an interrupted thread
    this takes Delta's update too: the stop lands here as before (``test_clean_stop``)."""
    log = _delta_log(spark, path)
    snapshot = log.unsafeVolatileSnapshot()
    held = int(snapshot.version())
    if held >= 0 and _files_are_commits(log, snapshot, path):
        fs = log.logPath().getFileSystem(log.newDeltaHadoopConf())
        if (
            fs.exists(_commit_file(spark, log, held))
            and not fs.exists(_commit_file(spark, log, held + 1))
            and not jclass(spark, "java.lang.Thread").currentThread().isInterrupted()
        ):
            return held
    empty = jclass(spark, "scala.Option").empty()
    return int(log.update(False, empty, empty).version())


_ATOMIC_LOG_STORES = frozenset(
    f"{package}.{name}"
    for package in ("io.delta.storage", "org.apache.spark.sql.delta.storage")
    for name in (
        "HDFSLogStore",
        "LocalLogStore",
        "S3SingleDriverLogStore",
        "AzureLogStore",
        "GCSLogStore",
    )
)
"""Delta's log stores whose commit file appears whole when the commit happens (a rename, or a
put that is visible at once): a commit is there when its file is."""

_atomic_store: dict[str, bool] = {}
"""Path → whether its log store is one of ``_ATOMIC_LOG_STORES`` (fixed for a path in a session)."""


def _files_are_commits(log: Any, snapshot: Any, path: str) -> bool:
    """Whether the table's commits are exactly its ``_delta_log/<v>.json`` files: its log store
    is one of Delta's own that writes a commit file whole (not, e.g., S3 + DynamoDB, where a
    commit can be in the table before its file is) and it has no commit coordinator (whose
    commits are backfilled into the log later)."""
    known = _atomic_store.get(path)
    if known is None:
        store = log.store()
        if store.getClass().getSimpleName() == "DelegatingLogStore":
            store = store.getDelegate(log.logPath())
        if store.getClass().getSimpleName() == "LogStoreAdaptor":
            store = store.logStoreImpl()
        known = str(store.getClass().getName()) in _ATOMIC_LOG_STORES
        _atomic_store[path] = known
    return known and bool(snapshot.tableCommitCoordinatorClientOpt().isEmpty())


def _commit_file(spark: SparkSession, log: Any, version: int) -> Any:
    """The Hadoop path of the table's commit file of ``version``: ``_delta_log/<v>.json``, v in
    20 digits."""
    return jclass(spark, "org.apache.hadoop.fs.Path")(log.logPath(), f"{version:020d}.json")


def known_version(spark: SparkSession, path: str) -> int:
    """The latest version this process has seen of the table (its own commits included),
    without reading the log (``DeltaLog.unsafeVolatileSnapshot``)."""
    return int(_delta_log(spark, path).unsafeVolatileSnapshot().version())


def _held_snapshot(spark: SparkSession, path: str, version: int) -> Any:
    """Delta's snapshot of the table that this process holds, if it is the one at ``version``
    (as after its own last commit), else None: read without a Spark job or a log listing."""
    snapshot = _delta_log(spark, path).unsafeVolatileSnapshot()
    return snapshot if int(snapshot.version()) == version else None


def held_size(spark: SparkSession, path: str, version: int) -> int | None:
    """The table's size in bytes at ``version`` from the checksum of the snapshot this process
    holds (``Snapshot.checksumOpt``'s ``tableSizeBytes``), when that is the one at ``version``;
    else None."""
    snapshot = _held_snapshot(spark, path, version)
    if snapshot is None:
        return None
    checksum = snapshot.checksumOpt()
    return int(checksum.get().tableSizeBytes()) if checksum.isDefined() else None


@dataclass(frozen=True)
class HeldFiles:
    """The data files of the snapshot this process holds: how many its checksum says (None: it
    has none), and its file list as a frame of Delta's ``AddFile`` (``Snapshot.allFiles``,
    which Delta caches), built when asked for."""

    count: int | None
    frame: Callable[[], DataFrame]


def held_files(spark: SparkSession, path: str, version: int) -> HeldFiles | None:
    """The data files of the table's snapshot at ``version`` if this process holds it (as after
    its own last commit), else None."""
    snapshot = _held_snapshot(spark, path, version)
    if snapshot is None:
        return None
    checksum = snapshot.checksumOpt()
    count = int(checksum.get().numFiles()) if checksum.isDefined() else None
    return HeldFiles(count, lambda: DataFrame(snapshot.allFiles().toDF(), spark))


def _longs(text: str) -> list[int]:
    """The integers of a comma-separated list (as Java or Scala print an array of longs)."""
    return [int(part) for part in text.split(",") if part.strip()]


@dataclass(frozen=True)
class FileSizes:
    """The held snapshot's version, its number of live files and its file-size histogram: bin
    boundaries in bytes and the files in each bin."""

    version: int
    files: int
    boundaries: list[int]
    counts: list[int]


def held_file_sizes(spark: SparkSession, path: str) -> FileSizes | None:
    """The file-size histogram of the snapshot this process holds, from Delta's checksum
    (``checksumOpt``'s ``fileSizeHistogram``): no Spark job, no log listing. None when Delta
    has no checksum (or no histogram) for it."""
    snapshot = _delta_log(spark, path).unsafeVolatileSnapshot()
    version = int(snapshot.version())
    checksum = snapshot.checksumOpt()
    if version < 0 or not checksum.isDefined():
        return None
    histogram = checksum.get().fileSizeHistogram()
    if not histogram.isDefined():
        return None
    bins = histogram.get()
    # Each array as one string: read element by element, py4j makes a call per bin (~95 bins,
    # two arrays, every table, every batch: ~0.2 s a batch in the soak's profile).
    boundaries = _longs(bins.sortedBinBoundaries().mkString(","))
    counts = _longs(jclass(spark, "java.util.Arrays").toString(bins.fileCounts()).strip("[]"))
    return FileSizes(version, int(checksum.get().numFiles()), boundaries, counts)


def table_state(spark: SparkSession, path: str) -> tuple[StructType, dict[str, str]] | None:
    """The schema and table properties of the Delta table at ``path`` from its log on the
    driver (``DeltaLog.update``'s snapshot; ``DeltaTable.detail`` would run a Spark job per
    table); None if there is none."""
    empty = jclass(spark, "scala.Option").empty()
    snapshot = _delta_log(spark, path).update(False, empty, empty)
    if int(snapshot.version()) < 0:
        return None
    schema = StructType.fromJson(json.loads(str(snapshot.schema().json())))
    # The metadata action as its JSON (one call): iterating a Java map from Python ends each
    # iteration on a NoSuchElementException, which PySpark converts at ~40 class lookups each.
    metadata = json.loads(str(snapshot.metadata().json()))["metaData"]
    return schema, {str(k): str(v) for k, v in (metadata.get("configuration") or {}).items()}


def commit_texts(spark: SparkSession, path: str, versions: Iterable[int]) -> list[tuple[int, str]]:
    """The text of each version's commit file, in the order asked, read through the table's
    log store (``LogStore.read``); stops at a commit file that is gone (log clean-up removes
    old ones)."""
    log = _delta_log(spark, path)
    store, conf = log.store(), log.newDeltaHadoopConf()
    out: list[tuple[int, str]] = []
    for version in versions:
        try:
            text = str(store.read(_commit_file(spark, log, version), conf).mkString("\n"))
        except Py4JJavaError:
            break
        out.append((version, text))
    return out
