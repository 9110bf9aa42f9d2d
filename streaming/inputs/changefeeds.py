"""The change feeds' share of a micro-batch, processed by Spark (``core.feedevents``).

The feeds' records of the batch, and those waiting from earlier batches (``_system/pending``),
are decoded on the executors (an Arrow-batched function applying ``core.changefeed``'s rules),
cached for the batch, and summarised by Spark: one small row per source transaction, per chunk
of events without one, per unreadable record. The driver decides over the summaries
(``feedevents.decide``); what applies is staged by Spark — one frame of rows for the whole
batch, each row carrying its load's ordinal — and read by ``inputs.loads`` as a wave's rows.
What waits is written back to ``_system/pending`` by a Spark write, what is rejected to
quarantine with its records by another; no event crosses to the driver.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from streaming.core.batch import (
    Admitted,
    Committed,
    RawRequest,
    Repeated,
    SourcePosition,
    Verdict,
)
from streaming.core.catalog import Dataset
from streaming.core.changefeed import Decode, Feed, Received, utc
from streaming.core.changes import SEQ_SHIFT
from streaming.core.errors import RejectedError
from streaming.core.feedevents import (
    DECODED_FIELDS,
    BadRecord,
    ChunkSummary,
    Decision,
    End,
    PartCount,
    Piece,
    Ready,
    Summaries,
    TxSummary,
    decide,
    decoded,
    end_counts,
    parts_of,
    request_of,
    source_columns,
    where,
)
from streaming.core.layout import Layout
from streaming.core.plan import Load, plan_staged
from streaming.core.requests import TransactionRequest
from streaming.platform.spark import unpersist
from streaming.storage import pending
from streaming.storage.commits import BatchCommit
from streaming.storage.schemas import QUARANTINE_SCHEMA

__all__ = [
    "ARROW_SCHEMA",
    "DDL",
    "PLACE",
    "RECORD_COLUMNS",
    "ChangeFeeds",
    "FeedBatch",
    "Shape",
    "rules_decoder",
]

_ARROW = {
    "string": pa.string(),
    "int": pa.int32(),
    "long": pa.int64(),
    "binary": pa.binary(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "array<string>": pa.list_(pa.string()),
    "boolean": pa.bool_(),
    "map<string,string>": pa.map_(pa.string(), pa.string()),
}
ARROW_SCHEMA = pa.schema([(name, _ARROW[kind]) for name, kind in DECODED_FIELDS])
DDL = ", ".join(f"`{name}` {kind}" for name, kind in DECODED_FIELDS)
RECORD_COLUMNS = ("feed", "topic", "partition", "offset", "key", "value", "timestamp")
PLACE = ("topic", "partition", "offset")


def rules_decoder(
    feeds: Mapping[str, Feed], decode: Decode
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function the executors run over Arrow batches of records (``RECORD_COLUMNS`` and
    ``received_at``): each record decoded by ``feedevents.decoded``."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            names = ("feed", "topic", "partition", "offset", "key", "value")
            columns = [batch.column(n).to_pylist() for n in names]
            # Times as UTC wall clock, without a time zone: Arrow's conversion of zoned
            # timestamps converts each value; ``utc`` marks them UTC.
            times = [_wall_clock(batch.column(n)).to_pylist() for n in ("timestamp", "received_at")]
            out = [
                decoded(
                    feeds[name],
                    Received(topic, partition, offset, key, value, utc(at), utc(received)),
                    decode,
                )
                for name, topic, partition, offset, key, value, at, received in zip(
                    *columns, *times, strict=True
                )
            ]
            # Column by column (``from_pylist`` looks every field up in every row's dict).
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([_arrow_value(row.get(name)) for row in out], type=field.type)
                    for name, field in zip(ARROW_SCHEMA.names, ARROW_SCHEMA, strict=True)
                ],
                schema=ARROW_SCHEMA,
            )

    return run


def _arrow_value(value: Any) -> Any:
    """A decoded value as Arrow takes it (a map as its entries)."""
    return list(value.items()) if isinstance(value, dict) else value


def _decoded(
    records: DataFrame, feeds: Sequence[Feed], decode: Decode, cached: list[DataFrame]
) -> DataFrame:
    """The records decoded (``DECODED_FIELDS``) by the rules on the executors, cached (listed
    in ``cached``). ``inputs.changeevents`` computes the same rows with Spark's expressions
    (held to the rules by tests/integration/test_feed_decoder.py) but is not used yet: it is
    2.4-5x slower than the rules today (bench workload Decode; issue 58)."""
    frame = records.mapInArrow(rules_decoder({f.name: f for f in feeds}, decode), DDL).persist()
    cached.append(frame)
    return frame


def _wall_clock(times: pa.Array) -> pa.Array:
    """Timestamps (UTC) as UTC wall-clock times without a zone."""
    kind = times.type
    if isinstance(kind, pa.TimestampType) and kind.tz is not None:
        return times.cast(pa.timestamp(kind.unit))
    return times


@dataclass
class FeedBatch:
    """One micro-batch of the change feeds: decoded, decided, staged."""

    spark: SparkSession
    feeds: Sequence[Feed]
    decoded: DataFrame
    decisions: dict[str, Decision]
    had_waiting: bool
    """Whether records waited before the batch (then the pending table is written again)."""
    snapshots: tuple[dict[str, int], dict[str, int]]
    """Feed → the batch that applied its initial snapshot, before and after this one."""
    counts: dict[tuple[str, str], list[PartCount]] = field(default_factory=dict)
    """(feed, item) → its staged events counted per schema and segment."""
    _chosen: DataFrame | None = None
    """The staged events of the ready items, numbered (``_staged_events``), cached."""
    _staged: DataFrame | None = None
    _ordinals: dict[str, list[int]] = field(default_factory=dict)
    """Target schema → the ordinals of its loads."""
    shapes: dict[str, list[Shape]] = field(default_factory=dict)
    """Feed → its staged events' shapes (``Shape``), for ``runtime.sourcecolumns``."""
    _columns: dict[str, list[str]] = field(default_factory=dict)
    """Target schema → its staged rows' columns."""
    cached: list[DataFrame] = field(default_factory=list)
    """Where the batch's cached frames are listed (the sink's list: what an interrupted
    release leaves there, the sink releases later)."""
    _pieces: dict[tuple[str, str], list[Piece]] = field(default_factory=dict)

    # -- what the sink asks ------------------------------------------------------------------
    def ready(self) -> list[tuple[int, Ready]]:
        """(feed index, item) of every ready item, in the order they apply."""
        return [
            (index, item)
            for index, feed in enumerate(self.feeds)
            for item in self.decisions[feed.name].ready
        ]

    def ready_by_id(self) -> dict[str, Ready]:
        """The ready items by transaction id."""
        return {item.transaction_id: item for _, item in self.ready()}

    def pieces(self, item: Ready) -> list[Piece]:
        """The actions of a ready item (``feedevents.parts_of`` over its staged counts)."""
        key = (item.feed.name, item.item)
        found = self._pieces.get(key)
        if found is None:
            found = self._pieces[key] = parts_of(item, self.counts.get(key, []))
        return found

    def verdicts(self, known: Mapping[str, Committed], batch_id: int, query: str) -> list[Verdict]:
        """The ready items as the batch's requests: new (admitted, to plan) or a source
        transaction the ledger holds (a repeat: DUPLICATE), as ``core.batch.triage`` sorts a
        change feed's requests."""
        out: list[Verdict] = []
        seen: set[str] = set()
        for place, (index, item) in enumerate(self.ready()):
            tid = item.transaction_id
            raw = RawRequest(
                SourcePosition("changes", item.anchor, index, place), b"", item.received_at
            )
            request = TransactionRequest.model_construct(
                transaction_id=tid, dataset=item.feed.dataset, actions=[]
            )
            earlier = known.get(tid)
            if earlier is not None and (earlier.batch_id, earlier.query) == (batch_id, query):
                earlier = None  # our own, from a replay of this batch
            if earlier is not None or tid in seen:
                out.append(Repeated(raw, request, earlier))
                continue
            seen.add(tid)
            out.append(Admitted(raw, request, _content_hash(item, self.pieces(item))))
        return out

    def plan(
        self,
        item: Ready,
        first_ordinal: int,
        datasets: Mapping[str, Dataset],
        layout: Layout,
    ) -> list[Load]:
        """The loads of a ready item (its error raised: it is rejected)."""
        if item.error is not None:
            raise item.error
        return plan_staged(
            item.transaction_id,
            item.feed,
            self.pieces(item),
            first_ordinal=first_ordinal,
            datasets=datasets,
            layout=layout,
        )

    def stage(self, loads: Sequence[tuple[Ready, Sequence[Load]]]) -> None:
        """Number the staged events by the loads planned for them (one ordinal per piece)."""
        rows = []
        for item, item_loads in loads:
            for load, piece in zip(item_loads, self.pieces(item), strict=True):
                if piece.truncate:
                    continue
                self._ordinals.setdefault(piece.schema, []).append(load.ordinal)
                rows.append(
                    (
                        item.feed.name,
                        item.item,
                        piece.schema,
                        piece.seg,
                        load.ordinal,
                        load.transaction_id,
                    )
                )
        if not rows or self._chosen is None:
            return
        numbered = self.spark.createDataFrame(
            pa.table(
                list(zip(*rows, strict=True)),
                names=["feed", "item", "schema", "seg", "__ordinal", "__tx"],
            )
        )
        self._staged = self._chosen.join(F.broadcast(numbered), ["feed", "item", "schema", "seg"])

    def columns(self, schema: str) -> list[str]:
        """The staged rows' columns for a target schema (every shape its events came in)."""
        return self._columns.get(schema, [])

    def rows(self, schema: str, ordinals: Sequence[int]) -> DataFrame:
        """The staged rows of the loads ``ordinals`` of ``schema``: ``__ordinal``, ``__tx``,
        ``__row`` (the row's place in its load) and ``__values`` (the row: its values as text,
        ``changefeed.value_text``)."""
        frame = self._staged
        if frame is None:  # only truncates: no rows
            return self.spark.createDataFrame(
                [], "__ordinal long, __tx string, __row long, __values map<string,string>"
            )
        frame = frame.where(F.col("schema") == schema)
        if sorted(ordinals) != sorted(self._ordinals.get(schema, [])):
            wanted = self.spark.createDataFrame(pa.table({"__ordinal": list(ordinals)}))
            frame = frame.join(F.broadcast(wanted), "__ordinal")
        return frame.select("__ordinal", "__tx", "__row", F.col("row").alias("__values"))

    # -- what the batch records ---------------------------------------------------------------
    def quarantine(
        self, rejected: Sequence[tuple[Ready, RawRequest, RejectedError]], batch_id: int
    ) -> DataFrame | None:
        """Quarantine rows of rejected items: the request each stands for and its records
        (``sourceEvents``), built by Spark from the decoded records."""
        if not rejected:
            return None
        rows = [
            (
                item.feed.name,
                item.item,
                item.transaction_id,
                error.code,
                error.message,
                str(raw.position),
                raw.received_at,
                json.dumps(request_of(item, self.pieces(item)))[:-1],
            )
            for item, raw, error in rejected
        ]
        names = [
            "feed",
            "item",
            "transaction_id",
            "error_code",
            "error_message",
            "source",
            "received_at",
            "__request",
        ]
        which = self.spark.createDataFrame(
            rows,
            "feed string, item string, transaction_id string, error_code string, "
            "error_message string, source string, received_at timestamp, __request string",
        )
        text = {
            c: F.when(F.is_valid_utf8(c), F.col(c).cast("string")).otherwise(
                F.concat(F.lit("base64:"), F.base64(c))
            )
            for c in ("key", "value")
        }
        event = F.struct(*PLACE, text["key"].alias("key"), text["value"].alias("value"))
        events = (
            self.decoded.where(F.col("kind") != "skip")
            .join(F.broadcast(which.select("feed", "item")), ["feed", "item"])
            .groupBy("feed", "item")
            .agg(F.sort_array(F.collect_list(event)).alias("events"))
        )
        kept = which.join(events, ["feed", "item"], "left")
        payload = F.concat(
            F.col("__request"),
            F.lit(', "sourceEvents": '),
            F.coalesce(F.to_json("events", {"ignoreNullFields": "false"}), F.lit("[]")),
            F.lit("}"),
        ).cast("binary")
        return kept.select(
            *[F.col(n) for n in names[2:5]],
            F.lit(batch_id).cast("long").alias("batch_id"),
            "source",
            "received_at",
            payload.alias("payload"),
        ).select(*[F.col(f.name).cast(f.dataType) for f in QUARANTINE_SCHEMA.fields])

    def waiting_frame(self) -> DataFrame | None:
        """The records that wait now (None: none), in ``_system/pending``'s columns."""
        keys = [(name, t.tx) for name, d in self.decisions.items() for t in d.waiting]
        if not keys:
            return None
        which = self.spark.createDataFrame(keys, "feed string, item string")
        return (
            self.decoded.where(F.col("kind").isin("begin", "end", "data"))
            .join(F.broadcast(which), ["feed", "item"])
            .select(*RECORD_COLUMNS, "received_at")
        )

    def write_pending(self, path: str, commit: BatchCommit) -> None:
        frame = self.waiting_frame()
        if frame is None and not self.had_waiting and self.snapshots[0] == self.snapshots[1]:
            return  # nothing waited, nothing waits
        pending.write(self.spark, path, frame, commit, self.snapshots[1])

    def waiting(self) -> dict[str, tuple[int, float | None]]:
        """Per feed: the records that wait and the oldest one's arrival (Unix)."""
        out: dict[str, tuple[int, float | None]] = {}
        for name, d in self.decisions.items():
            count = sum(t.records for t in d.waiting)
            oldest = min((t.first_seen.timestamp() for t in d.waiting), default=None)
            out[name] = (count, oldest)
        return out

    def release(self) -> None:
        unpersist(self.cached)


