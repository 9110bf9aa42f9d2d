"""Every JSON-lines load of a wave read together: two Spark jobs, not one per load.

Reading each load's files on its own costs a schema-inference job per load, and a plan that
unions hundreds of small scans makes every later job over it slower with each load it holds
(its tasks carry the whole plan). Here the data files of all batchable loads are listed on the
driver (no Spark job), read once as text, and:

1. a *discovery* job collects the top-level keys each file has. From them each load resolves
   its columns exactly as a one-load read would (column format, mapping, the relaxed match for
   local files, ambiguity, a missing id column) and learns which columns it has (PATCH writes
   only those);
2. one DataFrame per target table then carries every load's rows: each record is parsed into a
   map of key → VARIANT (so a value keeps its JSON type: ``3`` is a number, ``"3"`` a string,
   ``{...}`` an object), joined with a small table of the loads (file → ordinal, transaction,
   kind, property → key), and cast to the schema's types with ``try_variant_get``. A value that
   does not fit becomes a ``__bad_cols`` entry (TYPE_MISMATCH), an unparsable record or one
   with a repeated key is ``__corrupt`` (CORRUPT_RECORD); the batch's one check job sees them.

For a schema with a watermark or a tombstone key, several rows of one key are changes (seed 001),
so each row's ``__seq`` carries its place in the load: files by path, then lines, then the
records of a line (one window per table, partitioned by load). Elsewhere a key given twice is
DUPLICATE_ID and every row of a load has the same ``__seq``.

Only JSON files feeding object tables with a per-row kind (UPSERT, PATCH, DELETE,
INSERT_IGNORE) take this path; everything else is read load by load (``streaming.inputs.loads``).
"""

from __future__ import annotations

import operator
import os
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from urllib.parse import unquote

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    VariantType,
)

from streaming.core.catalog import SchemaDef
from streaming.core.changes import SEQ_SHIFT
from streaming.core.codes import Code
from streaming.core.errors import RejectedError, StorageUnavailable
from streaming.core.failures import cause, memory_failure, store_trouble
from streaming.core.fold import ChangeKind
from streaming.core.plan import Files, Load
from streaming.core.requests import DataFormat, Operation
from streaming.platform import hadoop
from streaming.platform.exceptions import java_text
from streaming.platform.spark import plan_size_bytes
from streaming.storage.reuse import built_once
from streaming.storage.schemas import spark_schema

__all__ = [
    "BATCHED_KINDS",
    "DECIMAL_TEXT",
    "RECORD_PARTITION_BYTES",
    "JsonGroup",
    "Lister",
    "Resolver",
    "batchable",
    "local_or_hadoop_lister",
    "lost_digits",
    "mistyped",
    "read_failure",
    "read_json_loads",
    "record_partitions",
    "rounded",
]

BATCHED_KINDS = (ChangeKind.UPSERT, ChangeKind.PATCH, ChangeKind.DELETE, ChangeKind.INSERT_IGNORE)
_FILE = "__file"
_BLOCK, _LINE, _POS = "__block", "__line", "__pos"
"""Where a record is in its file: the split it was read in (its first byte), the line's id
(increasing with the line within a split: ``monotonically_increasing_id``), the record's place
in the line (a line may hold a JSON array of records)."""
_LOADS_SCHEMA = StructType(
    [
        StructField(_FILE, StringType()),
        StructField("ordinal", LongType()),
        StructField("fileno", LongType()),
        StructField("tx", StringType()),
        StructField("kind", StringType()),
        StructField("cols", ArrayType(StringType())),
        StructField("src", MapType(StringType(), StringType())),
    ]
)

Lister = Callable[[str], list[str]]
"""A location (a directory or a file) → the data files to read there."""
Resolver = Callable[[Load, Sequence[str]], tuple[dict[str, str], list[str]]]
"""A load and the columns its data has → (property → column, the properties it writes)."""


def read_failure(what: str, error: Exception) -> RejectedError:
    """The rejection of a load whose data could not be read (``what``: e.g. ``cannot read
    <where>``), ``UNREADABLE_DATA`` — unless the error says a store did not answer or refused
    the request (``core.failures.store_trouble``): that is not the data's fault, and
    ``StorageUnavailable`` is raised instead, failing the batch, which the sink retries; or that
    a JVM ran out of memory: ``OUT_OF_MEMORY`` is raised, failing the batch and the job."""
    text = java_text(error)
    if store_trouble(text) is not None:
        raise StorageUnavailable(f"{what}: {cause(text)}") from error
    memory = memory_failure(text)
    if memory is not None:  # a JVM out of memory: the batch's trouble, not the data's
        raise memory from error
    return RejectedError(f"{what}: {str(error).splitlines()[0]}", code=Code.UNREADABLE_DATA)


