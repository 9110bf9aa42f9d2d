"""``_system/pending``: the change-feed records of source transactions that are not applied yet
(``core.changefeed``: an END or a data event still to come, or an earlier commit incomplete).

The table holds the whole waiting set: each batch that changes it overwrites it in one commit,
once per batch (``commits.overwrite``: a replay finds its commit and does not make it again), with
the batch's other system writes. A batch reads it at the version before its own commit — the
version the batch it follows left — so a replayed batch sees exactly what it saw the first time.
Between batches of one process the set is held on the driver (``Waiting``): only a process's
first batch, or a batch that may be a replay, reads the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from streaming.core.changefeed import Received, utc
from streaming.storage.commits import BatchCommit, batch_commits, overwrite
from streaming.storage.log import latest_version
from streaming.storage.schemas import PENDING_SCHEMA
from streaming.storage.tables import read_table


@dataclass
class Waiting:
    """The waiting records per feed, as the last batch this process finished left them."""

    records: dict[str, list[Received]] | None = None

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
        for row in read_table(spark, path, version).collect():
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
        return found

    def finished(self, records: dict[str, list[Received]]) -> None:
        """The batch that wrote ``records`` ended: the next one starts from them."""
        self.records = records

    def forget(self) -> None:
        self.records = None


def write(
    spark: SparkSession,
    path: str,
    before: dict[str, list[Received]],
    after: dict[str, list[Received]],
    commit: BatchCommit,
) -> None:
    """Replace the waiting set when the batch changed it (nothing waited and nothing waits: no
    commit)."""
    if _keys(before) == _keys(after):
        return
    rows = [
        (feed, r.topic, r.partition, r.offset, r.key, r.value, r.timestamp, r.received_at)
        for feed, records in sorted(after.items())
        for r in records
    ]
    overwrite(spark.createDataFrame(rows, PENDING_SCHEMA).coalesce(1), path, commit)


def _keys(records: dict[str, list[Received]]) -> set[tuple[str, str, int, int]]:
    return {(f, r.topic, r.partition, r.offset) for f, rs in records.items() for r in rs}


def count(records: dict[str, Sequence[Received]]) -> int:
    return sum(len(rs) for rs in records.values())