@dataclass(frozen=True)
class Shape:
    """The columns and Connect schemas one or more events of a source table came with (what
    ``core.sourceschema.source_changes`` reads of an event)."""

    table: str
    row: Mapping[str, Any]
    fields: Mapping[str, Any] | None
    where: str


def _content_hash(item: Ready, pieces: Sequence[Piece]) -> str:
    """What the ledger keeps as a source transaction's content: its id and its rows per
    action (a source transaction's id names its commit; a repeat of it is found by the id)."""
    text = json.dumps([item.transaction_id, [(p.location, p.rows) for p in pieces]])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class ChangeFeeds:
    """The job's change feeds: opens each micro-batch's ``FeedBatch``."""

    spark: SparkSession
    feeds: Sequence[Feed]
    decode: Decode
    layout: Layout
    held: pending.Waiting = field(default_factory=pending.Waiting)

    @property
    def by_topic(self) -> dict[str, Feed]:
        return {topic: feed for feed in self.feeds for topic in feed.all_topics}

    def open(
        self,
        records: DataFrame | None,
        batch_id: int,
        at: datetime,
        *,
        query: str,
        replay_possible: bool,
        committed: Callable[[Sequence[str]], Any],
        cached: list[DataFrame] | None = None,
    ) -> FeedBatch:
        """Decode the batch's ``records`` (``kind, name, partition, offset, mtime, key,
        payload`` of the change feeds' topics) with those waiting, and decide. What the batch
        caches is listed in ``cached`` (the caller's list, or the batch's own) as it is cached;
        ``FeedBatch.release`` lets it go."""
        spark = self.spark
        cached = [] if cached is None else cached
        before = self.held.read(
            spark, self.layout.pending, query, batch_id, replay_possible=replay_possible
        )
        snapshots = dict(self.held.snapshots)
        frames = []
        if records is not None:
            topics = self.by_topic
            feed_of = F.create_map(
                *[x for t, f in topics.items() for x in (F.lit(t), F.lit(f.name))]
            )
            new = records.select(
                feed_of[F.col("name")].alias("feed"),
                F.col("name").alias("topic"),
                F.col("partition").cast("int").alias("partition"),
                F.col("offset").cast("long").alias("offset"),
                "key",
                F.col("payload").alias("value"),
                F.col("mtime").alias("timestamp"),
                F.lit(at).cast("timestamp").alias("received_at"),
            ).where(F.col("feed").isNotNull())
            if before is not None:  # a record already waiting is taken from the table
                new = new.join(
                    F.broadcast(before.select("feed", *PLACE)), ["feed", *PLACE], "left_anti"
                )
            frames.append(new)
        if before is not None:
            frames.append(before.select(*RECORD_COLUMNS, "received_at"))
        if not frames:
            empty = spark.createDataFrame([], DDL)
            return FeedBatch(
                spark,
                self.feeds,
                empty,
                {f.name: Decision([], []) for f in self.feeds},
                False,
                (snapshots, dict(snapshots)),
                cached=cached,
            )
        union = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
        decoded_frame = _decoded(union, self.feeds, self.decode, cached)
        summaries = _summaries(decoded_frame, self.feeds)
        repeated = any(summaries[f.name].repeated for f in self.feeds)
        truncates = any(summaries[f.name].truncates for f in self.feeds)
        decisions = {
            feed.name: decide(feed, summaries[feed.name], at, committed) for feed in self.feeds
        }
        after = dict(snapshots)
        for feed in self.feeds:
            ready = decisions[feed.name].ready
            if (
                feed.format == "debezium"
                and feed.name not in after
                and any(item.snapshot_last for item in ready)
            ):
                after[feed.name] = batch_id
        batch = FeedBatch(
            spark,
            self.feeds,
            decoded_frame,
            decisions,
            self.held.count != 0,
            (snapshots, after),
            cached=cached,
        )
        _choose(batch, repeated=repeated, truncates=truncates)
        return batch

    def finished(self, batch: FeedBatch) -> None:
        """The batch ended: the next one starts from what it left waiting."""
        count = sum(n for n, _ in batch.waiting().values())
        self.held.finished(count, batch.snapshots[1])

    def forget(self) -> None:
        self.held = pending.Waiting()


