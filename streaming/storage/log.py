"""Reads of a Delta table's log on the driver: versions, sizes, file statistics, recent commits.

Each answers from Delta's ``DeltaLog`` in the JVM (cached per path) without a Spark job where it
can, which is what keeps a small batch's cost in its writes rather than its bookkeeping.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    StructType,
)

from streaming.core.upkeep import small_files
from streaming.storage.tables import read_table


def _delta_log(spark: SparkSession, path: str) -> Any:
    """Delta's ``DeltaLog`` of the table at ``path`` (cached by Delta per path, in the JVM)."""
    jvm = spark._jvm
    assert jvm is not None
    return jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)


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
    jvm = spark._jvm
    assert jvm is not None
    log = _delta_log(spark, path)
    snapshot = log.unsafeVolatileSnapshot()
    held = int(snapshot.version())
    if held >= 0 and _files_are_commits(log, snapshot, path):
        fs = log.logPath().getFileSystem(log.newDeltaHadoopConf())
        if (
            fs.exists(_commit_file(spark, log, held))
            and not fs.exists(_commit_file(spark, log, held + 1))
            and not jvm.java.lang.Thread.currentThread().isInterrupted()
        ):
            return held
    empty = jvm.scala.Option.empty()
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
    jvm = spark._jvm
    assert jvm is not None
    return jvm.org.apache.hadoop.fs.Path(log.logPath(), f"{version:020d}.json")


def known_version(spark: SparkSession, path: str) -> int:
    """The latest version this process has seen of the table (its own commits included),
    without reading the log: for metrics, never for deciding what to read."""
    return int(_delta_log(spark, path).unsafeVolatileSnapshot().version())


def _held_snapshot(spark: SparkSession, path: str, version: int) -> Any:
    """Delta's snapshot of the table that this process holds, if it is the one at ``version``
    (as after its own last commit), else None: read without a Spark job or a log listing."""
    snapshot = _delta_log(spark, path).unsafeVolatileSnapshot()
    return snapshot if int(snapshot.version()) == version else None


def known_size(spark: SparkSession, path: str, version: int) -> int | None:
    """The table's size in bytes at ``version`` if Delta knows it without a Spark job — from the
    checksum of the snapshot this process holds, when that is the one at ``version`` — else
    None."""
    snapshot = _held_snapshot(spark, path, version)
    if snapshot is None:
        return None
    checksum = snapshot.checksumOpt()
    return int(checksum.get().tableSizeBytes()) if checksum.isDefined() else None


STATS_PREFIX = 32
"""Delta keeps string statistics of up to this many characters (``dataSkippingStringPrefixLength``):
longer ones are cut, the maximum then followed by a marker; such bounds are not used here."""


def id_ranges(spark: SparkSession, path: str, version: int) -> list[tuple[str, str]] | None:
    """Each data file's ``[min, max]`` of ``id`` at ``version``, from Delta's statistics — when
    this process holds the snapshot at that version (as after its own last commit), it has two
    files or more, every file has statistics and none is cut short; else None. One Spark job
    over the snapshot's file list (which Delta caches, and the MERGE that follows reuses), none
    when the checksum says there are fewer than two files."""
    snapshot = _held_snapshot(spark, path, version)
    if snapshot is None:
        return None
    checksum = snapshot.checksumOpt()
    if checksum.isDefined() and int(checksum.get().numFiles()) < 2:
        return None  # no file to tell from another: no job
    files = DataFrame(snapshot.allFiles().toDF(), spark)
    stats = F.from_json("stats", "minValues struct<id: string>, maxValues struct<id: string>")
    bounds = [
        (r["low"], r["high"])
        for r in files.select(stats.alias("s"))
        .select(F.col("s.minValues.id").alias("low"), F.col("s.maxValues.id").alias("high"))
        .collect()
    ]
    usable = all(
        low is not None and high is not None and len(high) < STATS_PREFIX for low, high in bounds
    )
    return bounds if usable else None


def holds_no_rows(spark: SparkSession, path: str, version: int) -> bool:
    """Whether the table has no data files at ``version``: from Delta's checksum when this
    process holds that snapshot (no job), else by looking for one row (one job)."""
    size = known_size(spark, path, version)
    if size is not None:
        return size == 0
    return read_table(spark, path, version).isEmpty()


