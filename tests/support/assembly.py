"""The reference model of a feed batch's assembly: a change feed's records, read one by one with
``core.changefeed``'s rules, → the source transactions ready to apply and the records that wait
(``core.changefeed``'s module docstring says how). The job does not run it: it decides over
Spark's summaries of the records (``core.feedevents.decide``, ``inputs.changefeeds``), and the
property tests hold that to this model (tests/unit/test_feedevents.py), which the unit tests of
the rules read as the plain statement of them (tests/unit/test_changefeed.py)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from streaming.core.changefeed import (
    SCHEME,
    SNAPSHOT_INCREMENTAL,
    SNAPSHOT_LAST,
    Boundary,
    DataEvent,
    Decode,
    EventError,
    Feed,
    Part,
    Received,
    read_debezium,
    read_dms,
    request_for,
    staged_row,
    unwrap,
)
from streaming.core.codes import Code
from streaming.core.errors import RejectedError
from streaming.core.fold import FLAGS

__all__ = [
    "Assembly",
    "Committed",
    "SourceTransaction",
    "assemble",
    "decode_changes_request",
    "ends_snapshot",
    "incremental",
    "snapshot_of",
    "unavailable_kept",
]


def unavailable_kept(rows: Iterable[Mapping[str, Any]]) -> int:
    """How many values of staged rows the source did not send (their stored values kept)."""
    return sum(1 for row in rows for column in row if column.startswith(FLAGS))


@dataclass
class SourceTransaction:
    """What one request of the batch stands for: a source transaction, a chunk of events
    without one, or a record that cannot be read."""

    feed: Feed
    source_id: str
    records: list[Received]
    events: list[DataEvent] = field(default_factory=list)
    error: RejectedError | None = None
    anchor: Received | None = None
    """The record that orders it among the batch's requests: its END, else its first record."""

    @property
    def transaction_id(self) -> str:
        return self.feed.transaction_id(self.source_id)

    def parts(self) -> list[Part]:
        """What it writes, per table in the transaction's order: runs of rows, cut by each
        truncate of the table (every row deleted before the rows after it apply)."""
        by_schema: dict[str, list[DataEvent]] = {}
        for e in self.events:
            schema = self.feed.tables.get(e.table)
            if schema is not None:
                by_schema.setdefault(schema, []).append(e)
        out: list[Part] = []
        for schema in sorted(by_schema):
            pieces: list[tuple[bool, list[DataEvent]]] = []
            run: list[DataEvent] = []
            for e in by_schema[schema]:
                if e.op != "T":
                    run.append(e)
                    continue
                if run:
                    pieces.append((False, run))
                    run = []
                pieces.append((True, []))
            if run or not pieces:
                pieces.append((False, run))
            base = f"{SCHEME}{self.transaction_id}/{schema}"
            for n, (truncate, events) in enumerate(pieces):
                location = base if n == 0 else f"{base}#{n}"
                out.append(Part(schema, location, truncate, tuple(events)))
        return out

    def rows(self, location: str) -> list[dict[str, Any]] | None:
        """The rows staged at ``location`` (one of ``parts``) in the DMS shape, in the
        transaction's order; None: not one of its locations."""
        part = next((p for p in self.parts() if p.location == location), None)
        if part is None:
            return None
        return [staged_row(e) for e in part.events]

    def request(self) -> dict[str, Any]:
        """The transaction request it becomes (the rows staged apart, by location): an UPSERT of
        each run of rows, a MERGE of no rows for each truncate (every row of the table deleted)."""
        parts = [(p.schema, p.location, p.truncate) for p in self.parts()]
        return request_for(self.feed, self.transaction_id, parts)

    def payload(self) -> bytes:
        """The request, as the raw request's bytes (small: its rows are staged apart)."""
        return json.dumps(self.request()).encode("utf-8")

    def quarantined(self) -> bytes:
        """The request with the records it stands for (``sourceEvents``): what quarantine keeps
        when it is rejected."""
        events = [
            {
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "key": _readable(r.key),
                "value": _readable(r.value),
            }
            for r in self.records
        ]
        return json.dumps({**self.request(), "sourceEvents": events}, default=str).encode("utf-8")