def _summaries(frame: DataFrame, feeds: Sequence[Feed]) -> dict[str, Summaries]:
    """The Spark aggregation ``feedevents.summarize`` computes in Python, per feed: one job,
    grouped by what each record belongs to (a transaction, a chunk, itself)."""
    kind = F.col("kind")
    data = kind == "data"
    group = F.when(kind == "loose", "chunk").when(kind == "bad", "bad").otherwise("tx")
    place = F.struct(*PLACE, "received_at")
    unknown = F.when(
        (kind == "loose") & F.col("schema").isNull(), F.struct("offset", "source_table")
    )
    found = (
        frame.where(kind.isin("begin", "end", "data", "loose", "bad"))
        .groupBy("feed", "item", group.alias("group"))
        .agg(
            F.min(F.when(kind == "end", F.struct(*PLACE, "end_id", "received_at", "counts"))).alias(
                "end"
            ),
            F.min(place).alias("first"),
            F.min("received_at").alias("first_seen"),
            F.count(F.lit(1)).alias("records"),
            F.sum(data.cast("int")).alias("events"),
            F.collect_set(F.when(data, F.struct("source_table", "order"))).alias("places"),
            F.max("offset").alias("last"),
            F.min(unknown).alias("unknown"),
            F.max("snapshot_last").alias("snapshot_last"),
            F.max("incremental").alias("incremental"),
            F.max(F.coalesce(F.col("op") == "T", F.lit(False))).alias("truncates"),
            F.first("code", ignorenulls=True).alias("code"),
            F.first("message", ignorenulls=True).alias("message"),
            F.min(
                F.when(data & F.col("code").isNotNull(), F.struct(*PLACE, "code", "message"))
            ).alias("error"),
        )
        .collect()
    )
    txs: dict[str, list[TxSummary]] = {f.name: [] for f in feeds}
    chunks: dict[str, list[ChunkSummary]] = {f.name: [] for f in feeds}
    bad: dict[str, list[BadRecord]] = {f.name: [] for f in feeds}
    repeated: dict[str, bool] = {}
    truncates: dict[str, bool] = {}
    for r in found:
        name, first = r["feed"], r["first"]
        at = (first["topic"], first["partition"], first["offset"])
        if r["truncates"]:
            truncates[name] = True
        if r["group"] == "bad":
            bad[name].append(BadRecord(at, utc(first["received_at"]), r["code"], r["message"]))
        elif r["group"] == "chunk":
            chunks[name].append(
                ChunkSummary(
                    first["topic"],
                    first["partition"],
                    first["offset"],
                    r["last"],
                    utc(first["received_at"]),
                    r["unknown"]["source_table"] if r["unknown"] is not None else None,
                    bool(r["snapshot_last"]),
                    bool(r["incremental"]),
                )
            )
        else:
            have: dict[str, int] = {}
            for table, _ in r["places"]:
                have[table] = have.get(table, 0) + 1
            if r["events"] > len(r["places"]):
                repeated[name] = True
            e = r["end"]
            end = (
                End(
                    e["end_id"],
                    (e["topic"], e["partition"], e["offset"]),
                    utc(e["received_at"]),
                    end_counts(e["counts"]),
                )
                if e is not None
                else None
            )
            txs[name].append(
                TxSummary(
                    r["item"],
                    end,
                    have,
                    utc(r["first_seen"]),
                    int(r["records"]),
                    at,
                    utc(first["received_at"]),
                    (r["error"]["code"], r["error"]["message"]) if r["error"] else None,
                )
            )
    return {
        f.name: Summaries(
            txs[f.name],
            chunks[f.name],
            bad[f.name],
            repeated.get(f.name, False),
            truncates.get(f.name, False),
        )
        for f in feeds
    }