def batchable(load: Load) -> bool:
    """Whether ``load`` is read by this module (JSON lines into an object table)."""
    return (
        isinstance(load.source, Files)
        and load.source.format is DataFormat.JSON
        and load.schema.is_object
        and load.kind in BATCHED_KINDS
        and load.operation not in (Operation.MERGE, Operation.REPLACE)
    )


@dataclass(frozen=True)
class JsonGroup:
    """The rows of the batched loads that write one table (check columns included)."""

    loads: tuple[Load, ...]
    frame: DataFrame


def read_json_loads(
    spark: SparkSession,
    loads: Sequence[Load],
    resolve: Resolver,
    list_files: Lister,
    describe: Callable[[Load], str],
) -> tuple[list[JsonGroup], dict[int, RejectedError], DataFrame | None]:
    """The batched loads' change rows, one frame per target table; loads refused before any
    row is read (no data files, no id column, ambiguous columns), by ordinal; and the files'
    records, cached: the caller unpersists them once the groups' rows are materialised."""
    refused: dict[int, RejectedError] = {}
    files: dict[int, list[str]] = {}
    for load in loads:
        try:
            found = list_files(load.files.location.path)
        except Exception as e:  # a path that is not there; a store's trouble fails the batch
            refused[load.ordinal] = read_failure(f"cannot list {describe(load)}", e)
            continue
        if not found:
            refused[load.ordinal] = RejectedError(
                f"{describe(load)}: no data files", code=Code.UNREADABLE_DATA
            )
            continue
        files[load.ordinal] = found
    everything = sorted({f for fs in files.values() for f in fs})
    if not everything:
        return [], refused, None
    # Cached by the job that finds the keys, so that the check job reads the records from
    # memory instead of opening every file again (500 small files: the check job 1.7 → 1.2 s).
    lines = spark.read.text(everything)
    size = plan_size_bytes(lines)  # the files'
    text = (
        lines.select(
            F.col("_metadata.file_path").alias(_FILE),
            F.col("_metadata.file_block_start").alias(_BLOCK),
            F.monotonically_increasing_id().alias(_LINE),
            F.posexplode(_records(F.col("value"))).alias(_POS, "record"),
        )
        .coalesce(record_partitions(size, spark.sparkContext.defaultParallelism))
        .persist()
    )
    try:
        groups = _groups(spark, text, loads, files, _discover(text), resolve, refused)
    except Exception:
        text.unpersist()
        raise
    if not groups:
        text.unpersist()
        return [], refused, None
    return groups, refused, text


RECORD_PARTITION_BYTES = 128 * 2**20
"""The bytes of JSON files the cached records hold per partition, at most (Spark's
``maxPartitionBytes``)."""


