"""Reads of a Delta table's log on the driver: versions, sizes, file statistics, recent commits.

Each answers from Delta's ``DeltaLog`` in the JVM (cached per path; read in ``platform.delta``)
without a Spark job where it can, which is what keeps a small batch's cost in its writes rather
than its bookkeeping.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    StructType,
)

from streaming.core.upkeep import small_files
from streaming.platform import delta
from streaming.storage.tables import read_table

__all__ = [
    "STATS_PREFIX",
    "commit_operations",
    "held_files",
    "holds_no_rows",
    "id_ranges",
    "known_size",
    "known_version",
    "last_operations",
    "latest_version",
    "recent_commits",
    "table_state",
]


def latest_version(spark: SparkSession, path: str) -> int:
    """The table's latest version, from its log on the driver (no Spark job, unlike
    ``DeltaTable.history``): ``platform.delta.latest_version``."""
    return delta.latest_version(spark, path)


def known_version(spark: SparkSession, path: str) -> int:
    """The latest version this process has seen of the table (its own commits included),
    without reading the log: for metrics, never for deciding what to read."""
    return delta.known_version(spark, path)


def known_size(spark: SparkSession, path: str, version: int) -> int | None:
    """The table's size in bytes at ``version`` if Delta knows it without a Spark job — from the
    checksum of the snapshot this process holds, when that is the one at ``version`` — else
    None."""
    return delta.held_size(spark, path, version)


STATS_PREFIX = 32
"""Delta keeps string statistics of up to this many characters (``dataSkippingStringPrefixLength``):
longer ones are cut, the maximum then followed by a marker; such bounds are not used here."""


def id_ranges(spark: SparkSession, path: str, version: int) -> list[tuple[str, str]] | None:
    """Each data file's ``[min, max]`` of ``id`` at ``version``, from Delta's statistics — when
    this process holds the snapshot at that version (as after its own last commit), it has two
    files or more, every file has statistics and none is cut short; else None. One Spark job
    over the snapshot's file list (which Delta caches, and the MERGE that follows reuses), none
    when the checksum says there are fewer than two files."""
    held = delta.held_files(spark, path, version)
    if held is None:
        return None
    if held.count is not None and held.count < 2:
        return None  # no file to tell from another: no job
    files = held.frame()
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
    return delta.table_state(spark, path)


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
    return [(v, _commit_info(text)) for v, text in delta.commit_texts(spark, path, versions)]


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


def held_files(spark: SparkSession, path: str, small_bytes: int) -> tuple[int, int, int] | None:
    """(version, live files, files under ``small_bytes``) of the table's snapshot this process
    holds (as after its own last commit), from Delta's checksum and its file-size histogram:
    no Spark job, no log listing. None when Delta has no checksum (or no histogram) for it."""
    sizes = delta.held_file_sizes(spark, path)
    if sizes is None:
        return None
    return sizes.version, sizes.files, small_files(sizes.boundaries, sizes.counts, small_bytes)


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
