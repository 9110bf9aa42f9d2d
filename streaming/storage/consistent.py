"""Consistent reads of several tables (docs/architecture.md, "Consistent reads").

Delta commits per table, so "the latest version" of two tables may be from different batches (a
batch in progress has written one and not yet the other) or hold commits the job did not make.
The ledger ``_system/transactions`` records, per committed transaction, the version each table
reached (``table_versions``). Read at one snapshot of the ledger, the highest version recorded
for each table is the table as of the last batch the ledger holds — a batch that has written
every table, since the ledger is written after them. Reading every table at those versions
gives one consistent view.

Read several tables with one ``consistent_versions`` result, so they share one read point::

    versions = consistent_versions(spark, layout)
    dogs = read_consistent(spark, layout, "petstore", "petstore.Dog", versions)
    cats = read_consistent(spark, layout, "petstore", "petstore.Cat", versions)
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streaming.core.layout import Layout
from streaming.core.scd2 import split_key
from streaming.storage.tables import read_table

__all__ = ["CREATED_VERSION", "consistent_versions", "read_consistent", "read_consistent_scd2"]

CREATED_VERSION = 0
"""The version of a table the job created empty (``job.prepare_tables``): the consistent version
of a table no committed transaction has written yet."""


def consistent_versions(spark: SparkSession, layout: Layout) -> dict[str, int]:
    """Table path (``layout.table``, ``layout.scd2``) → the highest version any committed
    transaction recorded for it in the ledger: the table as of the ledger's last batch. Only
    tables some transaction wrote are listed (see ``read_consistent`` for the others)."""
    rows = (
        read_table(spark, layout.ledger)
        .select(
            "dataset",
            F.explode(F.from_json("table_versions", "map<string,bigint>")).alias(
                "schema", "version"
            ),
        )
        .groupBy("dataset", "schema")
        .agg(F.max("version").alias("version"))
        .collect()
    )
    return {_path(layout, r["dataset"], r["schema"]): int(r["version"]) for r in rows}


def _path(layout: Layout, dataset: str, key: str) -> str:
    """The table a ledger ``table_versions`` key names: ``<schema>`` its current table,
    ``<schema>#scd2`` its SCD2 table (``core.scd2.scd2_key``)."""
    schema, scd2 = split_key(key)
    return layout.scd2(dataset, schema) if scd2 else layout.table(dataset, schema)


def read_consistent(
    spark: SparkSession,
    layout: Layout,
    dataset: str,
    schema: str,
    versions: Mapping[str, int] | None = None,
) -> DataFrame:
    """The current table of ``schema`` (of ``dataset``) at its consistent version: from
    ``versions`` (one ``consistent_versions`` result for every table of a view) or, without it,
    from the ledger now. A table no committed transaction wrote is read as created (version 0)."""
    chosen = consistent_versions(spark, layout) if versions is None else versions
    path = layout.table(dataset, schema)
    return read_table(spark, path, chosen.get(path, CREATED_VERSION))


def read_consistent_scd2(
    spark: SparkSession,
    layout: Layout,
    dataset: str,
    schema: str,
    versions: Mapping[str, int] | None = None,
) -> DataFrame:
    """The SCD2 table of ``schema`` at its consistent version (as ``read_consistent``): the
    version the ledger recorded with the last batch. A table no batch has recorded yet is read
    at its latest version: as created, or as the startup built it from history
    (``job.build_scd2_tables``)."""
    chosen = consistent_versions(spark, layout) if versions is None else versions
    path = layout.scd2(dataset, schema)
    return read_table(spark, path, chosen.get(path))