def _readable(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode("ascii")


@dataclass
class Assembly:
    ready: list[SourceTransaction]
    """In the order they apply: unreadable records, chunks (an initial snapshot's reads come
    before the changes streamed after it), source transactions in commit order, then the chunks
    of an incremental snapshot's reads (``incremental``)."""
    waiting: list[Received]


Committed = Callable[[Sequence[str]], Collection[str]]
"""Transaction ids → those the ledger holds (committed before)."""


def _none_committed(ids: Sequence[str]) -> Collection[str]:
    return ()


def assemble(
    feed: Feed,
    records: Iterable[Received],
    decode: Decode,
    now: datetime,
    committed: Committed = _none_committed,
) -> Assembly:
    """The feed's records of this batch and those waiting from earlier ones → what is ready to
    apply and what waits (module docstring). ``committed`` is asked once, for the incomplete
    transactions whose END is in: one the ledger holds is a part the connector sent again
    (restarted from older offsets) — handed on at once, to be found DUPLICATE, never held."""
    read = read_debezium if feed.format == "debezium" else read_dms
    unique = {r.sort_key(): r for r in records}
    ordered = [unique[k] for k in sorted(unique)]
    unreadable: list[SourceTransaction] = []
    transactions: list[SourceTransaction] = []
    loose: dict[tuple[str, int], list[DataEvent]] = {}
    ends: dict[str, Boundary] = {}
    events: dict[str, dict[tuple[str, int], DataEvent]] = {}
    records_of: dict[str, list[Received]] = {}
    poisoned: dict[str, RejectedError] = {}
    """Transaction → its first event that does not read (``EventError``)."""
    bad: dict[str, set[tuple[str, int]]] = {}
    for record in ordered:
        try:
            item = read(feed, record, decode)
        except EventError as e:
            poisoned.setdefault(e.transaction, e)
            bad.setdefault(e.transaction, set()).add((e.table, e.order))
            records_of.setdefault(e.transaction, []).append(record)
            continue
        except RejectedError as e:
            unreadable.append(
                SourceTransaction(feed, record.where, [record], error=e, anchor=record)
            )
            continue
        if item is None:
            continue
        if isinstance(item, Boundary):
            if item.status == "END":  # a BEGIN only counts among the transaction's records
                ends.setdefault(item.transaction, item)
            records_of.setdefault(item.transaction, []).append(record)
        elif item.transaction is None or feed.transaction_topic is None:
            loose.setdefault((record.topic, record.partition), []).append(item)
        else:
            # A connector that restarts sends some events again: one per place in its table.
            events.setdefault(item.transaction, {}).setdefault((item.table, item.order), item)
            records_of.setdefault(item.transaction, []).append(record)

    def received(tx: str) -> dict[str, int]:
        """Its events per table, each place once (those that do not read included)."""
        have: dict[str, int] = {}
        for table, _ in {*events.get(tx, {}), *bad.get(tx, ())}:
            have[table] = have.get(table, 0) + 1
        return have

    def complete(tx: str) -> bool:
        have = received(tx)
        return all(have.get(t, 0) >= n for t, n in ends[tx].counts.items() if t in feed.tables)

    def first_seen(tx: str) -> datetime:
        return min(r.received_at for r in records_of[tx])

    waiting_events = sum(len(records_of[tx]) for tx in records_of)

    def take(tx: str) -> tuple[list[Received], list[DataEvent]]:
        """The transaction's records, no longer waiting, and its events of the mapped tables."""
        nonlocal waiting_events
        records = records_of.pop(tx)
        waiting_events -= len(records)
        got = sorted(events.get(tx, {}).values(), key=lambda e: e.order)
        return records, [e for e in got if e.table in feed.tables]

    by_commit = sorted(ends, key=lambda tx: ends[tx].record.sort_key())
    incomplete = [feed.transaction_id(ends[tx].id) for tx in by_commit if not complete(tx)]
    resent = set(committed(incomplete)) if incomplete else set()
    held = False
    for tx in by_commit:
        if not held and (complete(tx) or feed.transaction_id(ends[tx].id) in resent):
            records, found = take(tx)
            if tx in poisoned:  # rejected whole: no event of it applies
                transactions.append(_transaction(feed, tx, records, [], ends[tx], poisoned[tx]))
            elif found:  # else it touched none of the feed's tables: nothing to apply
                transactions.append(_transaction(feed, tx, records, found, ends[tx]))
            continue
        waited = now - first_seen(tx)
        if not held and (waited > feed.max_wait or waiting_events > feed.max_pending_events):
            records, found = take(tx)
            why = _incomplete(feed, tx, received(tx), ends[tx], waited)
            transactions.append(_transaction(feed, tx, records, found, ends[tx], why))
            continue
        held = True  # a later commit waits for this one

    def first_place(tx: str) -> tuple[datetime, tuple[str, int, int]]:
        return first_seen(tx), min(r.sort_key() for r in records_of[tx])

    for tx in sorted(set(records_of) - set(ends), key=first_place):  # no END (yet)
        waited = now - first_seen(tx)
        if waited > feed.max_wait:
            records, found = take(tx)
            records.sort(key=Received.sort_key)
            why = RejectedError(
                f"source transaction {tx} has no END after {int(waited.total_seconds())} s; "
                "its events are in quarantine",
                code=Code.SOURCE_TRANSACTION_INCOMPLETE,
            )
            transactions.append(SourceTransaction(feed, tx, records, found, why, records[0]))
    chunks: list[SourceTransaction] = []
    for (topic, partition), chunk in sorted(loose.items()):
        first, last = chunk[0].record.offset, chunk[-1].record.offset
        source_id = f"{topic}[{partition}]@{first}-{last}"
        unknown = [e for e in chunk if e.table not in feed.tables]
        error = (
            RejectedError(
                f"source table {unknown[0].table!r} is not mapped to a schema of dataset "
                f"{feed.dataset!r} (kafka.change_feeds: tables)",
                code=Code.UNKNOWN_SCHEMA,
            )
            if unknown
            else None
        )
        chunked = SourceTransaction(
            feed, source_id, [e.record for e in chunk], list(chunk), error, chunk[0].record
        )
        chunks.append(chunked)
    waiting = sorted((r for rs in records_of.values() for r in rs), key=Received.sort_key)
    early = [c for c in chunks if not incremental(c.events)]
    late = [c for c in chunks if incremental(c.events)]
    return Assembly([*unreadable, *early, *transactions, *late], waiting)


def incremental(events: Iterable[DataEvent]) -> bool:
    """Whether a chunk holds reads of an incremental snapshot (``SNAPSHOT_INCREMENTAL``): it
    applies after the batch's source transactions. Debezium emits such a read into the stream
    after every change that committed before its chunk was read (so it applies after them: none
    of them is ``stale``) and before every later one (which then finds the read older: the read
    is the one that is stale, for its key alone). An initial snapshot's chunks apply first."""
    return any(e.snapshot == SNAPSHOT_INCREMENTAL for e in events)


def _transaction(
    feed: Feed,
    tx: str,
    records: list[Received],
    events: list[DataEvent],
    end: Boundary,
    error: RejectedError | None = None,
) -> SourceTransaction:
    return SourceTransaction(
        feed, end.id, sorted(records, key=Received.sort_key), events, error, end.record
    )


def _incomplete(
    feed: Feed, tx: str, have: Mapping[str, int], end: Boundary, waited: timedelta
) -> RejectedError:
    missing = {
        t: f"{have.get(t, 0)} of {n}"
        for t, n in end.counts.items()
        if t in feed.tables and have.get(t, 0) < n
    }
    return RejectedError(
        f"source transaction {tx} is incomplete after {int(waited.total_seconds())} s "
        f"(events received per table: {missing}); its events are in quarantine",
        code=Code.SOURCE_TRANSACTION_INCOMPLETE,
    )


def decode_changes_request(payload: bytes) -> Any:
    """The request a source transaction's raw bytes hold (``SourceTransaction.payload``)."""
    return json.loads(payload.decode("utf-8"))


def snapshot_of(record: Received, decode: Decode) -> str | None:
    """The ``source.snapshot`` of a Debezium record; None when it has none or is unreadable."""
    if record.value is None:
        return None
    try:
        value, _ = unwrap(decode(record.value))
    except RejectedError:
        return None
    source = value.get("source") if isinstance(value, dict) else None
    snapshot = source.get("snapshot") if isinstance(source, dict) else None
    return snapshot if isinstance(snapshot, str) else None


def _may_end_snapshot(value: bytes | None) -> bool:
    """Whether a record's bytes may hold ``"snapshot": "last"``, without decoding them: JSON
    (Debezium's converter writes ``"snapshot":"last"``) must contain ``"last"``; Avro (the
    Confluent wire format, first byte 0; an enum is written as a number) is always decoded."""
    return value is not None and (value[:1] == b"\x00" or b'"last"' in value)


def ends_snapshot(
    feed: Feed, ready: Iterable[SourceTransaction], decode: Decode
) -> SourceTransaction | None:
    """The one of a batch's ready items (``Assembly.ready``) that holds the last record of the
    feed's initial snapshot, or None. Only a Debezium feed's snapshot is marked; only events
    without a transaction are looked at (a snapshot's reads have none)."""
    if feed.format != "debezium":
        return None
    for item in ready:
        for event in item.events:
            if (
                event.transaction is None
                and _may_end_snapshot(event.record.value)
                and snapshot_of(event.record, decode) == SNAPSHOT_LAST
            ):
                return item
    return None
