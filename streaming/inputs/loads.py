"""Read the data of planned loads into change rows, and check them before anything is written.

``load_changes`` is lazy: it only reads schemas (JSON inference or Parquet footers; a single
Parquet or DMS file is first checked to be framed as Parquet, on the driver: an empty, cut
short or foreign file is rejected without a Spark task failing on it). The per-row checks
(missing ids, duplicate ids, values that do not fit the schema's types, corrupt records, DMS
``Op`` values that are not I, U or D) for *every* load of the batch run as one Spark job in
``check_loads``, which also fills the cache the rest of the wave reads (``load_wave``).
"""

from __future__ import annotations

import logging
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast
from urllib.parse import unquote

import pyarrow.parquet as pq
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DecimalType,
    LongType,
    MapType,
    NumericType,
    StringType,
    StructType,
)
from pyspark.util import inheritable_thread_target

from streaming.core.catalog import SchemaDef
from streaming.core.changes import SEQ_SHIFT
from streaming.core.codes import Code
from streaming.core.columns import ColumnFormat, resolve_columns
from streaming.core.datafiles import (
    DMS_DELETE,
    DMS_OP,
    DMS_OPERATIONS,
    PARQUET_MAGIC,
    PARQUET_TAIL,
    invalid_dms_operation,
    parquet_frame_error,
)
from streaming.core.errors import RejectedError
from streaming.core.fold import FLAGS, ChangeKind
from streaming.core.plan import Events, Files, Load, Location, SchemaRows
from streaming.core.requests import DataFormat, Operation
from streaming.inputs.jsonfiles import (
    BATCHED_KINDS,
    batchable,
    local_or_hadoop_lister,
    mistyped,
    read_failure,
    read_json_loads,
    rounded,
)
from streaming.inputs.reader import Reader, filtered
from streaming.platform import hadoop
from streaming.storage.schemas import spark_schema
from streaming.storage.tables import one_of

__all__ = [
    "BAD_OP",
    "CHANGE_TYPE",
    "CORRUPT",
    "FILE_READERS",
    "META_SOURCE_COLUMNS",
    "ROW",
    "SPREAD_MIN_ROWS",
    "VALUE",
    "Loaded",
    "RowCount",
    "StagedRows",
    "changes_only",
    "check_loads",
    "load_changes",
    "load_wave",
    "resolve_sources",
]

log = logging.getLogger(__name__)

META_SOURCE_COLUMNS = ("version", "created", "updated", "hash")
"""An object source's meta columns: never copied into a target (seed 000, PATCH)."""
CORRUPT = "_corrupt_record"
ROW = "__row"
CHANGE_TYPE, VALUE = "$change_type", "$value:"
BAD_OP = "__bad_op"
"""A check column: NULL, or for a DMS row whose ``Op`` is not a DMS operation ``[Op]``."""
_CHECK_COLUMNS = ["__seq", "id", "__bad_cols", "__corrupt", BAD_OP]
_ROW_BITS = (1 << SEQ_SHIFT) - 1


def _read_files(spark: SparkSession, files: Files) -> DataFrame:
    path = files.location.path
    if files.location.is_file and _parquet(files):
        _check_parquet_frame(spark, files.location, f"{files.format} data at {path}")
    if files.format is DataFormat.JSON:
        return spark.read.option("columnNameOfCorruptRecord", CORRUPT).json(path)
    if files.format is DataFormat.PARQUET:
        return spark.read.parquet(path)
    if files.format is DataFormat.DMS:
        return _numbered_by_file(spark.read.parquet(path), one_file=_one_file(files))
    if files.format is DataFormat.EXTENDED:  # Parquet or JSON lines, whichever the files are
        parquet = path.endswith(".parquet") or (
            files.location.local
            and os.path.isdir(path)
            and any(name.endswith(".parquet") for name in os.listdir(path))
        )
        reader = spark.read.option("columnNameOfCorruptRecord", CORRUPT)
        return reader.parquet(path) if parquet else reader.json(path)
    raise RejectedError(f"format {files.format} is not supported yet", code=Code.UNSUPPORTED_FORMAT)


def _parquet(files: Files) -> bool:
    """Whether the files are read as Parquet."""
    return files.format in (DataFormat.DMS, DataFormat.PARQUET) or (
        files.format is DataFormat.EXTENDED and files.location.path.endswith(".parquet")
    )


def _check_parquet_frame(spark: SparkSession, location: Location, where: str) -> None:
    """Refuse one file that is empty, not Parquet or cut short (``core.datafiles``), on the
    driver, before Spark reads it: Spark would fail a task of its schema inference (or, for a
    file of 0 bytes, which its scans pass over, read no row) and log the task's stack trace."""
    size, head, tail = _frame_bytes(spark, location)
    error = parquet_frame_error(where, size, head, tail)
    if error is not None:
        raise error


