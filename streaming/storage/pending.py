"""``_system/pending``: the change-feed records of source transactions that are not applied yet
(``core.changefeed``: an END or a data event still to come, or an earlier commit incomplete).

The table holds the whole waiting set: each batch that changes it overwrites it in one commit,
once per batch (``commits.overwrite``: a replay finds its commit and does not make it again), with
the batch's other system writes. A batch reads it at the version before its own commit — the
version the batch it follows left — so a replayed batch sees exactly what it saw the first time.
The records are read and written by Spark (``inputs.changefeeds``), never held on the driver: it
keeps only their number between batches (``Waiting``), so that a batch after one that left
nothing waiting reads nothing.

The table also keeps one row per feed whose initial snapshot is applied (``SNAPSHOT_MARK``: its
topic is empty, its offset the batch that applied the snapshot's last record), written by that
batch with the waiting set, in the same commit: a restart, or a replay, knows it as the batch
did (``Waiting.snapshots``, ``applied_snapshots``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streaming.storage.commits import BatchCommit, batch_commits, overwrite
from streaming.storage.log import latest_version
from streaming.storage.schemas import PENDING_SCHEMA
from streaming.storage.tables import read_table

__all__ = ["SNAPSHOT_MARK", "Waiting", "applied_snapshots", "write"]

SNAPSHOT_MARK = ""
"""The topic of a feed's "initial snapshot applied" row (no Kafka topic has an empty name)."""


@dataclass
class Waiting:
    """What the last batch this process finished left waiting: how many records (the records
    stay in the table) and which feeds' snapshots are applied."""

    count: int | None = None
    """Records waiting after the last batch this process finished; None: not known (read)."""
    snapshots: dict[str, int] = field(default_factory=dict)
    """Feed → the batch that applied the last record of its initial snapshot, as of the
    records read or finished (``SNAPSHOT_MARK``)."""

    def read(
        self, spark: SparkSession, path: str, query: str, batch_id: int, *, replay_possible: bool
    ) -> DataFrame | None:
        """The waiting records this batch starts from (``PENDING_SCHEMA``), None when none
        wait: read from the table at the version the previous batch left (not one this batch
        wrote, if it is a replay)."""
        if self.count == 0 and not replay_possible:
            return None
        version = latest_version(spark, path)
        if replay_possible:
            own = batch_commits(spark, path, query, batch_id)
            if own:
                version = min(v for v, _ in own.values()) - 1
        table = read_table(spark, path, version)
        if self.count is None or replay_possible:  # else as the last batch left them
            marks = table.where(F.col("topic") == SNAPSHOT_MARK).select("feed", "offset")
            self.snapshots = {row["feed"]: row["offset"] for row in marks.collect()}
        records = table.where(F.col("topic") != SNAPSHOT_MARK)
        if self.count is None or replay_possible:  # what this version holds, not what was held
            self.count = records.count()
        return records if self.count else None

    def finished(self, count: int, snapshots: Mapping[str, int] | None = None) -> None:
        """The batch that left ``count`` records waiting (and ``snapshots``: as before when
        None) ended: the next one starts from them."""
        self.count = count
        if snapshots is not None:
            self.snapshots = dict(snapshots)


def applied_snapshots(spark: SparkSession, path: str) -> dict[str, int]:
    """Feed → the batch that applied its initial snapshot, as the table's latest version has
    it (the job's startup: its metric before any batch)."""
    rows = read_table(spark, path).where(f"topic = '{SNAPSHOT_MARK}'").collect()
    return {row["feed"]: row["offset"] for row in rows}


def write(
    spark: SparkSession,
    path: str,
    records: DataFrame | None,
    commit: BatchCommit,
    snapshots: Mapping[str, int] | None = None,
) -> None:
    """Replace the waiting set with ``records`` (``PENDING_SCHEMA``'s columns; None: none)
    and one row per feed whose initial snapshot is applied (``snapshots``)."""
    session = records.sparkSession if records is not None else spark
    marks = session.createDataFrame(
        [
            (feed, SNAPSHOT_MARK, -1, batch, None, None, commit.at, commit.at)
            for feed, batch in sorted((snapshots or {}).items())
        ],
        PENDING_SCHEMA,
    )
    rows = marks
    if records is not None:
        columns = [F.col(f.name).cast(f.dataType) for f in PENDING_SCHEMA.fields]
        rows = records.select(*columns).unionByName(marks)
    overwrite(rows.coalesce(1), path, commit)
