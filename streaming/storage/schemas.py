"""The Spark schemas of every table the job writes, and their Delta table properties.

A dataset definition names its property types (``core.catalog``); here they become Spark types:
the current table (meta columns, then properties), its history (plus ``__deleted``, ``__op``,
``__transaction_id``), its tombstones, and the ``_system`` tables. The storage layout these make
is a public interface (README "Storage layout").
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streaming.core.catalog import DECIMAL_DIGITS, PropertyDef, SchemaDef

__all__ = [
    "CURRENT_TABLE_PROPERTIES",
    "HISTORY_FIELDS",
    "HISTORY_TABLE_PROPERTIES",
    "LEDGER_SCHEMA",
    "META_FIELDS",
    "OUTCOMES_SCHEMA",
    "PENDING_SCHEMA",
    "QUARANTINE_SCHEMA",
    "SCD2_FIELDS",
    "SPARK_TYPES",
    "TOMBSTONES_SCHEMA",
    "current_schema",
    "history_schema",
    "meta_fields",
    "scd2_schema",
    "spark_schema",
    "spark_type",
    "tombstones_schema",
]

SPARK_TYPES: dict[str, DataType] = {
    "string": StringType(),
    "integer": LongType(),
    "number": DoubleType(),
    "boolean": BooleanType(),
    "date": DateType(),
    "datetime": TimestampType(),
    "timestamp": TimestampType(),
    "decimal": DecimalType(*DECIMAL_DIGITS),
    "binary": BinaryType(),
}
"""The Spark type of each scalar property type (``core.catalog.SCALAR_TYPES``)."""


def spark_type(prop: PropertyDef) -> DataType:
    """The Spark type of a property: a scalar's, or an array, map or struct of its elements'."""
    if prop.items is not None:
        return ArrayType(spark_type(prop.items))
    if prop.values is not None:
        return MapType(StringType(), spark_type(prop.values))
    if prop.properties is not None:
        return StructType([StructField(n, spark_type(p)) for n, p in prop.properties.items()])
    if prop.base_type == "decimal":
        return DecimalType(*prop.decimal_digits)
    return SPARK_TYPES[prop.base_type]


def spark_schema(schema: SchemaDef) -> StructType:
    """A schema's data columns as a Spark schema (nullable: validation decides what is
    required)."""
    return StructType(
        [StructField(p, spark_type(schema.properties[p])) for p in schema.data_columns()]
    )


def meta_fields(schema: SchemaDef) -> list[StructField]:
    """id, version, created, updated, hash for objects; none for the other kinds."""
    return list(META_FIELDS) if schema.is_object else []


META_FIELDS = [
    StructField("id", StringType(), nullable=False),
    StructField("version", LongType(), nullable=False),
    StructField("created", TimestampType(), nullable=False),
    StructField("updated", TimestampType(), nullable=False),
    StructField("hash", StringType(), nullable=False),
]
HISTORY_FIELDS = [
    StructField("__deleted", BooleanType(), nullable=False),
    StructField("__op", StringType(), nullable=False),
    StructField("__transaction_id", StringType(), nullable=False),
]

TOMBSTONES_SCHEMA = StructType(
    [
        StructField("id", StringType(), nullable=False),
        StructField("version", LongType(), nullable=False),
        StructField("deleted", TimestampType(), nullable=False),
    ]
)
"""Deleted keys remembered: a re-insert continues at version + 1, so (id, version) stays unique."""

LEDGER_SCHEMA = StructType(
    [
        StructField("transaction_id", StringType(), nullable=False),
        StructField("dataset", StringType()),
        StructField("content_hash", StringType(), nullable=False),
        StructField("batch_id", LongType(), nullable=False),
        StructField("source", StringType()),
        StructField("committed_at", TimestampType()),
        StructField("table_versions", StringType()),
        StructField("outcome", StringType(), nullable=False),
        StructField("query", StringType()),  # query name @ checkpoint id of the committing batch
    ]
)
OUTCOMES_SCHEMA = StructType(
    [
        StructField("transaction_id", StringType()),
        StructField("dataset", StringType()),
        StructField("status", StringType(), nullable=False),
        StructField("error_code", StringType()),
        StructField("batch_id", LongType(), nullable=False),
        StructField("source", StringType()),
        StructField("received_at", TimestampType()),
        StructField("committed_at", TimestampType()),
        StructField("outcome", StringType(), nullable=False),
    ]
)
QUARANTINE_SCHEMA = StructType(
    [
        StructField("transaction_id", StringType()),
        StructField("error_code", StringType(), nullable=False),
        StructField("error_message", StringType()),
        StructField("batch_id", LongType(), nullable=False),
        StructField("source", StringType(), nullable=False),
        StructField("received_at", TimestampType()),
        StructField("payload", BinaryType()),
    ]
)

PENDING_SCHEMA = StructType(
    [
        StructField("feed", StringType(), nullable=False),
        StructField("topic", StringType(), nullable=False),
        StructField("partition", IntegerType(), nullable=False),
        StructField("offset", LongType(), nullable=False),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("timestamp", TimestampType()),
        StructField("received_at", TimestampType(), nullable=False),
    ]
)


def current_schema(schema: SchemaDef) -> StructType:
    """Columns of a schema's current-state table: meta columns (objects only), then properties."""
    data = spark_schema(schema).fields
    return StructType([*META_FIELDS, *data] if schema.is_object else list(data))


def tombstones_schema(schema: SchemaDef) -> StructType:
    """Deleted keys: id, tombstone version, deletion time, and the delete's watermark."""
    if not schema.watermark:
        return TOMBSTONES_SCHEMA
    data = spark_schema(schema)
    mark = StructType([data[c] for c in schema.watermark])
    return StructType([*TOMBSTONES_SCHEMA.fields, StructField("watermark", mark)])


def history_schema(schema: SchemaDef) -> StructType:
    return StructType([*current_schema(schema).fields, *HISTORY_FIELDS])


SCD2_FIELDS = [
    StructField("__start_at", TimestampType(), nullable=False),
    StructField("__end_at", TimestampType()),
    StructField("__is_current", BooleanType(), nullable=False),
    StructField("__deleted", BooleanType(), nullable=False),
    StructField("__transaction_id", StringType(), nullable=False),
    StructField("__version", LongType(), nullable=False),
]
"""An SCD2 interval's columns after ``id`` and the properties (``core.scd2.COLUMNS``)."""


def scd2_schema(schema: SchemaDef) -> StructType:
    """Columns of a schema's SCD2 table: ``id``, the properties, the interval's columns."""
    return StructType([META_FIELDS[0], *spark_schema(schema).fields, *SCD2_FIELDS])


CURRENT_TABLE_PROPERTIES = {"delta.enableChangeDataFeed": "true"}
HISTORY_TABLE_PROPERTIES = {"delta.appendOnly": "true"}