def table_state(spark: SparkSession, path: str) -> tuple[StructType, dict[str, str]] | None:
    """The schema and table properties of the Delta table at ``path`` from its log on the
    driver (``DeltaTable.detail`` would run a Spark job per table); None if there is none."""
    jvm = spark._jvm
    assert jvm is not None
    empty = jvm.scala.Option.empty()
    snapshot = _delta_log(spark, path).update(False, empty, empty)
    if int(snapshot.version()) < 0:
        return None
    schema = StructType.fromJson(json.loads(str(snapshot.schema().json())))
    configuration = jvm.scala.jdk.javaapi.CollectionConverters.asJava(
        snapshot.metadata().configuration()
    )
    return schema, {str(k): str(v) for k, v in configuration.items()}


def recent_commits(spark: SparkSession, path: str, count: int) -> list[tuple[int, str | None]]:
    """(version, userMetadata) of the table's latest ``count`` commits, newest first, read
    from the commit files on the driver (no Spark job). Stops early at a commit file that is
    gone (log clean-up removes old ones)."""
    latest = latest_version(spark, path)
    versions = range(latest, max(latest - count, -1), -1)
    return [(v, _string(info, "userMetadata")) for v, info in _commit_infos(spark, path, versions)]


def commit_operations(spark: SparkSession, path: str, first: int, last: int) -> list[str | None]:
    """Delta's operation names (``MERGE``, ``OPTIMIZE``, ...) of the commits ``first`` to
    ``last``, read on the driver; None for a commit file without one or gone."""
    found = dict(_commit_infos(spark, path, range(first, last + 1)))
    return [_string(found.get(v), "operation") for v in range(first, last + 1)]


def _commit_infos(
    spark: SparkSession, path: str, versions: Iterable[int]
) -> list[tuple[int, dict[str, Any] | None]]:
    """The ``commitInfo`` action of each version's commit file, in the order asked; stops at a
    commit file that is gone (log clean-up removes old ones)."""
    log = _delta_log(spark, path)
    store, conf = log.store(), log.newDeltaHadoopConf()
    out: list[tuple[int, dict[str, Any] | None]] = []
    for version in versions:
        try:
            text = str(store.read(_commit_file(spark, log, version), conf).mkString("\n"))
        except Py4JJavaError:
            break
        out.append((version, _commit_info(text)))
    return out


def _commit_info(commit: str) -> dict[str, Any] | None:
    """A commit file's ``commitInfo`` action (None: there is none)."""
    for line in commit.splitlines():
        if '"commitInfo"' not in line:
            continue
        info = json.loads(line).get("commitInfo")
        return info if isinstance(info, dict) else None
    return None


def _string(info: dict[str, Any] | None, key: str) -> str | None:
    value = info.get(key) if info is not None else None
    return value if isinstance(value, str) else None


def _longs(text: str) -> list[int]:
    """The integers of a comma-separated list (as Java or Scala print an array of longs)."""
    return [int(part) for part in text.split(",") if part.strip()]


def held_files(spark: SparkSession, path: str, small_bytes: int) -> tuple[int, int, int] | None:
    """(version, live files, files under ``small_bytes``) of the table's snapshot this process
    holds (as after its own last commit), from Delta's checksum and its file-size histogram:
    no Spark job, no log listing. None when Delta has no checksum (or no histogram) for it."""
    snapshot = _delta_log(spark, path).unsafeVolatileSnapshot()
    version = int(snapshot.version())
    checksum = snapshot.checksumOpt()
    if version < 0 or not checksum.isDefined():
        return None
    histogram = checksum.get().fileSizeHistogram()
    if not histogram.isDefined():
        return None
    bins = histogram.get()
    jvm = spark._jvm
    assert jvm is not None
    # Each array as one string: read element by element, py4j makes a call per bin (~95 bins,
    # two arrays, every table, every batch: ~0.2 s a batch in the soak's profile).
    boundaries = _longs(bins.sortedBinBoundaries().mkString(","))
    counts = _longs(jvm.java.util.Arrays.toString(bins.fileCounts()).strip("[]"))
    small = small_files(boundaries, counts, small_bytes)
    return version, int(checksum.get().numFiles()), small


def last_operations(
    spark: SparkSession, path: str, names: Iterable[str], window: int
) -> dict[str, tuple[int, int]]:
    """Operation name → (version, commit timestamp in ms) of the latest commit of each of
    ``names`` among the table's last ``window`` commits, read on the driver (no Spark job)."""
    wanted = set(names)
    latest = latest_version(spark, path)
    found: dict[str, tuple[int, int]] = {}
    for version, info in _commit_infos(spark, path, range(latest, max(latest - window, -1), -1)):
        operation = _string(info, "operation")
        if operation in wanted and operation not in found and info is not None:
            found[operation] = (version, int(info.get("timestamp") or 0))
            if len(found) == len(wanted):
                break
    return found
