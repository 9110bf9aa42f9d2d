"""``_system/pending``: the change-feed records of source transactions that are not applied yet
(``core.changefeed``: an END or a data event still to come, or an earlier commit incomplete).

The table holds the whole waiting set: each batch that changes it overwrites it in one commit,
once per batch (``commits.overwrite``: a replay finds its commit and does not make it again), with
the batch's other system writes. A batch reads it at the version before its own commit — the
version the batch it follows left — so a replayed batch sees exactly what it saw the first time.
Between batches of one process the set is held on the driver (``Waiting``): only a process's
first batch, or a batch that may be a replay, reads the table.

The table also keeps one row per feed whose initial snapshot is applied (``SNAPSHOT_MARK``: its
topic is empty, its offset the batch that applied the snapshot's last record), written by that
batch with the waiting set, in the same commit: a restart, or a replay, knows it as the batch
did (``Waiting.snapshots``, ``applied_snapshots``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from streaming.core.changefeed import Received, utc
from streaming.storage.commits import BatchCommit, batch_commits, overwrite
from streaming.storage.log import latest_version
from streaming.storage.schemas import PENDING_SCHEMA
from streaming.storage.tables import read_table

SNAPSHOT_MARK = ""
"""The topic of a feed's "initial snapshot applied" row (no Kafka topic has an empty name)."""


@dataclass
class Waiting:
    """The waiting records per feed, as the last batch this process finished left them."""

    records: dict[str, list[Received]] | None = None
    snapshots: dict[str, int] = field(default_factory=dict)
    """Feed → the batch that applied the last record of its initial snapshot, as of the
    records read or finished (``SNAPSHOT_MARK``)."""

    def read(
        self, spark: SparkSession, path: str, query: str, batch_id: int, *, replay_possible: bool
    ) -> dict[str, list[Received]]:
        """The waiting records this batch starts from."""
        if self.records is not None and not replay_possible:
            return self.records
        version = latest_version(spark, path)
        if replay_possible:
            own = batch_commits(spark, path, query, batch_id)
            if own:
                version = min(v for v, _ in own.values()) - 1
        found: dict[str, list[Received]] = {}
        snapshots: dict[str, int] = {}
        for row in read_table(spark, path, version).collect():
            if row["topic"] == SNAPSHOT_MARK:
                snapshots[row["feed"]] = row["offset"]
                continue
            found.setdefault(row["feed"], []).append(
                Received(
                    row["topic"],
                    row["partition"],
                    row["offset"],
                    None if row["key"] is None else bytes(row["key"]),
                    None if row["value"] is None else bytes(row["value"]),
                    utc(row["timestamp"]),
                    utc(row["received_at"]),
                )
            )
        self.snapshots = snapshots
        return found

    def finished(
        self, records: dict[str, list[Received]], snapshots: Mapping[str, int] | None = None
    ) -> None:
        """The batch that wrote ``records`` (and ``snapshots``: as before when None) ended: the
        next one starts from them."""
        self.records = records
        if snapshots is not None:
            self.snapshots = dict(snapshots)

    def forget(self) -> None:
        self.records = None


def applied_snapshots(spark: SparkSession, path: str) -> dict[str, int]:
    """Feed → the batch that applied its initial snapshot, as the table's latest version has
    it (the job's startup: its metric before any batch)."""
    rows = read_table(spark, path).where(f"topic = '{SNAPSHOT_MARK}'").collect()
    return {row["feed"]: row["offset"] for row in rows}


def write(
    spark: SparkSession,
    path: str,
    before: dict[str, list[Received]],
    after: dict[str, list[Received]],
    commit: BatchCommit,
    snapshots: tuple[Mapping[str, int], Mapping[str, int]] = ({}, {}),
) -> None:
    """Replace the waiting set when the batch changed it (nothing waited and nothing waits: no
    commit). ``snapshots``: the feeds whose initial snapshot is applied, before and after the
    batch (``SNAPSHOT_MARK``)."""
    if _keys(before) == _keys(after) and snapshots[0] == snapshots[1]:
        return
    rows = [
        (feed, r.topic, r.partition, r.offset, r.key, r.value, r.timestamp, r.received_at)
        for feed, records in sorted(after.items())
        for r in records
    ]
    rows += [
        (feed, SNAPSHOT_MARK, -1, batch, None, None, commit.at, commit.at)
        for feed, batch in sorted(snapshots[1].items())
    ]
    overwrite(spark.createDataFrame(rows, PENDING_SCHEMA).coalesce(1), path, commit)


def _keys(records: dict[str, list[Received]]) -> set[tuple[str, str, int, int]]:
    return {(f, r.topic, r.partition, r.offset) for f, rs in records.items() for r in rs}


def count(records: dict[str, Sequence[Received]]) -> int:
    return sum(len(rs) for rs in records.values())
