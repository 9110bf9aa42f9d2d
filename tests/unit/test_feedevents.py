"""core.feedevents: records decoded one by one, summarised, decided — the same items, order,
errors, rows and waiting records as the reference model (tests/support/assembly.py), for
generated feeds (property test) and a few named cases."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streaming.core.catalog import parse_dataset
from streaming.core.changefeed import (
    Feed,
    Received,
    decode_json_value,
    value_text,
)
from streaming.core.feedevents import (
    decide,
    decoded,
    part_counts,
    parts_of,
    request_of,
    staged_events,
    summarize,
)
from streaming.core.layout import Layout
from streaming.core.plan import Events, plan_staged
from tests.support.assembly import assemble, ends_snapshot
from tests.support.datasets import SHOP
from tests.support.debezium import T0, Topics, feed

CUST, ORD = "public.customers", "public.orders"
TABLES = (CUST, ORD)


def _normal(row: dict[str, Any]) -> Any:
    """A staged row as a decoded record holds it: each value as text."""
    return {k: value_text(v) for k, v in row.items()}


def reference(feed_: Feed, records: Sequence[Received], now, committed) -> dict[str, Any]:
    """What ``assemble`` gives, in comparable terms."""
    got = assemble(feed_, records, decode_json_value, now, committed)
    items = []
    for tx in got.ready:
        anchor = tx.anchor or tx.records[0]
        parts = []
        if tx.error is None:
            for part in tx.parts():
                rows = [_normal(r) for r in tx.rows(part.location) or []]
                parts.append((part.location, part.truncate, rows))
        error = (tx.error.code, tx.error.message) if tx.error else None
        request = tx.request() if tx.error is None else None
        items.append((tx.source_id, tx.transaction_id, anchor.where, error, parts, request))
    waiting = sorted(r.sort_key() for r in got.waiting)
    snapshot = ends_snapshot(feed_, got.ready, decode_json_value) is not None
    return {"items": items, "waiting": waiting, "snapshot": snapshot}


def ours(feed_: Feed, records: Sequence[Received], now, committed) -> dict[str, Any]:
    """The same, through the decoded rows, their summaries and the decision."""
    rows = [decoded(feed_, r, decode_json_value) for r in records]
    decision = decide(feed_, summarize(rows), now, committed)
    staged = staged_events(rows, decision.ready)
    counts = part_counts(rows, decision.ready)
    items = []
    for item in decision.ready:
        parts = []
        request = None
        if item.error is None:
            pieces = parts_of(item, [c for c in counts if c.item == item.item])
            for piece in pieces:
                events = staged.get((item.item, piece.schema, piece.seg), [])
                rows_ = [] if piece.truncate else [e["row"] for e in events]
                rows_ = [r for r in rows_ if r["Op"] != "T"]
                assert piece.rows == len(rows_)
                parts.append((piece.location, piece.truncate, rows_))
            request = request_of(item, pieces)
        error = (item.error.code, item.error.message) if item.error else None
        items.append((item.source_id, item.transaction_id, item.anchor, error, parts, request))
    waiting_keys = {t.tx for t in decision.waiting}
    waiting = sorted(
        (r["topic"], r["partition"], r["offset"])
        for r in rows
        if r["kind"] in ("begin", "end", "data") and r["item"] in waiting_keys
    )
    snapshot = any(item.snapshot_last for item in decision.ready)
    return {"items": items, "waiting": waiting, "snapshot": snapshot}


# -- generated feeds ---------------------------------------------------------------------------

change = st.tuples(
    st.sampled_from(TABLES), st.sampled_from(["c", "u", "d", "t", "c", "bad"]), st.integers(1, 4)
)
"""A change: ``bad`` is an event of the transaction whose row does not read (``EventError``)."""
transaction = st.tuples(
    st.just("tx"),
    st.lists(change, min_size=0, max_size=5),
    st.sampled_from(["end", "end", "end", "no end", "short", "end first"]),
    st.integers(0, 3),  # events sent again
    st.booleans(),  # arrived long ago
)
snapshot_read = st.tuples(
    st.just("read"),
    st.sampled_from(TABLES),
    st.integers(1, 4),
    st.sampled_from(["true", "last", "incremental"]),
)
other = st.sampled_from([("garbage",), ("tombstone",), ("no source",)])
steps = st.lists(st.one_of(transaction, snapshot_read, other), min_size=1, max_size=8)


def records_of(plan: list[tuple[Any, ...]]) -> tuple[list[Received], list[str]]:
    """The records a plan of steps makes, and the ids of its ENDs."""
    topics = Topics()
    ends: list[str] = []
    for n, step in enumerate(plan):
        topics.at = T0 - timedelta(minutes=20) if step[0] == "tx" and step[4] else T0
        if step[0] == "tx":
            _, changes, end, again, _ = step
            tx = f"{500 + n}:{9000 + n}"
            counts: dict[str, int] = {}
            sent: list[Received] = []
            if end == "end first":
                counted: dict[str, int] = {}
                for table, _, _ in changes:
                    counted[table] = counted.get(table, 0) + 1
                topics.end(tx, counted)
                ends.append(tx)
            topics.begin(tx)
            for order, (table, op, id_) in enumerate(changes, start=1):
                counts[table] = counts.get(table, 0) + 1
                # An unchanged TOASTed value: Debezium's placeholder (kept, not written).
                name = "__debezium_unavailable_value" if (op, id_) == ("u", 4) else f"v{n}"
                row = {"id": id_, "name": name}
                sent.append(
                    topics.event(
                        table,
                        "c" if op == "bad" else op,
                        row,
                        tx=tx,
                        order=order,
                        table_order=counts[table],
                    )
                )
                if op == "bad":  # its envelope reads, its row does not: 'after' not an object
                    value = json.loads(sent[-1].value or b"null")
                    sent[-1] = replace(sent[-1], value=json.dumps({**value, "after": [1]}).encode())
                    topics.records[-1] = sent[-1]
            for record in sent[:again]:  # a connector's restart sends them again
                topics._add(
                    record.topic,
                    json.loads(record.key or b"null"),
                    json.loads(record.value or b"null"),
                )
            if end in ("end", "short"):
                if end == "short":
                    counts = {**counts, CUST: counts.get(CUST, 0) + 1}
                topics.end(tx, counts)
                ends.append(tx)
        elif step[0] == "read":
            _, table, id_, marker = step
            topics.event(table, "r", {"id": id_, "name": "snap"}, snapshot=marker)
        elif step[0] == "garbage":
            topics.records.append(
                Received("pg.public.customers", 0, 900 + n, None, b"{nope", T0, T0)
            )
        elif step[0] == "tombstone":
            topics.tombstone(CUST, 1)
        else:
            topics._add("pg.public.orders", {"id": 1}, {"op": "c", "after": {"id": 1}})
    return topics.records, ends


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps,
    st.sampled_from([timedelta(0), timedelta(minutes=15)]),
    st.sampled_from([3, 10, 100_000]),
    st.sets(st.integers(0, 7)),
    st.booleans(),
    st.booleans(),
)
def test_decided_summaries_give_what_the_reference_assembles(
    plan, later, max_pending, resent, metadata, timed
) -> None:
    time_property = "changedAt" if timed else None
    feed_ = feed(max_pending_events=max_pending, metadata=metadata, time_property=time_property)
    records, ends = records_of(plan)
    committed_ids = {feed_.transaction_id(ends[i]) for i in resent if i < len(ends)}

    def committed(ids: Sequence[str]) -> set[str]:
        return {i for i in ids if i in committed_ids}

    now = T0 + later
    assert ours(feed_, records, now, committed) == reference(feed_, records, now, committed)


DMS_FEED = Feed(
    "dms",
    "shop",
    "dms",
    {CUST: "shop.Customer"},
    {"dms.topic": ""},
    None,
    "sourcePosition",
    timedelta(minutes=10),
    100_000,
)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["public.customers", "public.orders", "control", "bad"]),
            st.sampled_from(["insert", "update", "delete", "load"]),
            st.integers(0, 1),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_dms_chunks_are_decided_as_the_reference_assembles(messages) -> None:
    records = []
    for offset, (table, operation, partition) in enumerate(messages):
        schema_name, _, table_name = table.partition(".")
        meta = {"schema-name": schema_name, "table-name": table_name, "operation": operation}
        meta |= {"timestamp": f"2026-01-01T00:00:{offset:02d}"}
        if table == "control":
            meta["record-type"] = "control"
        value = (
            b"{nope"
            if table == "bad"
            else json.dumps({"data": {"ID": offset}, "metadata": meta}).encode()
        )
        records.append(Received("dms.topic", partition, offset, None, value, T0, T0))
    assert ours(DMS_FEED, records, T0, lambda ids: ()) == reference(
        DMS_FEED, records, T0, lambda ids: ()
    )


# -- named cases --------------------------------------------------------------------------------


def test_a_later_commit_waits_behind_an_incomplete_earlier_one() -> None:
    topics = Topics()
    topics.begin("1:1")
    topics.event(CUST, "c", {"id": 1}, tx="1:1", order=1)
    topics.end("1:1", {CUST: 2})  # one event still to come
    topics.transaction("2:2", [(CUST, "u", {"id": 1, "name": "B"})])
    records = topics.take()
    got = ours(feed(), records, T0, lambda ids: ())
    assert got["items"] == [] and len(got["waiting"]) == len(records)
    assert got == reference(feed(), records, T0, lambda ids: ())


def test_a_source_transactions_loads_are_planned_from_its_staged_counts(tmp_path: Path) -> None:
    topics = Topics()
    topics.transaction(
        "tx1",
        [
            (CUST, "c", {"id": 1, "name": "Ann"}),
            (CUST, "t", {"id": 0}),
            (CUST, "c", {"id": 2, "name": "Bo"}),
            (ORD, "c", {"id": 10}),
        ],
    )
    rows = [decoded(feed(), r, decode_json_value) for r in topics.take()]
    (item,) = decide(feed(), summarize(rows), T0).ready
    pieces = parts_of(item, part_counts(rows, [item]))
    datasets = {"shop": parse_dataset("shop", yaml.safe_load(SHOP))}
    loads = plan_staged(
        item.transaction_id,
        feed(),
        pieces,
        first_ordinal=7,
        datasets=datasets,
        layout=Layout(str(tmp_path), "c"),
    )
    assert [(ld.ordinal, ld.operation.value, ld.schema.name) for ld in loads] == [
        (7, "UPSERT", "shop.Customer"),
        (8, "MERGE", "shop.Customer"),
        (9, "UPSERT", "shop.Customer"),
        (10, "UPSERT", "shop.Order"),
    ]
    sources = [ld.source for ld in loads]
    assert all(isinstance(s, Events) for s in sources)
    assert [s.rows for s in sources] == [1, 0, 1, 1]  # type: ignore[union-attr]
    assert sources[0].column_mapping == {"id": "__key", "sourcePosition": "__position"}  # type: ignore[union-attr]
    assert loads[1].reads == {loads[1].writes} and not loads[0].reads
