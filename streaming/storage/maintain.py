"""``cdc maintain``: compaction (OPTIMIZE), clustering by id (OPTIMIZE ZORDER BY) and clean-up
(VACUUM) of every table the job writes.

All are allowed on the append-only history tables: they rewrite or remove files without changing
data (``dataChange = false``), which ``delta.appendOnly`` permits.

A current table is MERGEd by ``id``: a batch rewrites every file that holds one of its keys. Its
files are therefore kept small (``current_file_mib``, not Delta's 1 GB) and, with ``cluster``,
each holds a narrow id range, so that a batch's keys fall in few files and Delta's data skipping
passes over the rest (docs/performance.md, "Table layout").
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from streaming.core.catalog import Dataset
from streaming.core.layout import CURRENT_FILE_MIB, Layout
from streaming.storage.commits import session_conf
from streaming.storage.retry import on_conflict_retry

__all__ = [
    "APPEND_FILE_MIB",
    "Maintained",
    "all_tables",
    "compact",
    "current_tables",
    "file_count",
    "maintain",
    "vacuum",
]


@dataclass(frozen=True)
class Maintained:
    path: str
    files_before: int
    files_after: int


def all_tables(layout: Layout, datasets: Mapping[str, Dataset]) -> Iterator[str]:
    yield from (layout.ledger, layout.outcomes, layout.quarantine)
    for name, dataset in datasets.items():
        for schema in dataset.object_schemas():
            paths = layout.object_table(name, schema.name, scd2=schema.scd2 is not None)
            yield from (paths.current, paths.tombstones, *paths.derived)


def current_tables(layout: Layout, datasets: Mapping[str, Dataset]) -> set[str]:
    """The tables MERGEd by id (one row per key), and the SCD2 tables (MERGEd by id and
    ``__version``: clustered by id, their MERGEs read and rewrite the files of the batch's ids
    only)."""
    return {
        path
        for name, dataset in datasets.items()
        for schema in dataset.object_schemas()
        for path in (
            layout.table(name, schema.name),
            *([layout.scd2(name, schema.name)] if schema.scd2 is not None else []),
        )
    }


def file_count(spark: SparkSession, path: str) -> int:
    row = DeltaTable.forPath(spark, path).detail().select("numFiles").first()
    return int(row["numFiles"]) if row is not None else 0


def _current_conf(file_mib: int, cluster: bool) -> dict[str, str]:
    """OPTIMIZE of a current table: files of ``file_mib`` (the target, and compaction's
    threshold); Z-order without the random byte Delta adds to each row's Z-value against skew
    (ids are unique: no skew, and the noise makes neighbouring files' id ranges overlap)."""
    size = str(file_mib * 2**20)
    conf = {f"spark.databricks.delta.optimize.{k}FileSize": size for k in ("max", "min")}
    if cluster:
        conf["spark.databricks.io.skipping.mdc.addNoise"] = "false"
    return conf


def compact(
    spark: SparkSession,
    path: str,
    *,
    current: bool,
    cluster: bool = False,
    current_file_mib: int = CURRENT_FILE_MIB,
    small_file_mib: int | None = None,
) -> None:
    """OPTIMIZE one table: a current table's files written at ``current_file_mib`` (and, with
    ``cluster``, Z-ordered by ``id``: every file rewritten, each then a narrow id range; without,
    its deletion vectors purged too); another table's files under ``small_file_mib`` (Delta's
    default, 1 GB, when None) bin-packed into files of up to 128 MiB. Retried on commit
    conflicts (the job's own writes, or another writer's)."""
    table = DeltaTable.forPath(spark, path)
    if current:
        with session_conf(spark, _current_conf(current_file_mib, cluster)):
            if cluster:
                on_conflict_retry(lambda: table.optimize().executeZOrderBy("id"), what=path)
            else:
                on_conflict_retry(lambda: table.optimize().executeCompaction(), what=path)
                # Files whose rows a MERGE marked in deletion vectors, rewritten without
                # them (``tables.deletion_vectors``); nothing to do on a table without any.
                on_conflict_retry(
                    lambda: spark.sql(f"REORG TABLE delta.`{path}` APPLY (PURGE)"), what=path
                )
        return
    conf = {}
    if small_file_mib is not None:
        conf = {
            "spark.databricks.delta.optimize.minFileSize": str(small_file_mib * 2**20),
            "spark.databricks.delta.optimize.maxFileSize": str(APPEND_FILE_MIB * 2**20),
        }
    with session_conf(spark, conf):
        on_conflict_retry(lambda: table.optimize().executeCompaction(), what=path)


APPEND_FILE_MIB = 128
"""The largest file upkeep's compaction of an append-only table writes (Delta's auto
compaction's target)."""


def vacuum(spark: SparkSession, path: str, hours: float) -> None:
    """VACUUM the table, keeping what the versions of the last ``hours`` need. Delta refuses
    less than 7 days unless told that no reader needs older files: told here, for this call."""
    check = "spark.databricks.delta.retentionDurationCheck.enabled"
    with session_conf(spark, {check: "false"} if hours < 168 else {}):
        DeltaTable.forPath(spark, path).vacuum(hours)


def maintain(
    spark: SparkSession,
    paths: Iterator[str] | list[str],
    *,
    optimize: bool,
    vacuum_hours: float | None,
    current: Collection[str] = (),
    cluster: bool = False,
    current_file_mib: int = CURRENT_FILE_MIB,
    done: Callable[[Maintained], None] | None = None,
) -> list[Maintained]:
    """OPTIMIZE and/or VACUUM each table (``cdc maintain``); the live file counts before and
    after, each also handed to ``done`` as soon as its table is. ``current``: the current tables
    among ``paths`` (``compact``); ``cluster`` implies OPTIMIZE."""
    if current_file_mib <= 0:
        raise ValueError(f"current_file_mib must be positive, not {current_file_mib}")
    result: list[Maintained] = []
    for path in paths:
        before = file_count(spark, path)
        if optimize or cluster:
            compact(
                spark,
                path,
                current=path in current,
                cluster=cluster,
                current_file_mib=current_file_mib,
            )
        if vacuum_hours is not None:
            vacuum(spark, path, vacuum_hours)
        result.append(Maintained(path, before, file_count(spark, path)))
        if done is not None:
            done(result[-1])
    return result