def _row_number(row: Column) -> Column:
    """A staged row's place in its load as ``inputs.loads`` numbers rows (below 2**32, beside
    the load's ordinal in ``__seq``); a transaction whose events carry no
    ``data_collection_order`` is ordered by offsets, which may not fit: the batch fails with
    the reason rather than mix the order of two loads."""
    fits = row.between(0, (1 << SEQ_SHIFT) - 1)
    why = F.lit("a change event's place in its transaction does not fit in 32 bits")
    return F.when(fits, row).otherwise(F.raise_error(why))


def _choose(batch: FeedBatch, *, repeated: bool, truncates: bool) -> None:
    """The staged events of the batch's ready items (no error): each place in its table once
    (the first record of it: a window, only when some event came twice), with ``seg``, the
    truncates of the table before it in its transaction (a window, only when some event is a
    truncate), and ``__row``, its place in its load (its order in its table; a chunk's offset
    from the chunk's first); counted per item, schema and segment
    (``feedevents.part_counts``), with the shapes the rows came in."""
    keys = [
        (name, item.item, item.base)
        for name, d in batch.decisions.items()
        for item in d.ready
        if item.error is None
    ]
    if not keys:
        return
    spark = batch.spark
    which = spark.createDataFrame(
        pa.table(list(zip(*keys, strict=True)), names=["feed", "item", "__base"])
    )
    events = batch.decoded.where(
        F.col("kind").isin("data", "loose") & F.col("schema").isNotNull()
    ).join(F.broadcast(which), ["feed", "item"])
    if repeated:
        by_place = Window.partitionBy("feed", "item", "source_table", "order").orderBy(*PLACE)
        events = events.withColumn("__n", F.row_number().over(by_place)).where("__n = 1")
    if truncates:
        in_order = Window.partitionBy("feed", "item", "schema").orderBy("order", *PLACE)
        before = in_order.rowsBetween(Window.unboundedPreceding, 0)
        events = events.withColumn("seg", F.sum((F.col("op") == "T").cast("int")).over(before))
    else:
        events = events.withColumn("seg", F.lit(0).cast("long"))
    chosen = events.select(
        "feed",
        "item",
        "schema",
        "seg",
        "op",
        _row_number(F.col("order") - F.col("__base")).alias("__row"),
        *PLACE,
        "source_table",
        "row",
        "columns",
        "fields",
        "unavailable",
    ).persist()
    batch.cached.append(chosen)
    rows_only = chosen.where(F.col("op") != "T")
    batch._chosen = rows_only
    # One job: per part and shape the rows came in (a part's rows mostly share one).
    is_row = F.col("op") != "T"
    found = (
        chosen.groupBy("feed", "item", "schema", "seg", "source_table", "columns", "fields")
        .agg(
            F.sum(is_row.cast("int")).alias("rows"),
            F.max(~is_row).alias("truncate"),
            F.sum(F.when(is_row, F.col("unavailable")).otherwise(0)).alias("unavailable"),
            F.min(F.when(is_row, F.struct(*PLACE))).alias("first"),
        )
        .collect()
    )
    parts: dict[tuple[str, str, str, int], list[int]] = {}
    shapes: dict[tuple[str, str, str, tuple[str, ...], str | None], tuple[Any, ...]] = {}
    for r in found:
        part = parts.setdefault((r["feed"], r["item"], r["schema"], r["seg"]), [0, 0, 0])
        part[0] += int(r["rows"])
        part[1] |= bool(r["truncate"])
        part[2] += int(r["unavailable"])
        if r["rows"]:
            first = r["first"]
            place = (first["topic"], first["partition"], first["offset"])
            key = (r["feed"], r["source_table"], r["schema"], tuple(r["columns"]), r["fields"])
            shapes[key] = min(shapes.get(key, place), place)
    for (feed, item, schema, seg), (rows, truncate, unavailable) in parts.items():
        batch.counts.setdefault((feed, item), []).append(
            PartCount(item, schema, seg, rows, bool(truncate), unavailable)
        )
    columns: dict[str, dict[str, None]] = {}
    for (feed, table, schema, names, fields), place in sorted(shapes.items(), key=lambda kv: kv[1]):
        columns.setdefault(schema, {}).update(dict.fromkeys(names))
        row = dict.fromkeys(source_columns(names))
        connect = json.loads(fields) if fields else None
        batch.shapes.setdefault(feed, []).append(Shape(table, row, connect, where(place)))
    batch._columns = {s: list(c) for s, c in columns.items()}
