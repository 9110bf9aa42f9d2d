"""``cdc maintain``: compaction (OPTIMIZE) and clean-up (VACUUM) of every table the job writes.

Both are allowed on the append-only history tables: they rewrite or remove files without changing
data (``dataChange = false``), which ``delta.appendOnly`` permits.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from streaming.catalog import Dataset
from streaming.layout import Layout


@dataclass(frozen=True)
class Maintained:
    path: str
    files_before: int
    files_after: int


def all_tables(layout: Layout, datasets: Mapping[str, Dataset]) -> Iterator[str]:
    yield from (layout.ledger, layout.outcomes, layout.quarantine)
    for name, dataset in datasets.items():
        for schema in dataset.object_schemas():
            paths = layout.object_table(name, schema.name)
            yield from (paths.current, paths.tombstones, paths.history)


def file_count(spark: SparkSession, path: str) -> int:
    row = DeltaTable.forPath(spark, path).detail().select("numFiles").first()
    return int(row["numFiles"]) if row is not None else 0


def maintain(
    spark: SparkSession,
    paths: Iterator[str] | list[str],
    *,
    optimize: bool,
    vacuum_hours: float | None,
) -> list[Maintained]:
    """OPTIMIZE and/or VACUUM each table; the live file counts before and after."""
    if vacuum_hours is not None and vacuum_hours < 168:
        # Delta refuses retention under 7 days unless told that no reader needs older files.
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    done = []
    for path in paths:
        table = DeltaTable.forPath(spark, path)
        before = file_count(spark, path)
        if optimize:
            table.optimize().executeCompaction()
        if vacuum_hours is not None:
            table.vacuum(vacuum_hours)
        done.append(Maintained(path, before, file_count(spark, path)))
    return done
