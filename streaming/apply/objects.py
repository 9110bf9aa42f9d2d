"""Apply a micro-batch's changes to one object table: fold per key, one MERGE, appends.

Input: every change of the batch to one table, as rows of ``id``, ``__seq`` (the order:
``action ordinal << 32 | row``), ``__tx``, ``__kind`` (a ``ChangeKind``), ``__cols`` (PATCH:
the columns the source has), ``__flags`` (extended format: column → flags), ``__version`` and
``__created`` (REPLACE: the scope's new version and created time) and ``data`` (a struct of the
properties). The stored state of each touched key (its live row, else its latest tombstone) is
looked up and ``core.fold`` runs once per key, in (id, seq) order. Its output is
- ``state`` rows: the new current row of every key that changed → one Delta MERGE of the
  current table, and for the keys it deletes one append to the tombstones table;
- ``history`` rows → one append to the append-only history table (``append_history``, once
  every table of the segment is written);
- ``effect`` rows: what each change did → the outcome counts.

Two ways to run the same fold, chosen by the number of changes:
- **small** (at most ``DRIVER_FOLD_MAX_ROWS``, the common micro-batch): the changes and the
  stored rows of their keys (read with the keys pushed down, so Delta skips files) are collected
  to the driver and folded there; the MERGE source is the folded rows. No Python worker, no
  shuffle, two Spark jobs before the MERGE.
- **large**: the fold runs on the JVM (``streaming.apply.sqlfold``: one SQL ``aggregate`` per key
  over its changes in seq order), joined with the stored rows of the batch's keys; its result
  is materialised once for the counts and the writes. A current table with no rows (a first
  load) reads nothing and is appended to instead of merged; when it has no tombstones either,
  the row of each key with one change is a projection (``sqlfold.first_rows``) instead of a
  fold, written as it is computed (nothing materialised), and only the keys with more than
  one change (a snapshot's hot keys) are folded. A schema with a map-typed property keeps the
  Python fold in a worker per partition (``mapInArrow``).

Both paths name in the stored-row read and the MERGE condition either the keys themselves (up
to ``KEY_PUSHDOWN_MAX``) or the id spans of the current table that can hold them
(``core.spans``), so that Delta skips the files no key of the batch can be in.

The sink only appends to the tombstones table: one row per delete (or per moved watermark, see
``core.fold``), and a key's tombstone is its row with the largest version, then the largest
watermark (a key live again is in the current table, which wins); the job's upkeep drops the
rows that decide nothing (``storage.tombstones.prune``).
"""

from __future__ import annotations

import logging
import operator
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import reduce
from typing import Any, NamedTuple

import pyarrow as pa
from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streaming.apply.sqlfold import first_rows, fold_rows, has_map, supported
from streaming.core.catalog import SchemaDef
from streaming.core.changes import SEQ_SHIFT
from streaming.core.faults import crash_point
from streaming.core.fold import Change, ChangeKind, Effect, Folded, Stored, fold
from streaming.core.layout import ObjectTable
from streaming.core.spans import Span, covering, keys_spans, spans
from streaming.platform.spark import auto_broadcast_threshold, driver_max_heap
from streaming.storage.commits import BatchCommit, append, idempotent, session_conf
from streaming.storage.log import holds_no_rows, id_ranges, known_size, latest_version
from streaming.storage.retry import on_conflict_retry
from streaming.storage.schemas import spark_schema
from streaming.storage.tables import memory_bytes, one_of, read_table
from streaming.storage.tombstones import DeletedKeys, later

__all__ = [
    "BROADCAST_KEYS_MAX",
    "DRIVER_FOLD_MAX_ROWS",
    "KEY_PUSHDOWN_MAX",
    "MERGE_BROADCAST_MAX_BYTES",
    "REPEATED_KEYS_MAX",
    "TableResult",
    "append_history",
    "apply_to_object_table",
    "broadcast_limit",
    "broadcasts",
]

log = logging.getLogger(__name__)


def _fold_schema(data: StructType, mark: StructType | None) -> StructType:
    fields = [
        StructField("__row_kind", StringType()),
        StructField("id", StringType()),
        StructField("version", LongType()),
        StructField("created", TimestampType()),
        StructField("updated", TimestampType()),
        StructField("__deleted", BooleanType()),
        StructField("__op", StringType()),
        StructField("__tx", StringType()),
        StructField("__seq", LongType()),
        StructField("__effect", StringType()),
        StructField("__stored", BooleanType()),
        StructField("data", data),
    ]
    return StructType([*fields, StructField("__mark", mark)] if mark else fields)