def record_partitions(size: int, cores: int) -> int:
    """How many partitions a wave's JSON records are coalesced into: as many as the cores, or
    more when the files hold more than ``RECORD_PARTITION_BYTES`` a core. Spark packs small
    files ~32 to a partition (a file counts ``openCostInBytes``, 4 MB, of the 128 MB a partition
    takes), so a batch's 1,500 small files made 47 partitions and every job over them — the key
    discovery, the check, each table's rows — ran 47 tasks of a few records each. ``coalesce``
    is narrow (no shuffle; the line ids stay those of the scan) and never adds partitions."""
    return max(cores, 1, -(-size // RECORD_PARTITION_BYTES))


def _groups(
    spark: SparkSession,
    text: DataFrame,
    loads: Sequence[Load],
    files: Mapping[int, list[str]],
    keys_by_file: Mapping[str, list[str]],
    resolve: Resolver,
    refused: dict[int, RejectedError],
) -> list[JsonGroup]:
    """One group per target table of the loads whose columns resolve (the others go to
    ``refused``)."""
    by_table: dict[str, list[tuple[Load, list[str], dict[str, str], list[str]]]] = defaultdict(list)
    as_spark: dict[str, list[str]] = defaultdict(list)  # a listed path → how Spark spells it
    for fp in keys_by_file:
        as_spark[_normalise(fp)].append(fp)
    for load in loads:
        if load.ordinal not in files:
            continue
        wanted = {_normalise(f) for f in files[load.ordinal]}
        spark_files = sorted(fp for f in wanted for fp in as_spark.get(f, ()))
        columns = sorted({k for fp in spark_files for k in keys_by_file[fp]})
        try:
            sources, present = resolve(load, columns)
        except RejectedError as e:
            refused[load.ordinal] = e
            continue
        by_table[load.writes].append((load, spark_files, sources, present))
    return [
        JsonGroup(tuple(m[0] for m in members), _changes(spark, text, members))
        for _, members in sorted(by_table.items())
    ]


def _records(value: Column) -> Column:
    """A line's records (an array to explode): the line, or the elements of a top-level JSON
    array (as the JSON reader does); blank lines hold none."""
    blank = F.trim(value) == F.lit("")
    array = F.ltrim(value).startswith("[")
    return (
        F.when(blank, F.array().cast("array<string>"))
        .when(array, F.coalesce(F.from_json(value, "array<string>"), F.array(value)))
        .otherwise(F.array(value))
    )


def _discover(text: DataFrame) -> dict[str, list[str]]:
    """Spark's file path → the top-level keys its records have (one Spark job). Every file
    with a record is there, even if none of its records is a JSON object."""
    rows = (
        text.select(_FILE, F.explode_outer(F.json_object_keys("record")).alias("key"))
        .groupBy(_FILE)
        .agg(F.collect_set("key").alias("keys"))
        .collect()
    )
    return {r[_FILE]: sorted(r["keys"]) for r in rows}


def _normalise(path: str) -> str:
    """A path as listed, or as Spark reports it (``file:/x``, percent-encoded), made equal."""
    if path.startswith("file:"):
        return "/" + unquote(path[len("file:") :]).lstrip("/")
    if "://" in path:
        return unquote(path)
    return os.path.abspath(path)


def _changes(
    spark: SparkSession,
    text: DataFrame,
    members: Sequence[tuple[Load, list[str], dict[str, str], list[str]]],
) -> DataFrame:
    """Change rows (as ``streaming.inputs.loads.load_changes`` makes them) of loads of one table."""
    table = spark.createDataFrame(
        [
            (
                fp,
                load.ordinal,
                fileno,
                load.transaction_id,
                load.kind.value if load.kind else None,
                present if load.kind is ChangeKind.PATCH else None,
                {p: sources[p] for p in ["id", *present]},
            )
            for load, spark_files, sources, present in members
            for fileno, fp in enumerate(spark_files)
        ],
        _LOADS_SCHEMA,
    )
    parse, columns = _change_columns(spark, members[0][0].schema)
    return text.join(F.broadcast(table), _FILE).select("*", *parse).select(*columns)


def _change_columns(spark: SparkSession, schema: SchemaDef) -> tuple[list[Column], list[Column]]:
    """The expressions that parse a joined record (``m``, ``__repeated``) and make it a change
    row of ``schema``. They depend on the schema only, and building them is a few hundred py4j
    calls (~0.25 s a table per batch, measured): built once per schema and JVM
    (``streaming.storage.reuse``)."""
    return built_once(
        spark, ("change columns", schema.model_dump_json()), lambda: _build_change_columns(schema)
    )


def _build_change_columns(schema: SchemaDef) -> tuple[list[Column], list[Column]]:
    keys = F.json_object_keys("record")
    parse = [
        F.transform_values(
            F.from_json("record", "map<string,variant>"),
            lambda _, v: F.when(~F.is_variant_null(v), v),
        ).alias("m"),
        (F.size(keys) != F.size(F.array_distinct(keys))).alias("__repeated"),
    ]

    def raw(prop: str) -> Column:
        return F.element_at("m", F.element_at("src", F.lit(prop)))

    types = {f.name: f.dataType for f in spark_schema(schema).fields}
    values: list[Column] = []
    bad: list[tuple[str, Column]] = []
    for prop, target in types.items():
        value = raw(prop)
        nested = F.regexp_like(F.schema_of_variant(value), F.lit("^(OBJECT|ARRAY)"))
        wrong_shape = nested != F.lit(isinstance(target, ArrayType | MapType | StructType))
        cast = F.when(~wrong_shape, F.try_variant_get(value, "$", target.simpleString()))
        values.append(cast.alias(prop))
        lost = rounded(value, VariantType(), cast, target)
        bad.append((prop, value.isNotNull() & (cast.isNull() | lost)))
    kind = F.col("kind")
    tombstone = schema.tombstone
    if tombstone is not None:
        marked = _tombstone_marked(raw(tombstone.column), schema)
        upsert = kind == F.lit(ChangeKind.UPSERT.value)
        kind = F.when(upsert & marked, F.lit(ChangeKind.DELETE.value)).otherwise(kind)
    columns = [
        F.try_variant_get(raw("id"), "$", "string").alias("id"),
        (F.shiftleft(F.col("ordinal"), SEQ_SHIFT) + _row(schema)).alias("__seq"),
        F.col("tx").alias("__tx"),
        kind.alias("__kind"),
        F.col("cols").alias("__cols"),
        F.lit(None).cast(MapType(StringType(), LongType())).alias("__flags"),
        F.lit(None).cast("long").alias("__version"),
        F.lit(None).cast("timestamp").alias("__created"),
        F.struct(*values).alias("data"),
        mistyped(bad).alias("__bad_cols"),
        (F.col("m").isNull() | F.coalesce(F.col("__repeated"), F.lit(False))).alias("__corrupt"),
        F.lit(None).cast(ArrayType(StringType())).alias("__bad_op"),  # DMS data only
    ]
    return parse, columns


DECIMAL_TEXT = r"^\s*[+-]?(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?\s*$"
"""A number's text: integer digits, fraction digits, exponent (Spark's string → decimal)."""


def lost_digits(text: Column, scale: int) -> Column:
    """Whether the number ``text`` spells has a non-zero digit past ``scale`` digits after the
    point: a cast to ``decimal(p, scale)`` would round it (Spark rounds half up, silently), so
    the value does not fit the property and is a ``TYPE_MISMATCH``. The digits needed after the
    point are the fraction's digits less the exponent and the significand's trailing zeros
    (``1.50`` needs 1, ``15e-1`` 1, ``1.5e3`` none). Text that is not a number: False (the cast
    decides)."""
    whole = F.regexp_extract(text, DECIMAL_TEXT, 1)
    fraction = F.regexp_extract(text, DECIMAL_TEXT, 2)
    exponent = F.coalesce(F.regexp_extract(text, DECIMAL_TEXT, 3).try_cast("long"), F.lit(0))
    digits = F.concat(whole, fraction)
    zeros = F.length(digits) - F.length(F.rtrim(digits, F.lit("0")))
    return (F.length(fraction) - exponent - zeros) > F.lit(scale)


def rounded(value: Column, source: DataType, cast: Column, target: DataType) -> Column:
    """Whether ``cast`` (``value`` of type ``source`` cast to ``target``) dropped digits: a
    decimal property takes a value exactly or not at all — text or a variant by its digits
    (``lost_digits``), a float or a wider decimal by casting back. False for other targets
    and for casts that cannot round (integers, a decimal of no larger scale)."""
    if not isinstance(target, DecimalType):
        return F.lit(False)
    if isinstance(source, StringType):
        return lost_digits(value, target.scale)
    if isinstance(source, VariantType):
        return lost_digits(F.try_variant_get(value, "$", "string"), target.scale)
    if isinstance(source, FloatType | DoubleType) or (
        isinstance(source, DecimalType) and source.scale > target.scale
    ):
        return ~F.equal_null(cast.try_cast(source), value)
    return F.lit(False)


def mistyped(bad: Sequence[tuple[str, Column]]) -> Column:
    """A change row's ``__bad_cols``: the names of the properties whose values did not fit
    their types (``bad`` pairs each property with that condition), NULL when all fit. The
    array is built only for a row where one did not fit: built for every row, it cost the
    check job ~0.35 s per million rows of a DMS file with two numeric columns."""
    if not bad:
        return F.lit(None).cast(ArrayType(StringType()))
    names = F.array(*[F.when(wrong, F.lit(prop)) for prop, wrong in bad])
    return F.when(reduce(operator.or_, [wrong for _, wrong in bad]), F.array_compact(names))


def _row(schema: SchemaDef) -> Column:
    """A record's place in its load — files by path, then lines, then records of a line — when
    the schema resolves several rows of one key by the watermark (seed 001: on a tie the later
    row wins); 0 otherwise (a key given twice is DUPLICATE_ID, so the order does not matter)."""
    if not schema.changes_by_watermark:
        return F.lit(0).cast("long")
    order = Window.partitionBy("ordinal").orderBy("fileno", _BLOCK, _LINE, _POS)
    return (F.row_number().over(order) - 1).cast("long")


def _tombstone_marked(value: Column, schema: SchemaDef) -> Column:
    """Seed 001's tombstone key on a JSON value: boolean true; a string equal to the
    configured value; any other type: present and not null."""
    tombstone = schema.tombstone
    assert tombstone is not None
    base = schema.properties[tombstone.column].base_type
    if base == "boolean":
        marked = F.try_variant_get(value, "$", "boolean")
    elif base == "string" and tombstone.value is not None:
        marked = F.try_variant_get(value, "$", "string") == F.lit(tombstone.value)
    else:
        marked = value.isNotNull()
    return F.coalesce(marked, F.lit(False))


def local_or_hadoop_lister(spark: SparkSession) -> Lister:
    """List a location's data files as Spark's file sources would: the location itself if it
    is a file, else the files directly in it, without hidden (``.``) and metadata (``_``)
    files."""

    def visible(name: str) -> bool:
        return not name.startswith((".", "_"))

    def listing(path: str) -> list[str]:
        if "://" not in path:
            if os.path.isfile(path):
                return [os.path.abspath(path)]
            with os.scandir(path) as entries:
                return sorted(
                    os.path.abspath(e.path) for e in entries if e.is_file() and visible(e.name)
                )
        return hadoop.data_files(spark, path, visible)

    return listing
