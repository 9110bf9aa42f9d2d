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

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from streaming.core.catalog import Dataset
from streaming.core.layout import CURRENT_FILE_MIB, Layout
from streaming.storage.commits import session_conf


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


def current_tables(layout: Layout, datasets: Mapping[str, Dataset]) -> set[str]:
    """The tables MERGEd by id (one row per key)."""
    return {
        layout.table(name, schema.name)
        for name, dataset in datasets.items()
        for schema in dataset.object_schemas()
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


def maintain(
    spark: SparkSession,
    paths: Iterator[str] | list[str],
    *,
    optimize: bool,
    vacuum_hours: float | None,
    current: Collection[str] = (),
    cluster: bool = False,
    current_file_mib: int = CURRENT_FILE_MIB,
) -> list[Maintained]:
    """OPTIMIZE and/or VACUUM each table; the live file counts before and after.

    ``current``: the current tables among ``paths``; OPTIMIZE writes their files at
    ``current_file_mib``, then purges their deletion vectors (``REORG ... APPLY (PURGE)``: the
    files with rows marked deleted rewritten without them), and with ``cluster`` (which implies
    OPTIMIZE) Z-orders them by ``id`` (every file rewritten, each then a narrow id range)."""
    if current_file_mib <= 0:
        raise ValueError(f"current_file_mib must be positive, not {current_file_mib}")
    if vacuum_hours is not None and vacuum_hours < 168:
        # Delta refuses retention under 7 days unless told that no reader needs older files.
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    done = []
    for path in paths:
        table = DeltaTable.forPath(spark, path)
        before = file_count(spark, path)
        keyed = path in current
        if keyed and (optimize or cluster):
            with session_conf(spark, _current_conf(current_file_mib, cluster)):
                if cluster:
                    table.optimize().executeZOrderBy("id")
                else:
                    table.optimize().executeCompaction()
                    # Files whose rows a MERGE marked in deletion vectors, rewritten without
                    # them (``tables.deletion_vectors``); nothing to do on a table without any.
                    spark.sql(f"REORG TABLE delta.`{path}` APPLY (PURGE)")
        elif optimize or cluster:
            table.optimize().executeCompaction()
        if vacuum_hours is not None:
            table.vacuum(vacuum_hours)
        done.append(Maintained(path, before, file_count(spark, path)))
    return done
