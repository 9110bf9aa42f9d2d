"""Deleted keys kept on the driver between micro-batches: each tombstones table as of a version.

A batch folded on the driver needs, for each key it changes that is not live, the key's latest
tombstone (its version and watermark). Reading them from the tombstones table costs Spark jobs
every batch — Delta rebuilds the table's state for its new version, lists the files the keys may
be in, then scans them — although the only rows added since the last batch are the ones this
sink appended itself. So a small tombstones table is read whole once, and then kept up to date
with the rows the sink appends, as long as the table's version says nobody else wrote it.

The entry of a table is only used at exactly the version it holds: any other commit (another
writer, a RESTORE of a failed segment, ``cdc maintain``) moves the table to a version the entry
does not have, and the table is read again (or by keys, if it has grown too large to hold).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streaming.core.fold import watermark_key
from streaming.storage.log import known_size, latest_version
from streaming.storage.tables import read_table

__all__ = ["MAX_BYTES", "PRUNED_FILE_BYTES", "DeletedKeys", "Tombstone", "later", "prune"]

Tombstone = tuple[int, dict[str, Any] | None]
"""A deleted key's tombstone version and the watermark of its delete (None without one)."""

MAX_BYTES = 8 * 1024 * 1024
"""Tombstones tables up to this size (Parquet bytes, from Delta's checksum) are held whole: a few
hundred thousand deleted keys, some 100 MB of driver memory per table at most (an estimate)."""


@dataclass
class DeletedKeys:
    """Tombstones tables held on the driver, each as of one version: path → (version, id →
    tombstone). Shared by the threads that apply a wave's tables (one table each)."""

    max_bytes: int = MAX_BYTES
    _tables: dict[str, tuple[int, dict[str, Tombstone]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def of_keys(
        self, spark: SparkSession, path: str, version: int, keys: Iterable[str], watermark: bool
    ) -> dict[str, Tombstone] | None:
        """The tombstones of ``keys`` in the table at ``path`` as of ``version``; None when the
        table is too large to hold (the caller reads the keys' rows itself)."""
        with self._lock:
            entry = self._tables.get(path)
        if entry is None or entry[0] != version:
            size = known_size(spark, path, version)
            if size is None or size > self.max_bytes:
                self.forget(path)
                return None
            # An empty table (its checksum says 0 bytes, as most are) is held without a job.
            entry = (version, _read(spark, path, version, watermark) if size else {})
            with self._lock:
                self._tables[path] = entry
        held = entry[1]
        return {key: held[key] for key in keys if key in held}

    def appended(
        self, path: str, before: int, after: int, rows: Iterable[Mapping[str, Any]]
    ) -> None:
        """The sink appended ``rows`` (``id``, ``version``, ``watermark``) to the table, moving it
        from version ``before`` to ``after``: an entry held at ``before`` takes them in if that
        append is the only commit in between; otherwise it is dropped."""
        with self._lock:
            entry = self._tables.pop(path, None)
            if entry is None or entry[0] != before or after != before + 1:
                return
            held = entry[1]
            for row in rows:
                _keep_latest(held, row["id"], row["version"], row.get("watermark"))
            self._tables[path] = (after, held)

    def moved(self, path: str, before: int, after: int) -> None:
        """Commits that change no row (upkeep's OPTIMIZE, VACUUM) moved the table from
        ``before`` to ``after``: an entry held at ``before`` holds at ``after``."""
        with self._lock:
            entry = self._tables.get(path)
            if entry is not None and entry[0] == before:
                self._tables[path] = (after, entry[1])

    def forget(self, path: str) -> None:
        with self._lock:
            self._tables.pop(path, None)


def later(a: Tombstone, b: Tombstone) -> bool:
    """Whether tombstone ``a`` supersedes ``b``: a key's tombstone is its row with the largest
    version, on a tie the largest watermark (a delete of a key not live moves the watermark of
    the key's tombstone forward at the same version: ``core.fold``). NULL is the smallest."""

    def order(t: Tombstone) -> tuple[Any, ...]:
        version, mark = t
        return (version, mark is not None, watermark_key(tuple(mark.values())) if mark else ())

    return order(a) > order(b)


def _keep_latest(
    held: dict[str, Tombstone], key: str, version: int, mark: dict[str, Any] | None
) -> None:
    if key not in held or later((version, mark), held[key]):
        held[key] = (version, mark)


def _read(spark: SparkSession, path: str, version: int, watermark: bool) -> dict[str, Tombstone]:
    table = read_table(spark, path, version)
    columns = [F.col("id"), F.col("version")]
    if watermark:
        columns.append(F.col("watermark"))
    held: dict[str, Tombstone] = {}
    for row in table.select(*columns).collect():
        mark = row["watermark"] if watermark else None
        _keep_latest(held, row["id"], row["version"], mark.asDict(recursive=True) if mark else None)
    return held


def prune(spark: SparkSession, path: str, current: str) -> tuple[int, int]:
    """Drop the tombstones no reader needs (the job's upkeep, before it compacts the table): a
    key's rows below its largest version (its tombstone is a row of the largest), and every row
    of a key that is live again (the current table at ``current`` wins). Rows at a key's largest
    version all stay (the largest watermark among them is its tombstone's). The rows left are
    written back in one overwrite, in one file up to ``PRUNED_FILE_BYTES`` — a commit that
    changes rows: the held copy of the table is read again. (rows before, rows after); no commit
    when nothing is dropped."""
    table = read_table(spark, path)
    latest = table.groupBy("id").agg(F.max("version").alias("__latest"))
    live = read_table(spark, current).select("id")
    kept = (
        table.join(latest, "id")
        .where(F.col("version") == F.col("__latest"))
        .join(live, "id", "left_anti")
        .select(*table.columns)
    )
    before, after = table.count(), kept.count()
    if after == before:
        return before, after
    size = known_size(spark, path, latest_version(spark, path))
    if size is not None and size <= PRUNED_FILE_BYTES:
        kept = kept.coalesce(1)
    kept.write.format("delta").mode("overwrite").save(path)
    return before, after


PRUNED_FILE_BYTES = 128 * 2**20
"""A pruned tombstones table up to this size is written as one file."""
