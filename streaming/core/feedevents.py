"""A change feed's records as Spark handles them: each record decoded to one flat row (on the
executors), the rows summarised per source transaction and per chunk (by Spark), and the
small summaries decided on the driver — which transactions apply now, in what order, which are
given up, which wait. Pure: no Spark.

The reference model (``assemble``, tests/support/assembly.py): for the same records, ``decide`` over
``summarize``'s summaries gives the same items in the same order with the same errors, and
``parts_of`` over ``part_counts`` the same actions (``tests/unit/test_feedevents.py``). The
Spark job (``inputs.changefeeds``) computes what ``summarize`` and ``part_counts`` compute here, as
aggregations, so the driver never holds an event.

What still runs per source transaction on the driver, and why: ``decide`` (one small summary
each: ordering commits and holding a later commit behind an incomplete earlier one is a scan
in commit order over every transaction of the batch) and the loads, verdicts and outcomes of
the transactions that apply (one outcome each is the product's promise).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from streaming.core.changefeed import (
    KEY_COLUMN,
    OP_COLUMN,
    POSITION_COLUMN,
    SCHEME,
    SNAPSHOT_INCREMENTAL,
    SNAPSHOT_LAST,
    TIME_COLUMN,
    DataEvent,
    Decode,
    EventError,
    Feed,
    Received,
    kafka_where,
    read_debezium,
    read_dms,
    request_for,
    staged_row,
    value_text,
)
from streaming.core.codes import Code
from streaming.core.errors import RejectedError
from streaming.core.fold import FLAGS
from streaming.core.sourceschema import field_shape

__all__ = [
    "DECODED_FIELDS",
    "META_COLUMNS",
    "BadRecord",
    "ChunkSummary",
    "Committed",
    "Decision",
    "End",
    "Kind",
    "PartCount",
    "Piece",
    "Place",
    "Ready",
    "Summaries",
    "TxSummary",
    "chunk_key",
    "decide",
    "decoded",
    "end_counts",
    "fields_text",
    "part_counts",
    "parts_of",
    "request_of",
    "source_columns",
    "staged_events",
    "summarize",
    "where",
]

Kind = Literal["bad", "skip", "begin", "end", "data", "loose"]
"""What a decoded record is: unreadable, nothing to apply (a Kafka tombstone, a DMS control
record), a transaction's BEGIN or END, a data event of a transaction, a data event without
one (a snapshot's read, a feed without transaction metadata, DMS)."""
META_COLUMNS = (OP_COLUMN, KEY_COLUMN, POSITION_COLUMN, TIME_COLUMN)
"""The staged row's columns of ours (besides ``$flags:<column>``)."""

DECODED_FIELDS: tuple[tuple[str, str], ...] = (
    ("feed", "string"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "long"),
    ("key", "binary"),
    ("value", "binary"),
    ("timestamp", "timestamp"),
    ("received_at", "timestamp"),
    ("kind", "string"),
    ("item", "string"),
    ("code", "string"),
    ("message", "string"),
    ("end_id", "string"),
    ("counts", "string"),
    ("source_table", "string"),
    ("schema", "string"),
    ("op", "string"),
    ("order", "long"),
    ("row", "map<string,string>"),
    ("columns", "array<string>"),
    ("fields", "string"),
    ("unavailable", "int"),
    ("snapshot_last", "boolean"),
    ("incremental", "boolean"),
)
"""A decoded record (``decoded``): the record as read (so that what waits or is quarantined
keeps its bytes), then what it is. ``item``: the key of what it belongs to — its source
transaction (``core.changefeed.transaction_key``), its chunk (``chunk_key``: events without a
transaction), or itself (an unreadable record: its place). ``row``: the staged row (the DMS
shape ``SourceTransaction.rows`` gives), each value as text (``changefeed.value_text``: what
Spark's JSON reader makes of a value read as a string), ``columns`` its keys; ``fields``: the
Connect schemas of the row's columns as JSON (the converter's schema), if any; ``counts``: an
END's events per data collection as JSON."""


def fields_text(fields: Mapping[str, Any] | None) -> str | None:
    """A data event's Connect schemas of its row's columns as a decoded record keeps them: what
    ``sourceschema.column_type`` reads of each (``field_shape``), as compact JSON."""
    if not fields:
        return None
    shapes = {column: field_shape(schema) for column, schema in fields.items()}
    return json.dumps(shapes, separators=(",", ":"), ensure_ascii=False)


def chunk_key(topic: str, partition: int) -> str:
    return f"{topic}[{partition}]"


def decoded(feed: Feed, record: Received, decode: Decode) -> dict[str, Any]:
    """One record → its decoded row (``DECODED_FIELDS``), by the reference rules
    (``read_debezium``, ``read_dms``)."""
    out: dict[str, Any] = {
        "feed": feed.name,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "key": record.key,
        "value": record.value,
        "timestamp": record.timestamp,
        "received_at": record.received_at,
        "unavailable": 0,
        "snapshot_last": False,
        "incremental": False,
    }
    read = read_debezium if feed.format == "debezium" else read_dms
    try:
        item = read(feed, record, decode)
    except EventError as e:  # counts among its transaction's events, and rejects it
        out.update(
            kind="data",
            item=e.transaction,
            code=e.code,
            message=e.message,
            source_table=e.table,
            schema=feed.tables.get(e.table),
            op=None,
            order=e.order,
            columns=[],
        )
        return out
    except RejectedError as e:
        out.update(kind="bad", item=record.where, code=e.code, message=e.message)
        return out
    if item is None:
        out["kind"] = "skip"
        return out
    if not isinstance(item, DataEvent):
        out.update(kind=item.status.lower(), item=item.transaction)
        if item.status == "END":
            counts = json.dumps(dict(item.counts), separators=(",", ":"), ensure_ascii=False)
            out.update(end_id=item.id, counts=counts)
        return out
    loose = item.transaction is None or feed.transaction_topic is None
    row = staged_row(item)
    out.update(
        kind="loose" if loose else "data",
        item=chunk_key(record.topic, record.partition) if loose else item.transaction,
        source_table=item.table,
        schema=feed.tables.get(item.table),
        op=item.op,
        order=record.offset if loose else item.order,  # a chunk's events: in record order
        row={k: value_text(v) for k, v in row.items()},
        columns=list(row),
        fields=fields_text(item.fields),
        unavailable=len(item.unavailable),
        snapshot_last=loose and item.snapshot == SNAPSHOT_LAST,
        incremental=loose and item.snapshot == SNAPSHOT_INCREMENTAL,
    )
    return out


# -- summaries (what the Spark job aggregates) ---------------------------------------------------

Place = tuple[str, int, int]
"""(topic, partition, offset): the order records are read in."""


@dataclass(frozen=True)
class End:
    """A transaction's END (the first by place, if it came twice)."""

    id: str
    place: Place
    received_at: datetime
    counts: Mapping[str, int]


@dataclass(frozen=True)
class TxSummary:
    """One source transaction of the batch (its records this batch and those waiting)."""

    tx: str
    end: End | None
    have: Mapping[str, int]
    """Data events per source table, each place in its table (``order``) once."""
    first_seen: datetime
    records: int
    """Its records (BEGIN, END, data events; repeats included): what waits if it waits."""
    first: Place
    first_received_at: datetime
    error: tuple[str, str] | None = None
    """The code and message of its first data event that does not read (by place): the
    transaction is rejected whole (``core.changefeed.EventError``)."""


@dataclass(frozen=True)
class ChunkSummary:
    """The events without a transaction of one topic partition."""

    topic: str
    partition: int
    first: int
    last: int
    received_at: datetime
    """The first record's."""
    unknown: str | None
    """The first event's source table that the feed does not map, if any."""
    snapshot_last: bool
    incremental: bool = False
    """It holds an incremental snapshot's reads: it applies after the batch's transactions
    (``incremental``, tests/support/assembly.py)."""


@dataclass(frozen=True)
class BadRecord:
    place: Place
    received_at: datetime
    code: str
    message: str


@dataclass(frozen=True)
class Summaries:
    transactions: list[TxSummary]
    chunks: list[ChunkSummary]
    bad: list[BadRecord]
    repeated: bool = False
    """Some transaction's data event came twice (a connector's restart sent it again)."""
    truncates: bool = False
    """Some data event is a truncate."""


def where(place: Place) -> str:
    return kafka_where(*place)


def end_counts(text: str | None) -> dict[str, int]:
    """An END's events per data collection, as its decoded row keeps them (``counts``)."""
    return {str(k): int(v) for k, v in json.loads(text).items()} if text else {}


def summarize(rows: Iterable[Mapping[str, Any]]) -> Summaries:
    """The summaries of one feed's decoded rows, computed in Python: the reference of the
    Spark aggregation (``inputs.changefeeds``). Records come once (by place)."""
    unique = {(r["topic"], r["partition"], r["offset"]): r for r in rows}
    txs: dict[str, dict[str, Any]] = {}
    chunks: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    bad: list[BadRecord] = []
    for place in sorted(unique):
        r = unique[place]
        if r["kind"] == "bad":
            bad.append(BadRecord(place, r["received_at"], r["code"], r["message"]))
        elif r["kind"] == "loose":
            chunks.setdefault((r["topic"], r["partition"]), []).append(r)
        elif r["kind"] in ("begin", "end", "data"):
            t = txs.setdefault(r["item"], {"records": [], "end": None, "orders": set()})
            t["records"].append(r)
            if r["kind"] == "end" and t["end"] is None:
                t["end"] = End(r["end_id"], place, r["received_at"], end_counts(r["counts"]))
            if r["kind"] == "data":
                t["orders"].add((r["source_table"], r["order"]))
                if r.get("code") is not None and "error" not in t:
                    t["error"] = (r["code"], r["message"])
    transactions = []
    for tx, t in txs.items():
        have: dict[str, int] = {}
        for table, _ in t["orders"]:
            have[table] = have.get(table, 0) + 1
        first = t["records"][0]
        transactions.append(
            TxSummary(
                tx,
                t["end"],
                have,
                min(r["received_at"] for r in t["records"]),
                len(t["records"]),
                (first["topic"], first["partition"], first["offset"]),
                first["received_at"],
                t.get("error"),
            )
        )
    out = []
    for (topic, partition), events in sorted(chunks.items()):
        unknown = next((e["source_table"] for e in events if e["schema"] is None), None)
        out.append(
            ChunkSummary(
                topic,
                partition,
                events[0]["offset"],
                events[-1]["offset"],
                events[0]["received_at"],
                unknown,
                any(e["snapshot_last"] for e in events),
                any(e["incremental"] for e in events),
            )
        )
    data = [r for r in unique.values() if r["kind"] == "data"]
    repeated = len(data) > sum(len(t["orders"]) for t in txs.values())
    truncates = any(r["op"] == "T" for r in unique.values() if r["kind"] in ("data", "loose"))
    return Summaries(transactions, out, bad, repeated, truncates)


# -- deciding (the driver) ---------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """What becomes one request of the batch: a source transaction, a chunk, or a record that
    cannot be read — ``SourceTransaction`` (tests/support/assembly.py) without its events."""

    feed: Feed
    item: str
    """Its key among the decoded rows (``item``)."""
    source_id: str
    anchor: str
    """Where the record that orders it is (its END, else its first record)."""
    received_at: datetime
    error: RejectedError | None = None
    snapshot_last: bool = False
    """A chunk holding the last record of the feed's initial snapshot."""
    base: int = 0
    """A chunk's first offset (its rows are numbered from it); 0 for a transaction (its rows
    are numbered by their order in their table)."""

    @property
    def transaction_id(self) -> str:
        return self.feed.transaction_id(self.source_id)


@dataclass(frozen=True)
class Decision:
    ready: list[Ready]
    """In the order they apply: unreadable records, chunks, source transactions in commit
    order, incremental snapshots' chunks (``Assembly.ready``, tests/support/assembly.py)."""
    waiting: list[TxSummary]


Committed = Callable[[Sequence[str]], Collection[str]]


def _none_committed(ids: Sequence[str]) -> Collection[str]:
    return ()


def decide(
    feed: Feed, summaries: Summaries, now: datetime, committed: Committed = _none_committed
) -> Decision:
    """The reference model's (tests/support/assembly.py) decisions, over summaries instead of
    records."""
    unreadable = [
        Ready(
            feed,
            where(b.place),
            where(b.place),
            where(b.place),
            b.received_at,
            RejectedError(b.message, code=b.code),
        )
        for b in sorted(summaries.bad, key=lambda b: b.place)
    ]
    pending = {t.tx: t for t in summaries.transactions}
    waiting_events = sum(t.records for t in pending.values())

    def complete(t: TxSummary) -> bool:
        assert t.end is not None
        return all(t.have.get(s, 0) >= n for s, n in t.end.counts.items() if s in feed.tables)

    def take(t: TxSummary) -> None:
        nonlocal waiting_events
        del pending[t.tx]
        waiting_events -= t.records

    transactions: list[Ready] = []
    ended = sorted((t for t in pending.values() if t.end), key=lambda t: t.end.place)  # type: ignore[union-attr]
    incomplete = [feed.transaction_id(t.end.id) for t in ended if t.end and not complete(t)]
    resent = set(committed(incomplete)) if incomplete else set()
    held = False
    for t in ended:
        end = t.end
        assert end is not None
        if not held and (complete(t) or feed.transaction_id(end.id) in resent):
            take(t)
            if t.error is not None:  # rejected whole: no event of it applies
                code, message = t.error
                why = RejectedError(message, code=code)
                transactions.append(
                    Ready(feed, t.tx, end.id, where(end.place), end.received_at, why)
                )
            elif any(t.have.get(s, 0) for s in feed.tables):  # else nothing to apply
                transactions.append(Ready(feed, t.tx, end.id, where(end.place), end.received_at))
            continue
        waited = now - t.first_seen
        if not held and (waited > feed.max_wait or waiting_events > feed.max_pending_events):
            take(t)
            why = _incomplete(feed, t, waited.total_seconds())
            transactions.append(Ready(feed, t.tx, end.id, where(end.place), end.received_at, why))
            continue
        held = True  # a later commit waits for this one
    no_end = (t for t in pending.values() if not t.end)
    for t in sorted(no_end, key=lambda t: (t.first_seen, t.first)):
        waited = now - t.first_seen
        if waited > feed.max_wait:
            take(t)
            why = RejectedError(
                f"source transaction {t.tx} has no END after {int(waited.total_seconds())} s; "
                "its events are in quarantine",
                code=Code.SOURCE_TRANSACTION_INCOMPLETE,
            )
            transactions.append(Ready(feed, t.tx, t.tx, where(t.first), t.first_received_at, why))
    chunks: list[Ready] = []
    late: list[Ready] = []
    for c in sorted(summaries.chunks, key=lambda c: (c.topic, c.partition)):
        error = (
            RejectedError(
                f"source table {c.unknown!r} is not mapped to a schema of dataset "
                f"{feed.dataset!r} (kafka.change_feeds: tables)",
                code=Code.UNKNOWN_SCHEMA,
            )
            if c.unknown is not None
            else None
        )
        key = chunk_key(c.topic, c.partition)
        source_id = f"{key}@{c.first}-{c.last}"
        anchor = where((c.topic, c.partition, c.first))
        (late if c.incremental else chunks).append(
            Ready(feed, key, source_id, anchor, c.received_at, error, c.snapshot_last, c.first)
        )
    waiting = sorted(pending.values(), key=lambda t: t.first)
    return Decision([*unreadable, *chunks, *transactions, *late], waiting)


def _incomplete(feed: Feed, t: TxSummary, waited: float) -> RejectedError:
    assert t.end is not None
    missing = {
        s: f"{t.have.get(s, 0)} of {n}"
        for s, n in t.end.counts.items()
        if s in feed.tables and t.have.get(s, 0) < n
    }
    return RejectedError(
        f"source transaction {t.tx} is incomplete after {int(waited)} s "
        f"(events received per table: {missing}); its events are in quarantine",
        code=Code.SOURCE_TRANSACTION_INCOMPLETE,
    )


# -- the parts of what applies -----------------------------------------------------------------


@dataclass(frozen=True)
class PartCount:
    """The staged events of one ready item in one schema after its ``seg``-th truncate of the
    table (0: before any): how many rows, whether the segment starts with a truncate."""

    item: str
    schema: str
    seg: int
    rows: int
    truncate: bool
    unavailable: int


@dataclass(frozen=True)
class Piece:
    """One action of a ready item (``core.changefeed.Part`` without its events)."""

    schema: str
    location: str
    truncate: bool
    seg: int
    """The segment whose rows it stages (a truncate stages none)."""
    rows: int
    unavailable: int


def staged_events(
    rows: Iterable[Mapping[str, Any]], ready: Iterable[Ready]
) -> dict[tuple[str, str, int], list[Mapping[str, Any]]]:
    """Per ready item (without an error), schema and segment (``seg``: the truncates of the
    table before it), its staged events in order — a transaction's events once per place in
    their table (the first record of it), in the order of that place; a truncate event first
    in the segment it opens. Computed in Python: the reference of the Spark job's
    (``inputs.changefeeds``)."""
    items = {(r.feed.name, r.item) for r in ready if r.error is None}
    chosen: dict[tuple[str, str, int], Mapping[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"])):
        if (
            r["kind"] in ("data", "loose")
            and (r["feed"], r["item"]) in items
            and r["schema"] is not None
        ):
            chosen.setdefault((r["item"], r["source_table"], r["order"]), r)
    by_schema: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in chosen.values():
        by_schema.setdefault((r["item"], r["schema"]), []).append(r)
    out: dict[tuple[str, str, int], list[Mapping[str, Any]]] = {}
    for (item, schema), events in sorted(by_schema.items()):
        seg = 0
        events.sort(key=lambda r: (r["order"], r["topic"], r["partition"], r["offset"]))
        for r in events:
            seg += r["op"] == "T"
            out.setdefault((item, schema, seg), []).append(r)
    return out


def part_counts(rows: Iterable[Mapping[str, Any]], ready: Iterable[Ready]) -> list[PartCount]:
    """``staged_events`` counted per item, schema and segment: what the Spark job collects."""
    return [
        PartCount(
            item,
            schema,
            seg,
            sum(1 for e in events if e["op"] != "T"),
            any(e["op"] == "T" for e in events),
            sum(e["unavailable"] for e in events if e["op"] != "T"),
        )
        for (item, schema, seg), events in staged_events(rows, ready).items()
    ]


def parts_of(item: Ready, counts: Iterable[PartCount]) -> list[Piece]:
    """The actions of a ready item, per schema in name order: runs of rows cut by each
    truncate (``SourceTransaction.parts``, tests/support/assembly.py)."""
    by_schema: dict[str, list[PartCount]] = {}
    for c in counts:
        by_schema.setdefault(c.schema, []).append(c)
    out: list[Piece] = []
    for schema in sorted(by_schema):
        pieces: list[tuple[bool, int, int, int]] = []  # truncate, seg, rows, unavailable
        for c in sorted(by_schema[schema], key=lambda c: c.seg):
            if c.truncate:
                pieces.append((True, c.seg, 0, 0))
            if c.rows:
                pieces.append((False, c.seg, c.rows, c.unavailable))
        if not pieces:
            pieces.append((False, 0, 0, 0))
        base = f"{SCHEME}{item.transaction_id}/{schema}"
        for n, (truncate, seg, rows, unavailable) in enumerate(pieces):
            location = base if n == 0 else f"{base}#{n}"
            out.append(Piece(schema, location, truncate, seg, rows, unavailable))
    return out


def request_of(item: Ready, pieces: Sequence[Piece]) -> dict[str, Any]:
    """The request a ready item stands for, as ``SourceTransaction.request`` gives it (what
    quarantine keeps of a rejected one, with its records)."""
    parts = [(p.schema, p.location, p.truncate) for p in pieces]
    return request_for(item.feed, item.transaction_id, parts)


def source_columns(columns: Iterable[str]) -> list[str]:
    """A staged row's columns that came from the source (no ``Op``, key, position, flags)."""
    return [c for c in columns if c not in META_COLUMNS and not c.startswith(FLAGS)]