def _frame_bytes(spark: SparkSession, location: Location) -> tuple[int, bytes, bytes]:
    """A file's size, first 4 and last 8 bytes: a local file, or through Hadoop's file system
    (``s3a://``: a status and two ranged reads)."""
    if location.local:
        with open(location.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(len(PARQUET_MAGIC))
            f.seek(max(0, size - PARQUET_TAIL))
            return size, head, f.read(PARQUET_TAIL)
    return hadoop.size_head_tail(spark, location.path, len(PARQUET_MAGIC), PARQUET_TAIL)


def _one_file(files: Files) -> bool:
    """Whether the files are one local file (the landing zone's case), known without a listing."""
    return files.location.local and os.path.isfile(files.location.path)


def _numbered_by_file(df: DataFrame, *, one_file: bool = False) -> DataFrame:
    """DMS rows keep their order in the files, so several changes to one key apply in file
    order: ``ROW`` numbers the rows 0, 1, … by (file name, row in file). It is the row's index
    in its file plus the number of rows of the files before it, computed where the files are
    read, on as many tasks as the scan has (a window over every row would move the whole load
    to one task). The offsets come from the per-file row counts: a row per file, joined back by
    broadcast. Like the row numbers before, they are the low bits of ``__seq`` (``SEQ_SHIFT``):
    a load holds fewer than ``2**31`` rows."""
    at = F.col("_metadata.row_index")
    if one_file or len(df.inputFiles()) <= 1:  # the landing zone's: one file per transaction
        return df.withColumn(ROW, at)
    files = df.select(
        F.col("_metadata.file_path").alias("__file"), F.col("_metadata.file_name").alias("__name")
    )
    counts = files.groupBy("__file", "__name").count()
    before = counts.alias("b")
    earlier = (F.col("b.__name") < F.col("f.__name")) | (
        (F.col("b.__name") == F.col("f.__name")) & (F.col("b.__file") < F.col("f.__file"))
    )
    offsets = (
        counts.alias("f")
        .join(F.broadcast(before), earlier, "left")
        .groupBy(F.col("f.__file").alias("__file"))
        .agg(F.coalesce(F.sum("b.count"), F.lit(0)).alias("__offset"))
    )
    return (
        df.withColumn("__file", F.col("_metadata.file_path"))
        .withColumn("__at", at)
        .join(F.broadcast(offsets), "__file")
        .withColumn(ROW, F.col("__offset") + F.col("__at"))
        .drop("__file", "__at", "__offset")
    )


def _read(spark: SparkSession, load: Load, reader: Reader) -> DataFrame:
    if isinstance(load.source, Files):
        return _read_files(spark, load.source)
    assert load.source is not None and not isinstance(load.source, Events)  # _events_together
    return reader.rows(load.source)


def _describe(load: Load) -> str:
    """Where a load's rows come from, for messages."""
    if isinstance(load.source, Events):
        return f"change events {load.source.location}"
    if isinstance(load.source, Files):
        return f"{load.source.format} data at {load.source.location.path}"
    if isinstance(load.source, SchemaRows):
        return f"schema {load.source.schema.name}"
    return f"table {load.source.name}" if load.source is not None else "no source"


def _kind(load: Load, raw: DataFrame, schema: SchemaDef, sources: dict[str, str]) -> Column:
    """Per-row change kind: the action's, except DMS ``Op = 'D'`` and tombstone-key rows (seed
    001: boolean true; a string equal to the configured value; any other type non-null)."""
    if load.kind is None:  # record targets: rows are inserted as they are
        return F.lit(None).cast("string")
    kind = F.lit(load.kind.value)
    deleted: Column | None = None
    fmt = load.source.format if isinstance(load.source, Files | Events) else None
    op = _op_column(load, raw)
    if op is not None:
        deleted = F.upper(F.col(f"`{op}`")) == F.lit(DMS_DELETE)
    if fmt is DataFormat.EXTENDED and CHANGE_TYPE in raw.columns:
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


def _op_column(load: Load, raw: DataFrame) -> str | None:
    """A DMS load's ``Op`` column (in any case), if its data has one."""
    files = load.source
    if not (isinstance(files, Files | Events) and files.format is DataFormat.DMS):
        return None
    return next((c for c in raw.columns if c.lower() == DMS_OP.lower()), None)


def _bad_op(load: Load, raw: DataFrame) -> Column:
    """``BAD_OP``: for a DMS row whose ``Op`` is not I, U or D (any case; NULL neither),
    ``[Op]``; else NULL."""
    op = _op_column(load, raw)
    if op is None:
        return F.lit(None).cast(ArrayType(StringType()))
    value = F.col(f"`{op}`").cast("string")
    return F.when(~F.upper(value).isin(*DMS_OPERATIONS) | value.isNull(), F.array(value))


def resolve_sources(load: Load, columns: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """For a load whose data has ``columns``: property → the column feeding it, and the
    properties it writes (DELETE needs only ids; PATCH writes only the columns its source
    has)."""
    schema = load.schema
    props = schema.data_columns()
    files = load.source if isinstance(load.source, Files | Events) else None
    extended = files is not None and files.format is DataFormat.EXTENDED
    keys = ["id"] if schema.is_object else []
    sources = resolve_columns(
        keys if extended else [*keys, *props],
        [c for c in columns if c not in (CORRUPT, ROW, *META_SOURCE_COLUMNS)],
        files.column_format if files else ColumnFormat.AS_SPECIFIED,
        dict(files.column_mapping) if files else {},
        relaxed=files.location.local if isinstance(files, Files) else True,
    )
    if extended:
        sources |= {p: f"{VALUE}{p}" for p in props if f"{VALUE}{p}" in columns}
    if schema.is_object and "id" not in sources:
        raise RejectedError(
            f"{_describe(load)}: no id column for {schema.name}", code=Code.MISSING_ID_COLUMN
        )
    present = [] if load.kind is ChangeKind.DELETE else [p for p in props if p in sources]
    return sources, present


@dataclass(frozen=True)
class RowCount:
    """What the check job counted of one load."""

    rows: int
    repeated: int | None
    """How many of its ids are given more than once (``count(id) - count(distinct id)``); None:
    not counted (a load whose repeats are changes, beside other loads of its table: neither an
    error nor a way to fold without grouping)."""


@dataclass(frozen=True)
class Loaded:
    """Change rows (with check columns) of one load, or of several loads of one table."""

    loads: tuple[Load, ...]
    frame: DataFrame
    counts: Mapping[int, RowCount] | None = None
    """Per load ordinal, what the check job counted (None before it ran)."""

    def without(self, ordinals: set[int]) -> Loaded | None:
        """The rows of the other loads; None if none is left."""
        keep = tuple(load for load in self.loads if load.ordinal not in ordinals)
        if len(keep) == len(self.loads):
            return self
        if not keep:
            return None
        ordinal = F.shiftright(F.col("__seq"), SEQ_SHIFT)
        return Loaded(keep, self.frame.where(~ordinal.isin(sorted(ordinals))), self.counts)


@contextmanager
def load_wave(
    spark: SparkSession,
    loads: Sequence[Load],
    reader: Reader,
    *,
    held: list[DataFrame],
    staged: StagedRows | None = None,
) -> Iterator[tuple[list[Loaded], dict[str, RejectedError]]]:
    """The change rows of a wave's loads read at the reader's versions and checked by one
    Spark job; the transactions whose data is wrong, each with the error of its first load
    that is. JSON files into object tables are read together (``streaming.inputs.jsonfiles``), every
    other source load by load.

    The rows are cached: the check job reads the sources once, and folding and writing the
    wave reuse those rows instead of reading and parsing the files (or the pinned table
    versions) again. The cached frames are put in ``held`` when the block ends, for the caller
    to unpersist: a first load's history, appended after the batch's last wave, is computed
    from them (``apply._apply_first_load``)."""
    errors: dict[int, RejectedError] = {}
    batched = [load for load in loads if batchable(load)]
    groups, refused, records = read_json_loads(
        spark, batched, resolve_sources, local_or_hadoop_lister(spark), _describe
    )
    errors.update(refused)
    cached: list[DataFrame] = []
    try:
        loaded = [Loaded(tuple(group.loads), group.frame) for group in groups]
        read = {load.ordinal for load in batched}
        rest = [load for load in loads if load.ordinal not in read and load.source is not None]
        events, rest = _events_together(rest, reader, staged)
        loaded.extend(events)
        together, rest = _dms_together(spark, rest, reader)
        loaded.extend(together)

        def prepare(load: Load) -> Loaded | RejectedError:
            try:
                return Loaded((load,), load_changes(spark, load, reader))
            except RejectedError as e:
                return e

        for load, prepared in zip(rest, _side_by_side(spark, prepare, rest), strict=True):
            if isinstance(prepared, RejectedError):
                errors[load.ordinal] = prepared
            else:
                loaded.append(prepared)
        # Lazy: the check job below fills every cache in one pass.
        cached = [part.frame.persist() for part in loaded]
        counted: dict[int, RowCount] = {}
        errors.update(check_loads(loaded, counted))
        if records is not None:  # read into the caches above by now
            records.unpersist()
            records = None
        loaded = [Loaded(part.loads, part.frame, counted) for part in loaded]
        by_ordinal = {load.ordinal: load for load in loads}
        rejected: dict[str, RejectedError] = {}
        for ordinal in sorted(errors):
            rejected.setdefault(by_ordinal[ordinal].transaction_id, errors[ordinal])
        dropped = {load.ordinal for load in loads if load.transaction_id in rejected}
        kept = [part.without(dropped) for part in loaded]
        yield [part for part in kept if part is not None], rejected
    finally:
        if records is not None:
            records.unpersist()
        held.extend(cached)


def _dms_together(
    spark: SparkSession, loads: Sequence[Load], reader: Reader
) -> tuple[list[Loaded], list[Load]]:
    """DMS loads of one local file each (the landing zone's: a transaction per file) into one
    table, whose files have the same Parquet schema (read from their footers on the driver,
    a millisecond each), read by one scan: a file's rows are its load's (the file's name →
    ordinal and transaction, its row index → row), instead of a read, a schema and a plan
    per load (W2's 20 files: ~0.3 s each, from four threads). Returns the frames and the
    loads left to read one by one (another format or source, a file whose footer cannot be
    read, a group of one, a group Spark refuses)."""
    groups: dict[tuple[Any, ...], list[Load]] = defaultdict(list)
    rest: list[Load] = []
    for load in loads:
        files = load.source
        if not (
            isinstance(files, Files)
            and files.format is DataFormat.DMS
            and load.operation not in (Operation.MERGE, Operation.REPLACE)
            and _one_file(files)
        ):
            rest.append(load)
            continue
        try:
            footer = pq.read_schema(files.location.path)
        except Exception:  # not Parquet, or unreadable: the load's own read says why
            rest.append(load)
            continue
        columns = tuple((f.name, str(f.type)) for f in footer)
        mapping = tuple(sorted(files.column_mapping.items()))
        key = (load.writes, load.kind, load.operation, files.column_format, mapping, columns)
        groups[key].append(load)
    together: list[Loaded] = []
    for group in groups.values():
        if len(group) == 1:
            rest.extend(group)
            continue
        try:
            together.append(Loaded(tuple(group), _read_together(spark, group, reader)))
        except Exception as e:  # e.g. a type Spark cannot read: each load's own read says why
            log.info("reading %d DMS files one by one, not together: %s", len(group), e)
            rest.extend(group)
    return together, sorted(rest, key=lambda load: load.ordinal)


def _read_together(spark: SparkSession, group: Sequence[Load], reader: Reader) -> DataFrame:
    """The change rows of DMS loads of one file each and one Parquet schema, from one scan: a
    row's load is found by its file's name (``_metadata.file_name``, unique in the group)."""
    paths = {
        load.ordinal: load.source.location.path for load in group if isinstance(load.source, Files)
    }
    by_name = {os.path.basename(paths[load.ordinal]): load for load in group}
    if len(by_name) != len(group):
        raise ValueError("two loads of the group have files of the same name")
    raw = spark.read.parquet(*(paths[load.ordinal] for load in group))
    # A file's name as Spark lists it (a URI: ``5%20b.parquet``) and decoded (``5 b.parquet``):
    # ``_metadata.file_name`` gives the former. Every row must find its load.
    listed = raw.inputFiles()
    if len(listed) != len(group):
        raise ValueError(f"Spark lists {listed}, the loads are {sorted(by_name)}")
    names: dict[str, Load] = {}
    for uri in listed:
        encoded = uri.rstrip("/").rsplit("/", 1)[-1]
        load = by_name.get(unquote(encoded))
        keys = {encoded, unquote(encoded)}
        if load is None or any(names.get(key, load) is not load for key in keys):
            raise ValueError(f"Spark lists {uri}: not one of the loads' files {sorted(by_name)}")
        names.update(dict.fromkeys(keys, load))
    name = F.col("_metadata.file_name")

    def per_file(value: Callable[[Load], Any]) -> Column:
        pairs = [part for n, load in names.items() for part in (F.lit(n), F.lit(value(load)))]
        found = F.create_map(*pairs)[name]
        return F.coalesce(found, F.raise_error(F.concat(F.lit("no load for file "), name)))

    raw = raw.withColumn(ROW, F.col("_metadata.row_index"))
    ordinal = per_file(lambda load: load.ordinal)
    transaction = per_file(lambda load: load.transaction_id)
    return _changes_of(group[0], raw, reader, ordinal, transaction)


class StagedRows(Protocol):
    """A batch's change-feed rows staged by Spark (``inputs.changefeeds.FeedBatch``)."""

    def columns(self, schema: str) -> list[str]:
        """The staged rows' columns for a target schema."""
        ...

    def rows(self, schema: str, ordinals: Sequence[int]) -> DataFrame:
        """``__ordinal``, ``__tx``, ``__row``, ``__values`` (``map<string,string>``) of the
        loads ``ordinals``."""
        ...


def _events_together(
    loads: Sequence[Load], reader: Reader, staged: StagedRows | None
) -> tuple[list[Loaded], list[Load]]:
    """The change rows of a wave's change-feed loads (``Events``: rows staged by Spark), one
    frame per target table and operation. Returns the frames and the other loads."""
    groups: dict[tuple[Any, ...], list[Load]] = defaultdict(list)
    rest: list[Load] = []
    for load in loads:
        source = load.source
        if isinstance(source, Events):
            mapping = tuple(sorted(source.column_mapping.items()))
            key = (load.writes, load.operation, source.column_format, mapping)
            groups[key].append(load)
        else:
            rest.append(load)
    if not groups:
        return [], rest
    assert staged is not None, "change-feed loads without the batch's staged rows"
    return [Loaded(tuple(g), _events_frame(g, reader, staged)) for g in groups.values()], rest


def _events_frame(group: Sequence[Load], reader: Reader, staged: StagedRows) -> DataFrame:
    """The staged rows of a group of loads: a primitive column as the text the row holds, which
    ``_changes_of`` casts to the schema's type as it casts a file's column (a value that does
    not fit is a mistyped value, as in a file), a nested one parsed as JSON into the schema's
    type."""
    schema = group[0].schema
    first = group[0].source
    assert isinstance(first, Events)
    columns = dict.fromkeys(staged.columns(schema.name))
    # Truncates (no rows): the columns a row would have.
    columns.update(dict.fromkeys([first.column_mapping.get("id", "id"), "Op"]))
    sources, _ = resolve_sources(group[0], list(columns))
    nested = {
        sources[f.name]: f.dataType
        for f in spark_schema(schema).fields
        if f.name in sources and isinstance(f.dataType, ArrayType | MapType | StructType)
    }
    values = F.col("__values")

    def value(column: str) -> Column:
        text = values[column]
        if column not in nested:
            return text
        return F.from_json(text, cast(StructType, nested[column]))  # any DataType: its JSON

    frame = staged.rows(schema.name, [load.ordinal for load in group])
    raw = frame.select(
        "__ordinal",
        "__tx",
        F.col("__row").alias(ROW),
        *[value(c).alias(c) for c in columns],
    )
    return _changes_of(group[0], raw, reader, F.col("__ordinal"), F.col("__tx"))


FILE_READERS = 4
"""Threads that prepare a wave's file loads (DMS, Parquet) at once: each costs a file listing
and a footer read on the driver before any Spark job (W2's 20 DMS files: ~180 ms each)."""


def _side_by_side(
    spark: SparkSession, prepare: Callable[[Load], Loaded | RejectedError], loads: Sequence[Load]
) -> list[Loaded | RejectedError]:
    """``prepare`` of every load, in order: loads of files from threads (their listing and
    schema reading is driver latency, and plans are built independently); loads that read
    tables (the batch's pinned versions through ``Reader``) and MERGE/REPLACE scopes here."""
    apart = [
        isinstance(load.source, Files)
        and load.operation not in (Operation.MERGE, Operation.REPLACE)
        for load in loads
    ]
    out: dict[int, Loaded | RejectedError] = {}
    files = [i for i, ok in enumerate(apart) if ok]
    if len(files) > 1:
        task = inheritable_thread_target(spark)(prepare)
        with ThreadPoolExecutor(max_workers=FILE_READERS) as pool:
            for i, result in zip(files, pool.map(task, [loads[i] for i in files]), strict=True):
                out[i] = result
    for i, load in enumerate(loads):
        if i not in out:
            out[i] = prepare(load)
    return [out[i] for i in range(len(loads))]


def load_changes(spark: SparkSession, load: Load, reader: Reader) -> DataFrame:
    """The rows of ``load`` as change rows (see ``streaming.apply.objects``) plus check columns."""
    try:
        raw = _read(spark, load, reader)
    except RejectedError:
        raise
    except Exception as e:  # Spark's AnalysisException & co: the source cannot be read
        # ... or a store failed for a moment: StorageUnavailable, the batch is retried
        raise read_failure(f"cannot read {_describe(load)}", e) from e
    raw = _spread(_in_file_order(load, raw), load)
    return _changes_of(load, raw, reader, F.lit(load.ordinal), F.lit(load.transaction_id))


SPREAD_MIN_ROWS = 100_000
"""A Parquet file of few row groups is spread over more tasks only with at least this many
rows to a task (``_spread``)."""


def _spread(raw: DataFrame, load: Load) -> DataFrame:
    """The rows of a local Parquet file (DMS or Parquet) with fewer row groups than the cores
    can use, spread over more tasks: Spark reads a row group in one task, and a DMS full-load
    file is often one row group of a million rows — one core would then check, fold and write
    every row. Its footer says (on the driver, a millisecond)."""
    files = load.source
    if not (
        isinstance(files, Files)
        and files.format in (DataFormat.DMS, DataFormat.PARQUET)
        and _one_file(files)
    ):
        return raw
    try:
        meta = pq.ParquetFile(files.location.path).metadata
    except Exception:  # Spark read it: leave it as Spark reads it
        return raw
    tasks = min(raw.sparkSession.sparkContext.defaultParallelism, meta.num_rows // SPREAD_MIN_ROWS)
    if tasks <= meta.num_row_groups:
        return raw
    # By a hash of the id, as ``_changes_of`` will make it: the rows then stay partitioned by
    # ``id``, and the check job counts ids distinct without shuffling them again (a round-robin
    # repartition would also sort every row first, to be deterministic on retry, on the one
    # task that read them). No id column: by the row's place in the file.
    sources, _ = resolve_sources(load, raw.columns)
    if "id" in sources:
        by = F.col(f"`{sources['id']}`").cast("string")
    else:
        by = F.col(ROW) if ROW in raw.columns else F.col("_metadata.row_index")
    return raw.repartition(tasks, by)


def _changes_of(
    load: Load, raw: DataFrame, reader: Reader, ordinal: Column, transaction: Column
) -> DataFrame:
    """``raw``'s rows as ``load``'s change rows; ``ordinal`` and ``transaction``: the load each
    row belongs to (one load, or per file of loads read together, ``_dms_together``)."""
    schema = load.schema
    props = schema.data_columns()
    sources, present = resolve_sources(load, raw.columns)
    types = {f.name: f.dataType for f in spark_schema(schema).fields}
    uncastable = {
        p: raw.schema[sources[p]].dataType.simpleString()
        for p in present
        if not _castable(raw, sources[p], types[p])
    }
    if uncastable:
        raise RejectedError(
            f"{_describe(load)}: the column types of {uncastable} cannot hold the schema's types "
            f"{ {p: types[p].simpleString() for p in uncastable} }",
            code=Code.TYPE_MISMATCH,
        )
    values: dict[str, Column] = {p: F.lit(None).cast(types[p]) for p in props}
    bad: list[tuple[str, Column]] = []
    staged = isinstance(load.source, Events)
    for prop in present:
        src = F.col(f"`{sources[prop]}`")
        if staged and isinstance(types[prop], BinaryType):  # a change feed's bytes: base64
            values[prop] = F.try_to_binary(src, F.lit("base64"))
        else:
            values[prop] = src.try_cast(types[prop])
        source_type = raw.schema[sources[prop]].dataType
        lost = rounded(src, source_type, values[prop], types[prop])
        bad.append((prop, src.isNotNull() & (values[prop].isNull() | lost)))
    columns = (
        F.array(*[F.lit(p) for p in present]) if load.kind is ChangeKind.PATCH else F.lit(None)
    )
    corrupt = F.col(CORRUPT).isNotNull() if CORRUPT in raw.columns else F.lit(False)
    row = F.col(ROW) if ROW in raw.columns else F.lit(0)
    flagged = _flag_columns(load, props, sources, raw.columns)
    flags = (
        F.create_map(
            *[
                part
                for p, c in flagged.items()
                for part in (F.lit(p), F.coalesce(F.col(f"`{c}`").cast("long"), F.lit(0)))
            ]
        )
        if flagged
        else F.lit(None)
    )
    version, created = _replace_version(load, reader, raw, sources)
    key = F.col(f"`{sources['id']}`") if "id" in sources else F.lit(None)
    changes = raw.select(
        key.cast("string").alias("id"),
        (F.shiftleft(ordinal.cast("long"), SEQ_SHIFT) + row).alias("__seq"),
        transaction.alias("__tx"),
        _kind(load, raw, schema, sources).alias("__kind"),
        columns.cast(ArrayType(StringType())).alias("__cols"),
        flags.cast(MapType(StringType(), LongType())).alias("__flags"),
        F.lit(version).cast("long").alias("__version"),
        F.lit(created).cast("timestamp").alias("__created"),
        F.struct(*[values[p].alias(p) for p in props]).alias("data"),
        mistyped(bad).alias("__bad_cols"),
        corrupt.alias("__corrupt"),
        _bad_op(load, raw).alias(BAD_OP),
    )
    return _with_scope_deletes(load, reader, changes, version)


def _flag_columns(
    load: Load, props: Sequence[str], sources: Mapping[str, str], columns: Sequence[str]
) -> dict[str, str]:
    """Property → the column of its flags (``core.fold``'s MISSING, AGGREGATE): the extended
    format's ``$flags:<property>``; a change feed's staged ``$flags:<column>`` (a value the
    source did not send, ``core.changefeed``), named as the column feeding the property."""
    if isinstance(load.source, Events):
        named = {p: f"{FLAGS}{sources[p]}" for p in props if p in sources}
    elif isinstance(load.source, Files) and load.source.format is DataFormat.EXTENDED:
        named = {p: f"{FLAGS}{p}" for p in props}
    else:
        return {}
    return {p: c for p, c in named.items() if c in columns}


_NESTED = (ArrayType, MapType, StructType)


def _always_castable(source: DataType, target: DataType) -> bool:
    """Casts Spark allows between any two values of these types: number ↔ number, text →
    number, number or text or boolean → text."""
    if isinstance(target, NumericType):
        return isinstance(source, (NumericType, StringType))
    return isinstance(target, StringType) and isinstance(
        source, (NumericType, StringType, BooleanType)
    )


def _castable(raw: DataFrame, column: str, target: DataType) -> bool:
    """Whether values of ``raw``'s ``column`` can be cast to ``target`` at all (value by value,
    ``try_cast`` then decides): never a nested value into a scalar property or back (Spark would
    print a struct as a string), nor a cast Spark refuses (an array into an integer)."""
    source = raw.schema[column].dataType
    if source == target or _always_castable(source, target):
        return True  # no plan to analyse (a few ms each, per column of every load)
    if isinstance(source, _NESTED) != isinstance(target, _NESTED):
        return False
    try:
        raw.select(F.col(f"`{column}`").try_cast(target))
    except AnalysisException:
        return False
    return True


def _replace_version(
    load: Load, reader: Reader, raw: DataFrame, sources: Mapping[str, str]
) -> tuple[int | None, datetime | None]:
    """REPLACE (seed 000): the version every replaced row of the scope moves to — the largest
    version in the scope (and of the tombstones of the ids it writes) + 10, or + 1 without
    history; 1 when there is none — and the scope's smallest ``created``."""
    if load.kind is not ChangeKind.REPLACE:
        return None, None
    scope = filtered(reader.table(load.writes), load.scope)
    stats = scope.agg(F.max("version"), F.min("created")).first()
    top, created = (stats[0] or 0, stats[1]) if stats else (0, None)
    ids = raw.select(F.col(f"`{sources['id']}`").cast("string").alias("id"))
    tombstones = reader.table(reader.layout.tombstones(load.dataset, load.schema.name))
    dead = tombstones.join(ids, "id", "left_semi").agg(F.max("version")).first()
    top = max(top, (dead[0] if dead else None) or 0)
    if top == 0:
        return 1, None
    return top + (10 if load.schema.history else 1), created


def _with_scope_deletes(
    load: Load, reader: Reader, changes: DataFrame, version: int | None
) -> DataFrame:
    """MERGE / REPLACE: add deletes of the target rows in scope that the source lacks, after the
    load's own change rows (``changes``); REPLACE's tombstones get its ``version``."""
    if load.operation not in (Operation.MERGE, Operation.REPLACE):
        return changes
    kind = ChangeKind.DELETE if load.operation is Operation.MERGE else ChangeKind.REPLACE_DELETE
    scope = filtered(reader.table(load.writes), load.scope).select("id")
    gone = scope.join(changes.select("id"), "id", "left_anti")
    props = spark_schema(load.schema)
    out = gone.select(
        "id",
        F.lit((load.ordinal << SEQ_SHIFT) + (1 << (SEQ_SHIFT - 1))).cast("long").alias("__seq"),
        F.lit(load.transaction_id).alias("__tx"),
        F.lit(kind.value).alias("__kind"),
        F.lit(None).cast(ArrayType(StringType())).alias("__cols"),
        F.lit(None).cast(MapType(StringType(), LongType())).alias("__flags"),
        F.lit(version).cast("long").alias("__version"),
        F.lit(None).cast("timestamp").alias("__created"),
        F.lit(None).cast(props).alias("data"),
        mistyped([]).alias("__bad_cols"),
        F.lit(False).alias("__corrupt"),
        F.lit(None).cast(ArrayType(StringType())).alias(BAD_OP),
    )
    return changes.unionByName(out)


def check_loads(
    loaded: Sequence[Loaded], counts: dict[int, RowCount] | None = None
) -> dict[int, RejectedError]:
    """Row-level problems per load ordinal, found by one Spark job over every load of the wave
    (one result row per load: ``__seq`` also numbers the rows of loads whose order matters).
    ``counts``, if given, receives what the job counted of each load (rows, repeated ids).

    Ids are counted distinct only where the answer is used (an exact distinct count is a
    shuffle of every id): loads where a repeated id is an error, and loads alone on their
    table in the wave (``RowCount.repeated == 0`` lets the fold skip grouping). Which columns
    hold values of the wrong type is asked by a second job, only when some row has one."""
    if counts is not None:
        counts.update({load.ordinal: RowCount(0, 0) for part in loaded for load in part.loads})
    if not loaded:
        return {}
    union = loaded[0].frame.select(_CHECK_COLUMNS)
    for part in loaded[1:]:
        union = union.unionByName(part.frame.select(_CHECK_COLUMNS))
    by_ordinal = {load.ordinal: load for part in loaded for load in part.loads}
    per_table = Counter(load.writes for load in by_ordinal.values())
    distinct = sorted(
        load.ordinal
        for load in by_ordinal.values()
        if load.schema.is_object
        and (not _many_changes_per_key(load) or per_table[load.writes] == 1)
    )
    ops = any(_op_checked(load) for load in by_ordinal.values())
    stats = _check_stats(union, distinct, every=len(distinct) == len(by_ordinal), ops=ops)
    errors: dict[int, RejectedError] = {}
    mistyped: list[int] = []
    for row in stats:
        load = by_ordinal[int(row["ordinal"])]
        repeated = int(row["dup_ids"]) if load.ordinal in distinct else None
        if counts is not None:
            counts[load.ordinal] = RowCount(int(row["rows"]), repeated)
        where = _where(load)
        keyed = load.schema.is_object
        if row["corrupt"]:
            errors[load.ordinal] = RejectedError(
                f"{where}: {row['corrupt']} record(s) are not valid", code=Code.CORRUPT_RECORD
            )
        elif row["bad_ops"]:
            first = row["first_bad_op"]
            errors[load.ordinal] = invalid_dms_operation(
                where, (int(first["seq"]) & _ROW_BITS) + 1, first["op"][0], int(row["bad_ops"])
            )
        elif row["no_id"] and keyed:
            errors[load.ordinal] = RejectedError(
                f"{where}: {row['no_id']} record(s) have no id", code=Code.MISSING_ID
            )
        elif repeated and keyed and not _many_changes_per_key(load):
            errors[load.ordinal] = RejectedError(
                f"{where}: {repeated} id(s) appear more than once", code=Code.DUPLICATE_ID
            )
        elif row["bad_rows"]:
            mistyped.append(load.ordinal)
    for number, columns in _mistyped_columns(union, mistyped).items():
        load = by_ordinal[number]
        errors[number] = RejectedError(
            f"{_where(load)}: values of {columns} do not match the schema's types "
            f"({_types_named(load, columns)})",
            code=Code.TYPE_MISMATCH,
        )
    return errors


def _check_stats(
    union: DataFrame, distinct: Sequence[int], *, every: bool, ops: bool = False
) -> list[Row]:
    """Per load ordinal: corrupt records, rows without id, repeated ids (counted for
    ``distinct``'s loads; 0 for the others, NULL when ``distinct`` is empty), rows with
    mistyped values, rows; with ``ops`` (some load is DMS data) the rows whose ``Op`` is not a
    DMS operation and the first of them (``seq``, ``op``: ``first_bad_op``), else 0 and NULL.
    Grouped by (ordinal, id) first, then by ordinal: Spark would plan
    ``count - count_distinct`` beside the other sums by expanding every row into two
    (``RewriteDistinctAggregates``). ``every``: ``distinct`` holds every load, so the first
    grouping is by the ``id`` column itself, which rows spread by id (``_spread``) are already
    partitioned by: no shuffle of the ids."""
    ordinal = F.shiftright(F.col("__seq").cast("long"), SEQ_SHIFT)
    counted_id = F.col("id") if every else F.when(_ordinal_in(ordinal, distinct), F.col("id"))
    bad_op = F.col(BAD_OP).isNotNull()
    first_op = F.struct(F.col("__seq").alias("seq"), F.col(BAD_OP).alias("op"))
    per_id = union.groupBy(ordinal.alias("ordinal"), counted_id.alias("counted")).agg(
        F.sum(F.col("__corrupt").cast("int")).alias("corrupt"),
        F.sum(F.col("id").isNull().cast("int")).alias("no_id"),
        F.sum(F.col("__bad_cols").isNotNull().cast("int")).alias("bad_rows"),
        F.count(F.lit(1)).alias("rows"),
        *(
            [
                F.sum(bad_op.cast("int")).alias("bad_ops"),
                F.min(F.when(bad_op, first_op)).alias("first_bad_op"),
            ]
            if ops
            else []
        ),
    )
    return (
        per_id.groupBy("ordinal")
        .agg(
            *(
                [F.sum("bad_ops").alias("bad_ops"), F.min("first_bad_op").alias("first_bad_op")]
                if ops
                else [F.lit(0).alias("bad_ops"), F.lit(None).alias("first_bad_op")]
            ),
            F.sum("corrupt").alias("corrupt"),
            F.sum("no_id").alias("no_id"),
            (
                F.coalesce(
                    F.sum(F.when(F.col("counted").isNotNull(), F.col("rows") - 1)), F.lit(0)
                ).alias("dup_ids")
                if distinct
                else F.lit(None).cast("long").alias("dup_ids")
            ),
            F.sum("bad_rows").alias("bad_rows"),
            F.sum("rows").alias("rows"),
        )
        .collect()
    )


def _op_checked(load: Load) -> bool:
    """Whether a load's rows may have an ``Op`` to check (DMS data)."""
    return isinstance(load.source, Files | Events) and load.source.format is DataFormat.DMS


def _where(load: Load) -> str:
    """A load as error messages name it: its action, target schema and source."""
    return f"actions[{load.action_index}] {load.schema.name} from {_describe(load)}"


def _types_named(load: Load, columns: Sequence[str]) -> str:
    """The schema's types of ``columns`` as a TYPE_MISMATCH names them; a decimal's says that it
    takes a value only whole (too many digits after the point is no fit: never rounded)."""
    types = {f.name: f.dataType for f in spark_schema(load.schema).fields}
    named = []
    for column in columns:
        kind = types.get(column)
        if isinstance(kind, DecimalType):
            named.append(
                f"{column}: {kind.simpleString()}, at most {kind.precision - kind.scale} digits "
                f"before the point and {kind.scale} after, never rounded"
            )
        elif kind is not None:
            named.append(f"{column}: {kind.simpleString()}")
    return "; ".join(named)


def _mistyped_columns(union: DataFrame, ordinals: list[int]) -> dict[int, list[str]]:
    """Per load ordinal, the columns some of whose values did not fit the schema's type."""
    if not ordinals:
        return {}
    ordinal = F.shiftright(F.col("__seq").cast("long"), SEQ_SHIFT)
    found: dict[int, list[str]] = defaultdict(list)
    for row in (
        union.where(_ordinal_in(ordinal, ordinals) & F.col("__bad_cols").isNotNull())
        .select(ordinal.alias("ordinal"), F.explode("__bad_cols").alias("column"))
        .distinct()
        .collect()
    ):
        found[int(row["ordinal"])].append(row["column"])
    return {number: sorted(columns) for number, columns in found.items()}


def _ordinal_in(ordinal: Column, ordinals: Sequence[int]) -> Column:
    """``ordinal IN (ordinals)`` without a py4j call per ordinal (``one_of``; a long's text is
    exact, so comparing texts is comparing numbers)."""
    return one_of(ordinal.cast("string"), [str(o) for o in ordinals])


def _many_changes_per_key(load: Load) -> bool:
    """Whether several rows of one key in ``load`` are changes, applied in file order: DMS files;
    JSON and Parquet files of UPSERT, PATCH, DELETE or INSERT_IGNORE into a schema with a
    watermark or a tombstone key (seed 001: the rows of a key are resolved by the watermark,
    NULL smallest, on a tie the later row wins). Otherwise a key given twice is DUPLICATE_ID.
    A change feed's events are changes, as DMS rows are."""
    if isinstance(load.source, Events):
        return True
    if not isinstance(load.source, Files):
        return False
    if load.source.format is DataFormat.DMS:
        return True
    if load.source.format is DataFormat.JSON:
        return batchable(load) and load.schema.changes_by_watermark
    return (
        load.source.format is DataFormat.PARQUET
        and load.schema.is_object
        and load.schema.changes_by_watermark
        and load.kind in BATCHED_KINDS
        and load.operation not in (Operation.MERGE, Operation.REPLACE)
    )


def _in_file_order(load: Load, raw: DataFrame) -> DataFrame:
    """Parquet rows of a load whose rows are changes (``_many_changes_per_key``) numbered in
    file order as DMS rows are (``ROW``, ``_numbered_by_file``); others as they are."""
    files = load.source
    if ROW in raw.columns or not (
        isinstance(files, Files)
        and files.format is DataFormat.PARQUET
        and _many_changes_per_key(load)
    ):
        return raw
    return _numbered_by_file(raw, one_file=_one_file(files))


def changes_only(df: DataFrame) -> DataFrame:
    """Drop the check columns."""
    return df.drop("__bad_cols", "__corrupt", BAD_OP)
