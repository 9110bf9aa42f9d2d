"""Properties a change feed added to a schema while the job ran (``core.sourceschema``): the
columns added to the schema's tables, and ``_system/evolved_properties``, which keeps them so
that the next start runs with the same definitions (``read``, then ``core.sourceschema.
with_evolved``). The dataset file stays the user's: it is never written.

A new column is added as startup's schema evolution adds a new property (``storage.evolution``):
the same comparison of the schema's tables with its definition, a nullable column at its
place, one commit per table with ``cdcSchemaEvolution`` metadata. The property is recorded
first, then the columns added: a job that dies between the two finds the property at its next
start and startup's evolution adds the columns; and a replayed batch finds the property in the
definitions and adds nothing twice.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from streaming.core.catalog import Dataset
from streaming.core.layout import Layout
from streaming.core.sourceschema import EvolvedProperty, NewColumn
from streaming.storage.evolution import (
    COMMIT_KEY,
    SchemaPlan,
    apply_plan,
    compare,
    find_table,
    schema_tables,
)
from streaming.storage.log import table_state
from streaming.storage.retry import on_conflict_retry
from streaming.storage.tables import ensure_table

__all__ = ["EVOLVED_SCHEMA", "add_properties", "read"]

log = logging.getLogger(__name__)

EVOLVED_SCHEMA = StructType(
    [
        StructField("dataset", StringType(), nullable=False),
        StructField("schema", StringType(), nullable=False),
        StructField("property", StringType(), nullable=False),
        StructField("type", StringType(), nullable=False),
        StructField("feed", StringType()),
        StructField("source_table", StringType()),
        StructField("source_column", StringType()),
        StructField("source_type", StringType()),
        StructField("source", StringType()),
        StructField("batch_id", LongType()),
        StructField("added_at", TimestampType(), nullable=False),
    ]
)
"""``_system/evolved_properties``: one row per property a feed added (a replay may add a
second row of the same property: the first counts)."""


def read(spark: SparkSession, path: str) -> list[EvolvedProperty]:
    """The properties recorded at ``path``, oldest first; none if there is no table."""
    if table_state(spark, path) is None:
        return []
    rows = (
        spark.read.format("delta")
        .load(path)
        .select("dataset", "schema", "property", "type", "added_at")
        .orderBy("added_at")
        .collect()
    )
    return [EvolvedProperty(r["dataset"], r["schema"], r["property"], r["type"]) for r in rows]


def add_properties(
    spark: SparkSession,
    layout: Layout,
    datasets: Mapping[str, Dataset],
    added: Sequence[NewColumn],
    batch_id: int,
) -> None:
    """Record the properties ``added`` (their schemas in ``datasets`` already have them), then
    add their columns to the schemas' tables."""
    if not added:
        return
    now = datetime.now(UTC)
    rows = [
        (
            c.dataset,
            c.schema,
            c.column,
            c.type.type,
            c.feed,
            c.source_table,
            c.column,
            c.type.connect,
            c.where,
            batch_id,
            now,
        )
        for c in added
    ]
    meta = json.dumps(
        {
            COMMIT_KEY: {
                "feed": added[0].feed,
                "recorded": [{"schema": c.schema, "property": c.column} for c in added],
            }
        }
    )
    ensure_table(spark, layout.evolved, EVOLVED_SCHEMA)
    frame = spark.createDataFrame(rows, EVOLVED_SCHEMA)
    on_conflict_retry(
        lambda: (
            frame.write.format("delta")
            .mode("append")
            .option("userMetadata", meta)
            .save(layout.evolved)
        ),
        what=layout.evolved,
    )
    for dataset, schema_name in sorted({(c.dataset, c.schema) for c in added}):
        schema = datasets[dataset].schemas[schema_name]
        tables = schema_tables(layout, dataset, schema)
        plan = SchemaPlan(dataset, schema, tables)
        for table in tables:
            found = find_table(spark, table.path)
            if found is None:  # created by the next start, with the column
                continue
            changes = compare(found.schema, table.schema)
            changes.unwritten = []  # warned about at startup already
            if changes.added and not changes.mismatches:
                plan.changes[table.path] = changes
        apply_plan(spark, plan)
