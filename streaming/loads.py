"""Read the data of planned loads into change rows, and check them before anything is written.

``load_changes`` is lazy: it only reads schemas (JSON inference or Parquet footers). The
per-row checks (missing ids, duplicate ids, values that do not fit the schema's types, corrupt
records) for *every* load of the batch run as one Spark job in ``check_loads``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, LongType, MapType, StringType

from streaming.apply import SEQ_SHIFT
from streaming.catalog import SchemaDef
from streaming.core.columns import resolve_columns
from streaming.core.fold import ChangeKind
from streaming.errors import RejectedError
from streaming.plan import Load
from streaming.requests import DataFormat

CORRUPT = "_corrupt_record"
ROW = "__row"
DMS_OP = "Op"
CHANGE_TYPE, VALUE, FLAGS = "$change_type", "$value:", "$flags:"
_CHECK_COLUMNS = ["__seq", "id", "__bad_cols", "__corrupt"]


def _read(spark: SparkSession, load: Load) -> DataFrame:
    if load.format is DataFormat.JSON:
        return spark.read.option("columnNameOfCorruptRecord", CORRUPT).json(load.location.path)
    if load.format is DataFormat.PARQUET:
        return spark.read.parquet(load.location.path)
    if load.format is DataFormat.DMS:
        # Rows keep their order in the files: several changes to one key apply in file order.
        df = spark.read.parquet(load.location.path)
        order = Window.orderBy(F.col("_metadata.file_name"), F.col("_metadata.row_index"))
        return df.withColumn(ROW, F.row_number().over(order) - 1)
    if load.format is DataFormat.EXTENDED:  # Parquet or JSON lines, whichever the files are
        path = load.location.path
        parquet = path.endswith(".parquet") or (
            load.location.local
            and os.path.isdir(path)
            and any(name.endswith(".parquet") for name in os.listdir(path))
        )
        reader = spark.read.option("columnNameOfCorruptRecord", CORRUPT)
        return reader.parquet(path) if parquet else reader.json(path)
    raise RejectedError(f"format {load.format} is not supported yet", code="UNSUPPORTED_FORMAT")


def _kind(load: Load, raw: DataFrame, schema: SchemaDef, sources: dict[str, str]) -> Column:
    """Per-row change kind: the action's, except DMS ``Op = 'D'`` and tombstone-key rows (seed
    001: boolean true; a string equal to the configured value; any other type non-null)."""
    kind = F.lit(load.kind.value)
    deleted: Column | None = None
    if load.format is DataFormat.DMS:
        op = next((c for c in raw.columns if c.lower() == DMS_OP.lower()), None)
        if op is not None:
            deleted = F.upper(F.col(f"`{op}`")) == F.lit("D")
    if load.format is DataFormat.EXTENDED and CHANGE_TYPE in raw.columns:
        deleted = F.col(f"`{CHANGE_TYPE}`").cast("long") == F.lit(1)
    tombstone = schema.tombstone
    if tombstone is not None and tombstone.column in sources:
        col = F.col(f"`{sources[tombstone.column]}`")
        base = schema.properties[tombstone.column].base_type
        if base == "boolean":
            marked = col.try_cast("boolean")
        elif base == "string" and tombstone.value is not None:
            marked = col.cast("string") == F.lit(tombstone.value)
        else:
            marked = col.isNotNull()
        marked = F.coalesce(marked, F.lit(False))
        deleted = marked if deleted is None else (deleted | marked)
    if deleted is None or load.kind is not ChangeKind.UPSERT:
        return kind
    return F.when(deleted, F.lit(ChangeKind.DELETE.value)).otherwise(kind)


def load_changes(spark: SparkSession, load: Load) -> DataFrame:
    """The rows of ``load`` as change rows (see ``streaming.apply``) plus check columns."""
    try:
        raw = _read(spark, load)
    except RejectedError:
        raise
    except Exception as e:  # Spark's AnalysisException & co: the files cannot be read
        raise RejectedError(
            f"cannot read {load.format} data at {load.location.path}: {str(e).splitlines()[0]}",
            code="UNREADABLE_DATA",
        ) from e
    schema = load.schema
    props = schema.data_columns()
    extended = load.format is DataFormat.EXTENDED
    sources = resolve_columns(
        ["id"] if extended else ["id", *props],
        [c for c in raw.columns if c not in (CORRUPT, ROW)],
        load.column_format,
        dict(load.column_mapping),
        relaxed=load.location.local,
    )
    if extended:
        sources |= {p: f"{VALUE}{p}" for p in props if f"{VALUE}{p}" in raw.columns}
    if "id" not in sources:
        raise RejectedError(
            f"{load.location.path}: no id column for {schema.name}", code="MISSING_ID_COLUMN"
        )
    types = {f.name: f.dataType for f in schema.spark_schema().fields}
    # DELETE needs only ids; PATCH writes only the columns its source has.
    present = [] if load.kind is ChangeKind.DELETE else [p for p in props if p in sources]
    values: dict[str, Column] = {p: F.lit(None).cast(types[p]) for p in props}
    bad: list[Column] = []
    for prop in present:
        src = F.col(f"`{sources[prop]}`")
        values[prop] = src.try_cast(types[prop])
        bad.append(F.when(src.isNotNull() & values[prop].isNull(), F.lit(prop)))
    columns = (
        F.array(*[F.lit(p) for p in present]) if load.kind is ChangeKind.PATCH else F.lit(None)
    )
    corrupt = F.col(CORRUPT).isNotNull() if CORRUPT in raw.columns else F.lit(False)
    row = F.col(ROW) if ROW in raw.columns else F.lit(0)
    flagged = [p for p in props if f"{FLAGS}{p}" in raw.columns] if extended else []
    flags = (
        F.create_map(
            *[
                part
                for p in flagged
                for part in (F.lit(p), F.coalesce(F.col(f"`{FLAGS}{p}`").cast("long"), F.lit(0)))
            ]
        )
        if flagged
        else F.lit(None)
    )
    return raw.select(
        F.col(f"`{sources['id']}`").cast("string").alias("id"),
        (F.lit(load.ordinal << SEQ_SHIFT) + row).alias("__seq"),
        F.lit(load.transaction_id).alias("__tx"),
        _kind(load, raw, schema, sources).alias("__kind"),
        columns.cast(ArrayType(StringType())).alias("__cols"),
        flags.cast(MapType(StringType(), LongType())).alias("__flags"),
        F.struct(*[values[p].alias(p) for p in props]).alias("data"),
        (F.array_compact(F.array(*bad)) if bad else F.array().cast("array<string>")).alias(
            "__bad_cols"
        ),
        corrupt.alias("__corrupt"),
    )


def check_loads(loaded: Sequence[tuple[Load, DataFrame]]) -> dict[int, RejectedError]:
    """Row-level problems per load ordinal, found by one Spark job over every load of the batch."""
    if not loaded:
        return {}
    union = loaded[0][1].select(_CHECK_COLUMNS)
    for _, df in loaded[1:]:
        union = union.unionByName(df.select(_CHECK_COLUMNS))
    stats = (
        union.groupBy("__seq")
        .agg(
            F.sum(F.col("__corrupt").cast("int")).alias("corrupt"),
            F.sum(F.col("id").isNull().cast("int")).alias("no_id"),
            (F.count("id") - F.count_distinct("id")).alias("dup_ids"),
            F.array_distinct(F.flatten(F.collect_list("__bad_cols"))).alias("bad_cols"),
        )
        .collect()
    )
    by_ordinal = {load.ordinal: load for load, _ in loaded}
    errors: dict[int, RejectedError] = {}
    for row in stats:
        load = by_ordinal[int(row["__seq"]) >> SEQ_SHIFT]
        where = f"actions[{load.action_index}] {load.schema.name} at {load.location.path}"
        if row["corrupt"]:
            errors[load.ordinal] = RejectedError(
                f"{where}: {row['corrupt']} record(s) are not valid {load.format}",
                code="CORRUPT_RECORD",
            )
        elif row["no_id"]:
            errors[load.ordinal] = RejectedError(
                f"{where}: {row['no_id']} record(s) have no id", code="MISSING_ID"
            )
        elif row["dup_ids"] and load.format is not DataFormat.DMS:  # DMS: many changes per key
            errors[load.ordinal] = RejectedError(
                f"{where}: {row['dup_ids']} id(s) appear more than once", code="DUPLICATE_ID"
            )
        elif row["bad_cols"]:
            errors[load.ordinal] = RejectedError(
                f"{where}: values of {sorted(row['bad_cols'])} do not match the schema's types",
                code="TYPE_MISMATCH",
            )
    return errors


def changes_only(df: DataFrame) -> DataFrame:
    """Drop the check columns."""
    return df.drop("__bad_cols", "__corrupt")
