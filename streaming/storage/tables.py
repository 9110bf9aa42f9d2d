"""Delta tables: creating them, reading them at a version, and helpers their writes share."""

from __future__ import annotations

from collections.abc import Sequence

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.types import (
    StructType,
)

from streaming.platform import delta
from streaming.platform import spark as platform_spark
from streaming.platform.spark import is_in_split

__all__ = ["add_missing_columns", "ensure_table", "memory_bytes", "one_of", "read_table"]


def ensure_table(
    spark: SparkSession, path: str, schema: StructType, properties: dict[str, str] | None = None
) -> None:
    """Create an empty Delta table at ``path`` unless one exists — found from its log, no Spark
    job (``createIfNotExists`` costs as much on a table that exists as it does creating one)."""
    if delta.table_state(spark, path) is not None:
        return
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
    for key, value in (properties or {}).items():
        builder = builder.property(key, value)
    builder.execute()


def add_missing_columns(spark: SparkSession, path: str, schema: StructType) -> None:
    """Add the (nullable) columns of ``schema`` a table made by an older version lacks."""
    have = {f.name for f in read_table(spark, path).schema.fields}
    missing = [f for f in schema.fields if f.name not in have]
    if missing:
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({columns})")


_SEPARATOR = "\x00"


def one_of(column: Column, values: Sequence[str]) -> Column:
    """``column IN (values)``, a predicate Delta skips files with, like ``Column.isin`` — which
    makes a py4j call per value: 500 keys cost ~250 ms of driver time, per table and again in
    its MERGE condition, and more when the tables of a wave do it at once. Here the values
    cross as one string, split in the JVM. Values holding the separator, or empty ones (the
    split drops a trailing empty value), take ``isin``."""
    if len(values) < 8 or any(not v or _SEPARATOR in v for v in values):
        return column.isin(list(values))
    return is_in_split(column, _SEPARATOR.join(values), _SEPARATOR)


def memory_bytes(materialised: DataFrame) -> int | None:
    """The bytes a frame materialised by ``localCheckpoint`` holds in Spark's block manager
    (memory and disk), from Spark's storage info: no job. None when the frame is not one or
    Spark does not say."""
    return platform_spark.memory_bytes(materialised)


def read_table(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(path)
