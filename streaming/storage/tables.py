"""Delta tables: creating them, reading them at a version, and helpers their writes share."""

from __future__ import annotations

from collections.abc import Sequence

from delta.tables import DeltaTable
from pyspark import SparkContext
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.classic.column import Column as JvmColumn
from pyspark.sql.types import (
    StructType,
)


def ensure_table(
    spark: SparkSession, path: str, schema: StructType, properties: dict[str, str] | None = None
) -> None:
    """Create an empty Delta table at ``path`` unless one exists."""
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
    context = SparkContext._active_spark_context
    assert context is not None and context._jvm is not None
    jvm = context._jvm
    pattern = jvm.java.util.regex.Pattern
    listed = (
        pattern.compile(pattern.quote(_SEPARATOR))
        .splitAsStream(_SEPARATOR.join(values))
        .collect(jvm.java.util.stream.Collectors.toList())
    )
    return JvmColumn(column._jc.isInCollection(listed))  # type: ignore[operator]  # typed abstract


def memory_bytes(materialised: DataFrame) -> int | None:
    """The bytes a frame materialised by ``localCheckpoint`` holds in Spark's block manager
    (memory and disk), from Spark's storage info: no job. None when the frame is not one or
    Spark does not say."""
    plan = materialised._jdf.queryExecution().analyzed()
    if plan.getClass().getSimpleName() != "LogicalRDD":
        return None
    rdd = plan.rdd().id()
    for info in materialised.sparkSession.sparkContext._jsc.sc().getRDDStorageInfo():
        if info.id() == rdd:
            return int(info.memSize()) + int(info.diskSize())
    return None


def read_table(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(path)