@dataclass(frozen=True)
class _Folder:
    """Runs ``core.fold`` over Arrow rows of one key; ``watermark`` = the schema's columns."""

    watermark: tuple[str, ...]

    def _mark(self, data: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
        if not self.watermark or data is None:
            return None
        return tuple(data.get(c) for c in self.watermark)

    def stored(self, row: dict[str, Any]) -> Stored:
        """A key's state before the batch: its live row, else its tombstone, else nothing."""
        if row["s_version"] is not None:
            data = row["s_data"]
            return Stored(
                data, row["s_version"], row["s_created"], row["s_updated"], self._mark(data)
            )
        if row["t_version"] is not None:
            return Stored(None, row["t_version"], watermark=self._mark(row.get("t_mark")))
        return Stored()

    def change(self, row: dict[str, Any]) -> Change:
        cols = row["__cols"]
        return Change(
            seq=row["__seq"],
            transaction_id=row["__tx"],
            kind=ChangeKind(row["__kind"]),
            at=row["__at"],
            data=row["data"],
            columns=tuple(cols) if cols is not None else None,
            watermark=self._mark(row["data"]),
            flags=dict(row["__flags"]) if row["__flags"] else None,
            version=row["__version"],
            created=row["__created"],
        )

    def output_rows(self, key: str, stored: Stored, folded: Folded) -> Iterator[dict[str, Any]]:
        """The fold's rows of one key (``_fold_schema``); ``stored``: its state before."""
        for seq, effect in folded.effects:
            yield {"__row_kind": "effect", "id": key, "__seq": seq, "__effect": effect}
        if not folded.changed:
            return
        final = folded.final
        state = {
            "__row_kind": "state",
            "id": key,
            "version": final.version,
            "created": final.created,
            "updated": final.updated,
            "__deleted": not final.live,
            "__stored": stored.live,
            "data": dict(final.data) if final.data is not None else None,
        }
        if self.watermark and final.watermark is not None:
            state["__mark"] = dict(zip(self.watermark, final.watermark, strict=True))
        yield state
        for h in folded.history:
            yield {
                "__row_kind": "history",
                "id": key,
                "version": h.version,
                "created": h.created,
                "updated": h.updated,
                "__deleted": h.deleted,
                "__op": h.op,
                "__tx": h.transaction_id,
                "data": dict(h.data),
            }

    def partitions(self, out: pa.Schema) -> Any:
        """A mapInArrow function folding runs of equal ids (rows arrive sorted by id, seq)."""

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            key: str | None = None
            group: list[dict[str, Any]] = []
            rows_out: list[dict[str, Any]] = []

            def flush() -> None:
                if key is not None and group:
                    stored = self.stored(group[0])
                    folded = fold(stored, [self.change(r) for r in group])
                    rows_out.extend(self.output_rows(key, stored, folded))

            for batch in batches:
                for row in batch.to_pylist():
                    if row["id"] != key:
                        flush()
                        key, group = row["id"], []
                    group.append(row)
                if len(rows_out) >= 10_000:
                    yield pa.RecordBatch.from_pylist(rows_out, schema=out)
                    rows_out = []
            flush()
            if rows_out:
                yield pa.RecordBatch.from_pylist(rows_out, schema=out)

        return run


@dataclass
class TableResult:
    """What one table's apply did: counts per (action ordinal, effect), the version after, and
    the history rows still to append (``append_history``)."""

    counts: dict[tuple[int, Effect], int]
    version: int
    history: DataFrame | None
    on_driver: bool = False
    """``history`` is a local relation of rows folded on the driver (``_apply_small``)."""


DRIVER_FOLD_MAX_ROWS = 20_000
"""Up to this many changes to one table in one wave are folded on the driver."""
BROADCAST_KEYS_MAX = 1_000_000
"""Up to this many changes, the large path reads only the stored rows of their keys (a
broadcast semi-join) instead of shuffling the whole table into the fold's join."""
KEY_PUSHDOWN_MAX = 2_000
"""Up to this many keys are pushed into the stored-rows read and the MERGE condition
(``id IN (...)``) for Delta's file skipping; more would make the condition itself the cost."""

MERGE_BROADCAST_MAX_BYTES = 64 << 20
"""The large path broadcasts its MERGE source (the held keys' new rows) up to about this many
bytes in memory, so the MERGE does not shuffle the table's rows (``_write_current``); and at
most a sixteenth of the driver's heap (``broadcast_limit``)."""


def broadcast_limit(spark: SparkSession) -> int:
    """The most bytes of a MERGE source the large path broadcasts: ``MERGE_BROADCAST_MAX_BYTES``,
    at most a sixteenth of the driver's heap (the driver collects the source and builds its
    hash table), and -1 — never — when the session turns broadcast joins off
    (``spark.sql.autoBroadcastJoinThreshold = -1``)."""
    if auto_broadcast_threshold(spark) < 0:
        return -1
    heap = driver_max_heap(spark)
    return min(MERGE_BROADCAST_MAX_BYTES, heap // 16)


def broadcasts(size: int | None, held: int, wide: int, limit: int) -> bool:
    """Whether to broadcast a MERGE source of ``held`` rows: their bytes, estimated as their
    share of the ``wide`` (state and history) rows of a materialised fold of ``size`` bytes
    (None: unknown), are at most ``limit`` (negative: never)."""
    return size is not None and limit >= 0 and size * held <= limit * wide


_LARGE_PATH = threading.Lock()
"""The large path writes through the session its changes come from (the query's), whose
idempotency keys are session conf: one table at a time."""


def apply_to_object_table(
    spark: SparkSession,
    *,
    changes: DataFrame,
    schema: SchemaDef,
    paths: ObjectTable,
    before: Mapping[str, int],
    commit: BatchCommit,
    inserts: BatchCommit,
    partitions: int,
    count: int | None = None,
    unique: bool = False,
    deleted: DeletedKeys | None = None,
) -> TableResult:
    """Fold the batch's changes into one object schema's tables, each read as of its version
    ``before`` this batch (the same state again when the batch is replayed). ``commit``: the
    step of the MERGE and the tombstones (and later the history), ``inserts``: the step of the
    append of new keys to the current table (``_write_current``). ``count``: the
    number of changes if known (the check job counts them), else they are counted here;
    ``unique``: the check job found no key with two changes.
    ``deleted``: the tombstones the sink holds on the driver (``streaming.storage.tombstones``).

    ``spark`` is a session of this table's own (``runtime.parallel``): tables of a wave are
    applied concurrently, and Delta takes a MERGE's idempotency keys from session conf."""
    rows: list[Row] | None = None
    result: TableResult | None = None
    try:
        if count is None:
            first = _on_driver(changes.limit(DRIVER_FOLD_MAX_ROWS + 1))  # a job per few parts
            rows = first if len(first) <= DRIVER_FOLD_MAX_ROWS else None
        elif count <= DRIVER_FOLD_MAX_ROWS:
            rows = _on_driver(changes)
        if rows is not None:
            result = _apply_small(spark, rows, schema, paths, before, (commit, inserts), deleted)
    except _NotInPython as e:
        log.info("%s: the fold runs on the executors: %s", schema.name, e)
    if result is None:
        if deleted is not None:
            deleted.forget(paths.tombstones)
        with _LARGE_PATH:
            result = _apply_large(
                changes,
                schema,
                paths,
                before,
                (commit, inserts),
                partitions,
                count=count,
                unique=unique,
            )
    crash_point("between_commits")
    return result


def append_history(result: TableResult, paths: ObjectTable, commit: BatchCommit) -> None:
    """Append a table's history rows. History is append-only: it cannot be restored, so it is
    written after every current table of the batch, and a failure here is rolled forward."""
    if result.history is not None:
        append(result.history, paths.history, commit)


# -- small: fold on the driver ------------------------------------------------------------------
def _apply_small(
    spark: SparkSession,
    rows: list[Row],
    schema: SchemaDef,
    paths: ObjectTable,
    before: Mapping[str, int],
    commits: tuple[BatchCommit, BatchCommit],
    deleted: DeletedKeys | None,
) -> TableResult:
    commit = commits[0]
    data_schema = spark_schema(schema)
    props = [f.name for f in data_schema.fields]
    watermark = tuple(schema.watermark)
    mark = StructType([data_schema[c] for c in watermark]) if watermark else None
    folder = _Folder(watermark)
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: (r["id"], r["__seq"])):
        by_key[row["id"]].append({**row.asDict(recursive=True), "__at": commit.at})
    keys = sorted(by_key)
    stored: dict[str, dict[str, Any]] = {}
    within = None
    if not _nothing_stored(spark, paths, before):
        within = None if len(keys) <= KEY_PUSHDOWN_MAX else _spans(spark, paths, before, keys=keys)
        stored = _stored_rows(spark, paths, before, keys, props, mark, deleted, within)
    out: list[dict[str, Any]] = []
    for key, group in by_key.items():
        before_batch = folder.stored(stored.get(key, _NOTHING))
        folded = fold(before_batch, [folder.change(r) for r in group])
        out.extend(folder.output_rows(key, before_batch, folded))
    counts: Counter[tuple[int, Effect]] = Counter(
        (int(r["__seq"]) >> SEQ_SHIFT, r["__effect"]) for r in out if r["__row_kind"] == "effect"
    )
    state = [r for r in out if r["__row_kind"] == "state"]
    history = None
    if state:
        out_schema = _fold_schema(data_schema, mark)
        written = _writes(counts)
        if written:  # else only tombstones' watermarks moved: the current table stays as it is
            _write_current(
                spark.createDataFrame(state, out_schema),
                props,
                paths,
                commits,
                held=any(r["__stored"] for r in state),
                new=any(not r["__stored"] and not r["__deleted"] for r in state),
                keys=sorted({r["id"] for r in state}),
                within=within,
                split=False,
            )
        gone = [r for r in state if r["__deleted"]]
        if gone:
            _append_tombstones(spark.createDataFrame(gone, out_schema), paths, commit, mark)
            if deleted is not None:
                deleted.appended(
                    paths.tombstones,
                    before[paths.tombstones],
                    latest_version(spark, paths.tombstones),
                    [
                        {"id": r["id"], "version": r["version"], "watermark": r.get("__mark")}
                        for r in gone
                    ],
                )
        if written:
            history = _history_rows(
                spark.createDataFrame([r for r in out if r["__row_kind"] == "history"], out_schema),
                props,
            )
    return TableResult(dict(counts), latest_version(spark, paths.current), history, on_driver=True)


class _NotInPython(Exception):
    """Rows PySpark cannot hand to Python: the fold runs on the executors instead."""


def _on_driver(frame: DataFrame) -> list[Row]:
    """``frame``'s rows for the driver's fold, before it writes anything. PySpark turns a
    timestamp into a local ``datetime`` with ``datetime.fromtimestamp``, which fails within a
    day of its limits (``0001-01-01``, ``9999-12-31``: sentinels databases use): such a batch
    is folded by Spark (``_apply_large``), which never converts a value."""
    try:
        return frame.collect()
    except (ValueError, OverflowError) as e:
        raise _NotInPython(f"a value Python cannot hold ({e})") from e


def _writes(counts: Mapping[tuple[int, Effect], int]) -> bool:
    """Whether the batch inserts, updates or deletes a row of the current table (else at most
    tombstones' watermarks moved, and the current table and history stay as they are)."""
    return any(effect in ("inserted", "updated", "deleted") for _, effect in counts)


_NOTHING: dict[str, Any] = {"s_version": None, "t_version": None}


def _nothing_stored(spark: SparkSession, paths: ObjectTable, before: Mapping[str, int]) -> bool:
    """Whether the current and tombstones tables held no rows at the batch's versions, as
    Delta's checksum of the snapshot this process holds says without a Spark job (a table the
    job created or last wrote): then there is no stored row to read (a table's first write;
    reading the keys of an empty table took 5 Spark jobs). Unknown: False, the keys are read."""
    return all(
        known_size(spark, path, before[path]) == 0 for path in (paths.current, paths.tombstones)
    )


def _stored_rows(
    spark: SparkSession,
    paths: ObjectTable,
    before: Mapping[str, int],
    keys: list[str],
    props: list[str],
    mark: StructType | None,
    deleted: DeletedKeys | None,
    within: list[Span] | None,
) -> dict[str, dict[str, Any]]:
    """id → the key's stored state as ``_Folder.stored`` reads it: its live row (``s_*``) and
    its latest tombstone (``t_*``), for the given keys only: one Spark job, and Delta skips the
    files whose id range holds none of them (``within``: the spans of the current table that
    can, for more keys than a filter lists). Tombstones the sink holds on the driver
    (``deleted``) are not read again."""
    held = (
        deleted.of_keys(spark, paths.tombstones, before[paths.tombstones], keys, mark is not None)
        if deleted is not None
        else None
    )
    current = _within(read_table(spark, paths.current, before[paths.current]), within)
    live = _of_keys(spark, current, keys).select(
        F.lit(True).alias("live"),
        "id",
        "version",
        "created",
        "updated",
        F.struct(*props).alias("data"),
        *([F.lit(None).cast(mark).alias("mark")] if mark else []),
    )
    if held is None:
        live = live.unionByName(
            _of_keys(
                spark, read_table(spark, paths.tombstones, before[paths.tombstones]), keys
            ).select(
                F.lit(False).alias("live"),
                "id",
                "version",
                F.lit(None).cast("timestamp").alias("created"),
                F.lit(None).cast("timestamp").alias("updated"),
                F.lit(None).cast(live.schema["data"].dataType).alias("data"),
                *([F.col("watermark").alias("mark")] if mark else []),
            )
        )
    stored: dict[str, dict[str, Any]] = {
        key: {**_NOTHING, "t_version": version, "t_mark": watermark}
        for key, (version, watermark) in (held or {}).items()
    }
    for row in _on_driver(live):
        entry = stored.setdefault(row["id"], dict(_NOTHING))
        if row["live"]:
            entry["s_version"], entry["s_created"] = row["version"], row["created"]
            entry["s_updated"] = row["updated"]
            entry["s_data"] = row["data"].asDict(recursive=True)
        else:
            watermark = row["mark"].asDict(recursive=True) if mark and row["mark"] else None
            found = (row["version"], watermark)
            if entry["t_version"] is None or later(found, (entry["t_version"], entry["t_mark"])):
                entry["t_version"], entry["t_mark"] = found
    return stored


def _of_keys(spark: SparkSession, table: DataFrame, keys: list[str]) -> DataFrame:
    """The rows of ``table`` whose id is one of ``keys``: up to ``KEY_PUSHDOWN_MAX`` keys as a
    filter Delta skips files with; more as a broadcast semi-join (a filter of 20,000 literals
    cost W2's batch seconds of planning, more than the files it skips)."""
    if len(keys) <= KEY_PUSHDOWN_MAX:
        return table.where(one_of(F.col("id"), keys))
    ids = spark.createDataFrame([(k,) for k in keys], "id string")
    return table.join(F.broadcast(ids), "id", "left_semi")


def _spans(
    spark: SparkSession,
    paths: ObjectTable,
    before: Mapping[str, int],
    *,
    keys: list[str] | None = None,
    changes: DataFrame | None = None,
) -> list[Span] | None:
    """The id spans of the current table (as of ``before``) that can hold a stored row of the
    batch's keys (``core.spans``): ``keys`` on the driver, or ``changes`` (one Spark job).
    None when no file would be skipped, or Delta's statistics cannot say."""
    ranges = id_ranges(spark, paths.current, before[paths.current])
    ordered = spans(ranges) if ranges else []
    if len(ordered) < 2:  # one span: every file overlaps the next (rows in random id order)
        return None
    if keys is not None:
        touched = keys_spans(ordered, keys)
    else:
        assert changes is not None
        rows = [(i, low, high) for i, (low, high) in enumerate(ordered)]
        table = spark.createDataFrame(rows, "i int, low string, high string")
        hit = (F.col("id") >= F.col("low")) & (F.col("id") <= F.col("high"))
        found = changes.select("id").join(F.broadcast(table), hit).select("i").distinct()
        touched = {int(r["i"]) for r in found.collect()}
    return covering(ordered, touched)


def _within(table: DataFrame, within: list[Span] | None) -> DataFrame:
    return table if within is None else table.where(_in_spans(F.col("id"), within))


def _in_spans(column: Column, within: list[Span]) -> Column:
    """``column`` lies in one of the spans (none: false): a predicate Delta skips files with."""
    ranges = [(column >= low) & (column <= high) for low, high in within]
    return reduce(operator.or_, ranges) if ranges else F.lit(False)


# -- large: fold on the executors -------------------------------------------------------------
def _apply_large(
    changes: DataFrame,
    schema: SchemaDef,
    paths: ObjectTable,
    before: Mapping[str, int],
    commits: tuple[BatchCommit, BatchCommit],
    partitions: int,
    *,
    count: int | None,
    unique: bool,
) -> TableResult:
    commit = commits[0]
    spark = changes.sparkSession
    data_schema = spark_schema(schema)
    props = [f.name for f in data_schema.fields]
    watermark = tuple(schema.watermark)
    mark = StructType([data_schema[c] for c in watermark]) if watermark else None
    # A first load (nothing stored yet): no stored rows to read, and an append, not a MERGE.
    first_load = holds_no_rows(spark, paths.current, before[paths.current])
    no_tombstones = holds_no_rows(spark, paths.tombstones, before[paths.tombstones])
    if first_load and no_tombstones:
        if unique:
            return _apply_first_load(changes, data_schema, watermark, paths, commits)
        if supported(data_schema):
            repeated, n = _repeated_keys(changes)
            if n <= REPEATED_KEYS_MAX:
                keys = repeated if n else None
                return _apply_first_load(changes, data_schema, watermark, paths, commits, keys)
    within = None if first_load else _spans(spark, paths, before, changes=changes)
    current = _within(read_table(spark, paths.current, before[paths.current]), within)
    current = current.select(
        "id",
        F.col("version").alias("s_version"),
        F.col("created").alias("s_created"),
        F.col("updated").alias("s_updated"),
        F.struct(*props).alias("s_data"),
    )
    if count is not None and count <= BROADCAST_KEYS_MAX:
        # Only the stored rows of the batch's keys reach the join: the table is not shuffled.
        current = current.join(F.broadcast(changes.select("id").distinct()), "id", "left_semi")
    order = F.struct("version", *(["watermark"] if mark else []))
    latest = F.max_by(order, order).alias("t")  # a key's tombstone: ``tombstones.later``
    tombstones = (
        read_table(spark, paths.tombstones, before[paths.tombstones])
        .groupBy("id")
        .agg(latest)
        .select(
            "id",
            F.col("t.version").alias("t_version"),
            *([F.col("t.watermark").alias("t_mark")] if mark else []),
        )
    )
    out_schema = _fold_schema(data_schema, mark)
    if supported(data_schema):
        rows = fold_rows(
            changes,
            None if first_load else current,
            None if no_tombstones else tombstones,
            unique=unique,
            data=data_schema,
            watermark=watermark,
            at=commit.at,
            out=out_schema,
        )
    else:  # a map-typed property: SQL cannot compare rows, the Python fold can
        rows = (
            changes.withColumn("__at", F.lit(commit.at).cast("timestamp"))
            .join(current, "id", "left")
            .join(tombstones, "id", "left")
            .repartition(partitions, "id")
            .sortWithinPartitions("id", "__seq")
            .mapInArrow(
                _Folder(watermark).partitions(to_arrow_schema(out_schema, timezone="UTC")),
                out_schema,
            )
        )
    folded = _materialised(rows)
    counts, (deletes, held, new, wide) = _fold_counts(folded)
    history = None
    state = folded.where("__row_kind = 'state'")
    if _writes(counts):
        size = memory_bytes(folded)
        broadcast = broadcasts(size, held, wide, broadcast_limit(spark))
        log.debug(
            "%s: %d held keys merged (source broadcast: %s; the fold holds %s bytes), %d new",
            paths.current,
            held,
            broadcast,
            size,
            new,
        )
        _write_current(
            state,
            props,
            paths,
            commits,
            held=held > 0,
            new=new > 0,
            within=within,
            split=True,
            broadcast=broadcast,
        )
        history = _history_rows(folded.where("__row_kind = 'history'"), props)
    if deletes:  # also a tombstone whose watermark moved (``core.fold``: a skipped delete)
        _append_tombstones(state.where("__deleted"), paths, commit, mark)
    return TableResult(counts, latest_version(spark, paths.current), history)


def _materialised(rows: DataFrame) -> DataFrame:
    """A fold's rows with their ``hash`` (state and history rows), materialised once: the
    counts, the MERGE (which reads its source twice) and the history append all read them, and
    writing the table must not make Spark recompute them from the table's new state."""
    hashed = rows.withColumn("hash", F.when(F.col("__row_kind") != "effect", _hash(rows)))
    return hashed.localCheckpoint(eager=True)


class _Tally(NamedTuple):
    """What a fold's state and history rows hold: ``deletes`` (state rows of deleted keys),
    ``held`` (of keys stored before), ``new`` (of keys inserted), ``wide`` (state and history
    rows)."""

    deletes: int
    held: int
    new: int
    wide: int


def _fold_counts(folded: DataFrame) -> tuple[dict[tuple[int, Effect], int], _Tally]:
    """One job over a materialised fold: the counts per (action ordinal, effect) of its effect
    rows, and the tally of its other rows."""
    counts: dict[tuple[int, Effect], int] = {}
    deletes = held = new = wide = 0
    for r in (
        folded.groupBy(
            "__row_kind",
            F.shiftright("__seq", SEQ_SHIFT).alias("ordinal"),
            "__effect",
            "__deleted",
            "__stored",
        )
        .agg(F.count("*").alias("n"))
        .collect()
    ):
        n = int(r["n"])
        if r["__row_kind"] == "effect":
            counts[(int(r["ordinal"]), r["__effect"])] = n
            continue
        wide += n
        if r["__row_kind"] == "state":
            deletes += n if r["__deleted"] else 0
            held += n if r["__stored"] else 0
            new += n if not (r["__stored"] or r["__deleted"]) else 0
    return counts, _Tally(deletes, held, new, wide)


REPEATED_KEYS_MAX = 200_000
"""A first load whose keys with more than one change are at most this many folds only those
(``_apply_first_load``); their ids are broadcast, so the driver holds them."""


def _repeated_keys(changes: DataFrame) -> tuple[DataFrame, int]:
    """The ids with more than one change among ``changes``, materialised — a job that shuffles
    the ids alone, not the rows — and how many they are."""
    keys = (
        changes.groupBy("id")
        .agg(F.count("*").alias("n"))
        .where("n > 1")
        .select("id")
        .localCheckpoint(eager=True)
    )
    return keys, keys.count()


def _apply_first_load(
    changes: DataFrame,
    data_schema: StructType,
    watermark: tuple[str, ...],
    paths: ObjectTable,
    commits: tuple[BatchCommit, BatchCommit],
    repeated: DataFrame | None = None,
) -> TableResult:
    """A first load (no stored rows, no tombstones): each change of a key with one change in
    the batch gives its row by a projection (``sqlfold.first_rows``) of the cached changes —
    nothing grouped, joined, merged or materialised — and only the keys in ``repeated`` (the
    ids with more than one change, found by ``_repeated_keys``; None when none has) are
    folded (``sqlfold.fold_rows``, grouped, over nothing stored) and materialised. Both take
    their ids from the changes by a broadcast (anti- or semi-) join: no shuffle of the rows.
    Then the counts, and one append of the inserted rows, the projected ones hashed as they
    are written (a big file of one row group comes spread over the cores: ``loads._spread``).
    History is the projection again, appended after the batch's last wave: the changes stay
    cached until the batch ends (``loads.load_wave``'s ``held``), and the projection and hash
    give the same rows each time.

    A snapshot followed by the source's transactions (a database's first day) is this: most
    keys are read once, the hot ones changed again."""
    spark = changes.sparkSession
    props = [f.name for f in data_schema.fields]
    mark = StructType([data_schema[c] for c in watermark]) if watermark else None
    once = changes if repeated is None else changes.join(F.broadcast(repeated), "id", "left_anti")
    rows = first_rows(once, data=data_schema, watermark=watermark, at=commits[0].at)
    counts: dict[tuple[int, Effect], int] = defaultdict(int)
    deletes = 0
    for r in (
        rows.groupBy(F.shiftright("__seq", SEQ_SHIFT).alias("ordinal"), "__effect", "__deleted")
        .count()
        .collect()
    ):
        counts[(int(r["ordinal"]), r["__effect"])] += int(r["count"])
        deletes += int(r["count"]) if r["__deleted"] else 0
    folded = None
    if repeated is not None:
        folded = _materialised(
            fold_rows(
                changes.join(F.broadcast(repeated), "id", "left_semi"),
                None,
                None,
                unique=False,
                data=data_schema,
                watermark=watermark,
                at=commits[0].at,
                out=_fold_schema(data_schema, mark),
            )
        )
        more, tally = _fold_counts(folded)
        for key, n in more.items():
            counts[key] += n
        deletes += tally.deletes
    history = None
    if _writes(counts):
        inserted = _with_hash(rows.where("__effect = 'inserted'"), props)
        current = _current_rows(inserted, props)
        history = _history_of(inserted, props)
        if folded is not None:
            state = _with_hash(folded.where("__row_kind = 'state' AND NOT __deleted"), props)
            current = current.unionByName(_current_rows(state, props))
            history = history.unionByName(
                _history_rows(folded.where("__row_kind = 'history'"), props)
            )
        append(current, paths.current, commits[1])
    if deletes:
        gone = _tombstone_rows(rows.where("__deleted"), mark)
        if folded is not None:
            state = folded.where("__row_kind = 'state' AND __deleted")
            gone = gone.unionByName(_tombstone_rows(state, mark))
        append(gone, paths.tombstones, commits[0])
    return TableResult(dict(counts), latest_version(spark, paths.current), history)


# -- writes -------------------------------------------------------------------------------------
def _with_hash(df: DataFrame, props: list[str], keep: tuple[str, ...] = ()) -> DataFrame:
    """The rows with their ``hash`` (``_hash``; computed here unless ``df`` has it already)
    and their properties flattened to columns; ``keep``: other columns to keep."""
    mark = ["__mark"] if "__mark" in df.columns else []
    return df.select(
        *keep,
        "id",
        "version",
        "created",
        "updated",
        (F.col("hash") if "hash" in df.columns else _hash(df)).alias("hash"),
        *[F.col(f"data.{p}").alias(p) for p in props],
        "__deleted",
        "__op",
        "__tx",
        *mark,
    )


def _hash(df: DataFrame) -> Column:
    """The SHA-256 of the JSON of ``df``'s ``data`` (NULLs left out), map entries in key order:
    the same content gives the same hash whichever fold wrote it."""
    return F.sha2(F.to_json(_in_key_order(F.col("data"), df.schema["data"].dataType)), 256)


def _in_key_order(value: Column, dtype: DataType) -> Column:
    """``value`` with the entries of every map in it (at any depth) sorted by key. A map keeps
    the order its entries were built in, and that order depends on the path the row took
    (JSON reader, Arrow, the driver's dicts); ``to_json`` prints it as it is."""
    if not has_map(dtype):
        return value
    if isinstance(dtype, MapType):
        keys = F.array_sort(F.map_keys(value))
        values = F.transform(keys, lambda k: _in_key_order(value[k], dtype.valueType))
        return F.map_from_arrays(keys, values)
    if isinstance(dtype, ArrayType):
        return F.transform(value, lambda item: _in_key_order(item, dtype.elementType))
    assert isinstance(dtype, StructType)
    fields = [_in_key_order(value[f.name], f.dataType).alias(f.name) for f in dtype.fields]
    return F.when(value.isNull(), F.lit(None).cast(dtype)).otherwise(F.struct(*fields))


def _write_current(
    state: DataFrame,
    props: list[str],
    paths: ObjectTable,
    commits: tuple[BatchCommit, BatchCommit],
    *,
    held: bool,
    new: bool,
    within: list[Span] | None,
    split: bool,
    keys: list[str] | None = None,
    broadcast: bool = False,
) -> None:
    """Write the keys' new rows (``state``) to the current table. ``held``: whether a key it
    held before the batch (``__stored``) is updated or deleted; ``new``: whether a new key is
    inserted; ``keys``: every key of ``state``, for the MERGE condition (see ``_merge``).

    New keys need no join with the table: the fold knows they are not in it (it read the
    stored rows of every key; the sink is the table's only writer of rows), so a batch without
    held keys only appends them (at ``commits[1]``'s step). A MERGE with an insert clause makes
    Delta join its source with the rows of every file it rewrites by a full outer join, which
    shuffles all those rows; a MERGE without one uses a right outer join, whose source side
    Spark broadcasts (``broadcast``: the caller knows the source is small), and the table's
    rows stay where they are. So with ``split`` (a large batch) held keys go by a MERGE
    without an insert clause (at ``commits[0]``'s step) and new ones by an append: two
    commits. Without it (a small batch: the shuffle is of the few files its keys are in and
    costs about what a second commit or a broadcast job does, measured) a batch with held keys
    makes one MERGE with an insert clause, as a first load makes one append. On a table with
    deletion vectors on, only a split write's MERGE marks rows in them (``_merge``'s ``marks``)."""
    if held and not split:
        _merge(
            state, props, paths, commits[0], keys, within, broadcast=False, insert=True, marks=split
        )
        return
    if held:
        source = state.where("__stored")
        _merge(
            source,
            props,
            paths,
            commits[0],
            keys,
            within,
            broadcast=broadcast,
            insert=False,
            marks=split,
        )
    if new:
        rows = _with_hash(state.where("NOT __stored AND NOT __deleted"), props)
        append(_current_rows(rows, props), paths.current, commits[1])


def _merge(
    state: DataFrame,
    props: list[str],
    paths: ObjectTable,
    commit: BatchCommit,
    keys: list[str] | None,
    within: list[Span] | None,
    *,
    broadcast: bool,
    insert: bool,
    marks: bool,
) -> None:
    """One MERGE of the keys' new rows into the current table: a deleted key's row goes, the
    others are updated, and — ``insert`` — the new ones inserted. ``keys``: the ids it matches,
    pushed into the condition for Delta's file skipping (up to ``KEY_PUSHDOWN_MAX``);
    ``within``: the id spans that hold every stored row of the source's keys, pushed in the
    same way; ``broadcast``: hint Spark to broadcast the source; ``marks``: on a table with
    deletion vectors on (``tables.deletion_vectors``), mark the replaced rows in them rather
    than rewrite their files — the large path's choice. A few keys' MERGE (the driver fold)
    rewrites: the vectors cost it more Spark jobs than the rewrite of a few files (quick
    Batch 25: 65 jobs a batch with them, 38 without; BENCHMARKS.md)."""
    spark = state.sparkSession
    source = _with_hash(state, props)
    if broadcast:
        source = F.broadcast(source)
    assignments: dict[str, str | Column] = {
        c: F.col(f"s.{c}") for c in ["version", "created", "updated", "hash", *props]
    }
    condition = F.col("t.id") == F.col("s.id")
    if keys is not None and len(keys) <= KEY_PUSHDOWN_MAX:
        condition = condition & one_of(F.col("t.id"), keys)
    elif within is not None:
        condition = condition & _in_spans(F.col("t.id"), within)

    conf = {**_MERGE_CONF, _MERGE_VECTORS: str(marks).lower()}

    def merge_current() -> None:
        with idempotent(spark, paths.current, commit), session_conf(spark, conf):
            merge = (
                DeltaTable.forPath(spark, paths.current)
                .alias("t")
                .merge(source.alias("s"), condition)
                .whenMatchedDelete(condition="s.__deleted")
                .whenMatchedUpdate(set=assignments)
            )
            if insert:
                merge = merge.whenNotMatchedInsert(
                    condition="NOT s.__deleted", values={"id": F.col("s.id"), **assignments}
                )
            merge.execute()

    on_conflict_retry(merge_current, what=paths.current)


_MERGE_CONF = {
    # The source is materialised already (the large path's fold) or rows from the driver: Delta
    # would copy it into its block manager again first (a Spark job, and the memory twice).
    "spark.databricks.delta.merge.materializeSource": "none",
}


_MERGE_VECTORS = "spark.databricks.delta.merge.deletionVectors.persistent"
"""Whether a MERGE into a table with deletion vectors on writes them (Delta's default: yes)."""


def _current_rows(hashed: DataFrame, props: list[str]) -> DataFrame:
    """Rows of ``_with_hash`` as the current table holds them."""
    return hashed.select("id", "version", "created", "updated", "hash", *props)


def _append_tombstones(
    deleted: DataFrame, paths: ObjectTable, commit: BatchCommit, mark: StructType | None
) -> None:
    """Remember the deleted keys: their tombstone version, deletion time and watermark."""
    append(_tombstone_rows(deleted, mark), paths.tombstones, commit)


def _tombstone_rows(deleted: DataFrame, mark: StructType | None) -> DataFrame:
    """Rows of deleted keys as the tombstones table holds them."""
    return deleted.select(
        "id",
        "version",
        F.col("updated").alias("deleted"),
        *([F.col("__mark").alias("watermark")] if mark else []),
    )


def _history_rows(folded: DataFrame, props: list[str]) -> DataFrame:
    return _history_of(_with_hash(folded, props), props)


def _history_of(hashed: DataFrame, props: list[str]) -> DataFrame:
    """Rows of ``_with_hash`` as the history table holds them."""
    return hashed.select(
        "id",
        "version",
        "created",
        "updated",
        "hash",
        *props,
        F.col("__deleted").alias("__deleted"),
        F.col("__op").alias("__op"),
        F.col("__tx").alias("__transaction_id"),
    )
