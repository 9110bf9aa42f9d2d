"""core.changefeed: Debezium / DMS-on-Kafka records → source transactions (pure)."""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Context, Decimal
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from streaming.core.batch import RawRequest, SourcePosition, triage
from streaming.core.catalog import parse_dataset
from streaming.core.changefeed import (
    KEY_COLUMN,
    OP_COLUMN,
    POSITION_COLUMN,
    SNAPSHOT_LAST,
    DataEvent,
    Received,
    binlog_position,
    connect_value,
    decimal_text,
    decode_json_value,
    feed_of,
    is_unavailable,
    key_id,
    may_hold_placeholder,
    plain_json,
    read_debezium,
    source_position,
    transaction_key,
)
from streaming.core.config import ChangeFeedConfig
from streaming.core.errors import ConfigError, RejectedError
from streaming.core.layout import Layout
from streaming.core.plan import plan_transaction
from tests.support.assembly import (
    SourceTransaction,
    assemble,
    decode_changes_request,
    ends_snapshot,
    snapshot_of,
    unavailable_kept,
)
from tests.support.debezium import T0, Topics, feed, wrap

CUST, ORD = "public.customers", "public.orders"
LATER = T0 + timedelta(seconds=5)


def rows_of(tx: SourceTransaction, schema: str) -> list[dict[str, Any]]:
    """The rows ``tx`` stages for ``schema`` (its first part)."""
    rows = tx.rows(f"changes:{tx.transaction_id}/{schema}")
    assert rows is not None
    return rows


def ready_ids(assembly) -> list[str]:
    return [t.source_id for t in assembly.ready]


# -- one record -------------------------------------------------------------------------------


def test_an_insert_update_delete_read_as_dms_ops_with_key_and_position() -> None:
    topics = Topics()
    for op in ("c", "u", "d", "r"):
        topics.event(CUST, op, {"id": 7, "name": "Ann"})
    events: list[Any] = [read_debezium(feed(), r, decode_json_value) for r in topics.take()]
    assert [e.op for e in events] == ["I", "U", "D", "I"]
    assert {e.key for e in events} == {"7"}
    positions = [e.position for e in events]
    assert positions == sorted(positions) and len(set(positions)) == 4


def test_the_converters_schema_wrapper_is_unwrapped_and_its_types_read() -> None:
    schema = {
        "type": "struct",
        "fields": [
            {
                "field": "after",
                "type": "struct",
                "fields": [
                    {"field": "id", "type": "int32"},
                    {
                        "field": "balance",
                        "type": "bytes",
                        "name": "org.apache.kafka.connect.data.Decimal",
                        "parameters": {"scale": "2"},
                    },
                    {"field": "born", "type": "int32", "name": "io.debezium.time.Date"},
                    {"field": "seen", "type": "int64", "name": "io.debezium.time.MicroTimestamp"},
                ],
            }
        ],
    }
    unscaled = base64.b64encode((12345).to_bytes(2, "big", signed=True)).decode()
    after = {"id": 1, "balance": unscaled, "born": 365, "seen": 1_500_000}
    value = {
        "before": None,
        "after": after,
        "source": {"connector": "postgresql", "lsn": 5},
        "op": "c",
        "transaction": None,
    }
    record = Received(
        "pg.public.customers",
        0,
        0,
        json.dumps(wrap({"id": 1})).encode(),
        json.dumps(wrap(value, schema)).encode(),
        T0,
        T0,
    )
    event: Any = read_debezium(feed(), record, decode_json_value)
    assert event.row == {
        "id": 1,
        "balance": "123.45",
        "born": "1971-01-01",
        "seen": "1970-01-01T00:00:01.500000",
    }
    assert event.key == "1"


def test_values_without_a_schema_are_taken_as_they_are() -> None:
    assert connect_value(365, None) == 365
    assert connect_value("x", {"type": "string"}) == "x"


def test_a_key_of_several_fields_is_a_json_array_of_their_values() -> None:
    assert key_id({"a": 1, "b": "x"}) == '[1,"x"]'
    assert key_id(wrap({"id": "k"})) == "k"
    assert key_id(None) is None


def test_positions_sort_as_the_source_orders_changes() -> None:
    pg = [source_position({"connector": "postgresql", "lsn": n}, None) for n in (9, 10, 100)]
    assert pg == sorted(pg)
    record = Received("t", 0, 3, None, None, T0, T0)
    mysql = [
        source_position({"connector": "mysql", "file": f, "pos": p, "row": r}, record)
        for f, p, r in [("bin.000001", 900, 0), ("bin.000002", 4, 0), ("bin.000002", 4, 1)]
    ]
    assert mysql == sorted(mysql)


def test_a_record_that_is_not_an_event_is_rejected_with_its_place() -> None:
    bad = Received("pg.public.customers", 0, 4, b"{}", b"{not json", T0, T0)
    with pytest.raises(RejectedError) as e:
        read_debezium(feed(), bad, decode_json_value)
    assert e.value.code == "INVALID_CHANGE_EVENT" and "pg.public.customers[0]@4" in e.value.message


# -- source transactions ----------------------------------------------------------------------


def test_a_transaction_is_ready_when_its_end_and_all_its_events_are_in() -> None:
    topics = Topics()
    topics.transaction(
        "tx1", [(CUST, "c", {"id": 1}), (ORD, "c", {"id": 10}), (CUST, "u", {"id": 1})]
    )
    out = assemble(feed(), topics.take(), decode_json_value, T0)
    assert ready_ids(out) == ["tx1"] and out.waiting == []
    tx = out.ready[0]
    assert tx.transaction_id == "debezium:pg:tx1"
    assert [r[OP_COLUMN] for r in rows_of(tx, "shop.Customer")] == ["I", "U"]
    assert [r[KEY_COLUMN] for r in rows_of(tx, "shop.Order")] == ["10"]
    assert sorted(p.schema for p in tx.parts()) == ["shop.Customer", "shop.Order"]


def test_events_of_an_unfinished_transaction_wait_and_complete_later() -> None:
    topics = Topics()
    topics.transaction("tx1", [(CUST, "c", {"id": 1}), (ORD, "c", {"id": 10})])
    records = topics.take()
    last_order = records.pop(2)  # the order's event comes in a later batch
    first = assemble(feed(), records, decode_json_value, T0)
    assert first.ready == [] and len(first.waiting) == 3
    second = assemble(feed(), [*first.waiting, last_order], decode_json_value, LATER)
    assert ready_ids(second) == ["tx1"] and second.waiting == []


def test_a_later_commit_waits_for_an_earlier_incomplete_one() -> None:
    topics = Topics()
    topics.transaction("tx1", [(CUST, "c", {"id": 1}), (ORD, "c", {"id": 10})])
    topics.transaction("tx2", [(CUST, "u", {"id": 1})])
    records = topics.take()
    late = next(r for r in records if r.topic == "pg.public.orders")
    out = assemble(feed(), [r for r in records if r is not late], decode_json_value, T0)
    assert out.ready == []  # tx2 is complete, but tx1 committed first
    out = assemble(feed(), [*out.waiting, late], decode_json_value, LATER)
    assert ready_ids(out) == ["tx1", "tx2"]


def test_a_transaction_with_an_event_that_does_not_read_is_rejected_whole_at_once() -> None:
    """An event whose envelope reads but whose row does not (PostgreSQL's date 'infinity' in
    the integration test; here an ``after`` that is not an object) still counts among its
    transaction's events: the transaction, complete, is REJECTED whole with the event's code,
    none of its events applied, and the next commit goes on. Before, the event was rejected
    alone and its transaction waited ``max_wait`` (10 minutes) for it, holding every later
    commit, then was SOURCE_TRANSACTION_INCOMPLETE."""
    topics = Topics()
    topics.transaction("tx1", [(CUST, "c", {"id": 1}), (ORD, "c", {"id": 10})])
    topics.transaction("tx2", [(CUST, "u", {"id": 1})])
    records = topics.take()
    bad = next(r for r in records if r.topic == "pg.public.orders")
    value = json.loads(bad.value or b"null")
    broken = replace(bad, value=json.dumps({**value, "after": [10]}).encode())
    out = assemble(feed(), [broken if r is bad else r for r in records], decode_json_value, T0)
    assert ready_ids(out) == ["tx1", "tx2"] and not out.waiting
    first, second = out.ready
    assert first.error is not None and first.error.code == "INVALID_CHANGE_EVENT"
    assert "'after' is not an object" in first.error.message
    assert first.events == [] and second.error is None


def test_events_sent_again_by_a_restarted_connector_count_once() -> None:
    topics = Topics()
    topics.transaction("tx1", [(CUST, "c", {"id": 1}), (CUST, "u", {"id": 1})])
    records = topics.take()
    again = Topics(offsets=dict(topics.offsets))
    again.transaction("tx1", [(CUST, "c", {"id": 1}), (CUST, "u", {"id": 1})])
    out = assemble(feed(), [*records, *again.take()], decode_json_value, T0)
    assert ready_ids(out) == ["tx1"]
    assert len(rows_of(out.ready[0], "shop.Customer")) == 2


def test_a_transaction_incomplete_after_max_wait_is_rejected_and_later_ones_go_on() -> None:
    topics = Topics()
    topics.transaction("tx1", [(CUST, "c", {"id": 1}), (ORD, "c", {"id": 10})])
    topics.transaction("tx2", [(CUST, "u", {"id": 2})])
    records = [r for r in topics.take() if r.topic != "pg.public.orders"]
    short = feed(max_wait=timedelta(seconds=60))
    out = assemble(short, records, decode_json_value, T0 + timedelta(seconds=30))
    assert out.ready == []
    out = assemble(short, out.waiting, decode_json_value, T0 + timedelta(seconds=61))
    assert ready_ids(out) == ["tx1", "tx2"]
    assert out.ready[0].error.code == "SOURCE_TRANSACTION_INCOMPLETE"
    assert "'public.orders': '0 of 1'" in out.ready[0].error.message
    assert out.ready[1].error is None and out.waiting == []


def test_past_max_pending_events_the_oldest_incomplete_transaction_is_rejected() -> None:
    topics = Topics()
    topics.transaction("tx1", [(CUST, "c", {"id": 1}), (ORD, "c", {"id": 10})])
    records = [r for r in topics.take() if r.topic != "pg.public.orders"]
    out = assemble(feed(max_pending_events=2), records, decode_json_value, T0)
    assert ready_ids(out) == ["tx1"] and out.ready[0].error is not None


def test_records_of_transactions_applied_in_the_batch_do_not_count_as_waiting() -> None:
    topics = Topics()
    for n in range(5):  # 15 records, all complete
        topics.transaction(f"{n}:1", [(CUST, "u", {"id": n})])
    topics.begin("9:1")
    topics.event(CUST, "u", {"id": 9}, tx="9:1")
    topics.end("9", {CUST: 1, ORD: 1}, end_id="9:5")  # 3 records, its order's event to come
    out = assemble(feed(max_pending_events=4), topics.take(), decode_json_value, T0)
    assert [t.error for t in out.ready] == [None] * 5  # applied; 9 waits, not given up
    assert len(out.waiting) == 3


def test_a_transaction_of_tables_the_feed_does_not_map_is_passed_over() -> None:
    topics = Topics()
    topics.begin("tx9")
    topics.end("tx9", {"public.audit": 3})
    out = assemble(feed(), topics.take(), decode_json_value, T0)
    assert out.ready == [] and out.waiting == []


def test_snapshot_reads_without_a_transaction_are_one_chunk_per_partition() -> None:
    topics = Topics()
    topics.event(CUST, "r", {"id": 1})
    topics.event(CUST, "r", {"id": 2})
    topics.event(ORD, "r", {"id": 10})
    out = assemble(feed(), topics.take(), decode_json_value, T0)
    assert ready_ids(out) == ["pg.public.customers[0]@0-1", "pg.public.orders[0]@0-0"]
    assert out.ready[0].transaction_id == "debezium:pg:pg.public.customers[0]@0-1"


def test_an_incremental_snapshots_reads_apply_after_the_batchs_transactions() -> None:
    """Debezium emits an incremental read after the changes that committed before its chunk
    was read: applied after the batch's transactions, none of those is stale. An initial
    snapshot's reads still come first."""
    topics = Topics()
    topics.event(ORD, "r", {"id": 10}, snapshot="last")
    topics.transaction("tx1", [(CUST, "u", {"id": 1})])
    topics.event(CUST, "r", {"id": 1}, snapshot="incremental")
    topics.event(CUST, "r", {"id": 2}, snapshot="incremental")
    out = assemble(feed(), topics.take(), decode_json_value, T0)
    assert ready_ids(out) == ["pg.public.orders[0]@0-0", "tx1", "pg.public.customers[0]@1-2"]


def test_without_metadata_every_event_is_in_a_chunk() -> None:
    topics = Topics()
    topics.transaction("tx1", [(CUST, "c", {"id": 1})])
    out = assemble(feed(metadata=False), topics.take(), decode_json_value, T0)
    # The transaction topic is not the feed's: only the data event is read.
    assert [len(t.events) for t in out.ready if t.error is None] == [1]


def test_a_kafka_tombstone_is_no_change() -> None:
    topics = Topics()
    topics.tombstone(CUST, 1)
    out = assemble(feed(), topics.take(), decode_json_value, T0)
    assert out.ready == [] and out.waiting == []


def truncate(topics: Topics, table: str, tx: str, order: int) -> Received:
    """Debezium's truncate event of ``table`` in ``tx`` (``op = t``: no before, no after)."""
    topics.lsn += 10
    value = {
        "op": "t",
        "before": None,
        "after": None,
        "source": {"connector": "postgresql", "lsn": topics.lsn},
        "transaction": {"id": tx, "total_order": order, "data_collection_order": order},
    }
    return topics._add(f"{topics.prefix}.{table}", None, value)


def test_a_truncate_deletes_every_row_between_the_rows_around_it() -> None:
    topics = Topics()
    topics.begin("tx1")
    topics.event(CUST, "c", {"id": 1, "name": "Ada"}, tx="tx1", order=1)
    truncate(topics, CUST, "tx1", 2)
    topics.event(CUST, "c", {"id": 2, "name": "Bob"}, tx="tx1", order=3)
    topics.event(ORD, "c", {"id": 10}, tx="tx1", order=1)
    topics.end("tx1", {CUST: 3, ORD: 1})
    out = assemble(feed(), topics.take(), decode_json_value, T0)
    (tx,) = out.ready
    assert tx.error is None
    parts = [(p.schema, p.truncate, [e.key for e in p.events]) for p in tx.parts()]
    assert parts == [
        ("shop.Customer", False, ["1"]),
        ("shop.Customer", True, []),
        ("shop.Customer", False, ["2"]),
        ("shop.Order", False, ["10"]),
    ]
    actions = tx.request()["actions"]
    assert [(a["operation"], a["locationUri"]) for a in actions] == [
        ("UPSERT", "changes:debezium:pg:tx1/shop.Customer"),
        ("MERGE", "changes:debezium:pg:tx1/shop.Customer#1"),
        ("UPSERT", "changes:debezium:pg:tx1/shop.Customer#2"),
        ("UPSERT", "changes:debezium:pg:tx1/shop.Order"),
    ]
    assert tx.rows("changes:debezium:pg:tx1/shop.Customer#1") == []
    assert [r[KEY_COLUMN] for r in tx.rows("changes:debezium:pg:tx1/shop.Customer#2") or []] == [
        "2"
    ]


def test_a_truncate_alone_is_one_merge_of_no_rows_and_its_transaction_waits_for_it() -> None:
    topics = Topics()
    topics.begin("tx1")
    topics.end("tx1", {CUST: 1})
    waiting = assemble(feed(), topics.take(), decode_json_value, T0)
    assert waiting.ready == [] and len(waiting.waiting) == 2
    truncate(topics, CUST, "tx1", 1)
    out = assemble(feed(), [*waiting.waiting, *topics.take()], decode_json_value, T0)
    (tx,) = out.ready
    assert [(a["operation"], a["target"]) for a in tx.request()["actions"]] == [
        ("MERGE", "shop.Customer")
    ]


def test_an_unchanged_toasted_value_is_not_data_and_keeps_the_stored_one() -> None:
    topics = Topics()
    topics.transaction(
        "tx1",
        [
            (CUST, "u", {"id": 1, "name": "Ada", "body": "__debezium_unavailable_value"}),
            (CUST, "u", {"id": 2, "name": "Bob", "tags": ["__debezium_unavailable_value"]}),
            (CUST, "u", {"id": 3, "name": "Cy", "body": "real text"}),
        ],
    )
    out = assemble(feed(), topics.take(), decode_json_value, T0)
    rows = rows_of(out.ready[0], "shop.Customer")
    assert [(r["body"] if "body" in r else r["tags"]) for r in rows] == [None, None, "real text"]
    assert [sorted(c for c in r if c.startswith("$flags:")) for r in rows] == [
        ["$flags:body"],
        ["$flags:tags"],
        [],
    ]
    assert rows[0]["$flags:body"] == 1  # core.fold.MISSING
    assert unavailable_kept(rows) == 2


def test_a_placeholder_with_the_row_before_takes_the_value_from_before() -> None:
    """REPLICA IDENTITY FULL: the old row comes whole; its value is the unchanged one."""
    record = Received(
        "pg.public.customers",
        0,
        0,
        b'{"id": 1}',
        json.dumps(
            {
                "before": {"id": 1, "name": "Ada", "body": "the long text"},
                "after": {"id": 1, "name": "Ann", "body": "__debezium_unavailable_value"},
                "source": {"connector": "postgresql", "lsn": 5},
                "op": "u",
            }
        ).encode(),
        T0,
        T0,
    )
    event = read_debezium(feed(), record, decode_json_value)
    assert isinstance(event, DataEvent)
    assert event.row == {"id": 1, "name": "Ann", "body": "the long text"}
    assert event.unavailable == ()


def test_placeholders_are_recognised_in_every_shape_debezium_gives_them() -> None:
    mark = "__debezium_unavailable_value"
    encoded = base64.b64encode(mark.encode()).decode()
    assert is_unavailable(mark, mark)
    assert is_unavailable(mark.encode(), mark)  # bytes from Avro
    assert is_unavailable(encoded, mark, {"type": "bytes"})  # bytes in JSON: base64
    assert not is_unavailable(encoded, mark, {"type": "string"})
    assert is_unavailable([mark], mark) and is_unavailable([encoded], mark)
    assert is_unavailable(list(mark.encode()), mark)  # an int array: the placeholder's bytes
    assert is_unavailable({mark: mark}, mark)  # hstore
    assert not is_unavailable("another text", mark) and not is_unavailable(None, mark)
    assert not is_unavailable([mark, "x"], mark) and not is_unavailable(7, mark)
    assert is_unavailable("??", "hex:3f3f") and is_unavailable(b"??", "hex:3f3f")


def test_a_json_record_holding_the_placeholder_in_any_shape_is_never_passed_over() -> None:
    """``read_debezium`` skips the placeholder scan of a JSON record only where
    ``may_hold_placeholder`` says it cannot hold one: every shape ``is_unavailable`` knows, as
    JSON writes it (escaped too), is found; and the events read with and without the skip are
    the same."""
    mark = "__debezium_unavailable_value"
    encoded = base64.b64encode(mark.encode()).decode()
    escaped = '"\\u005f_debezium_unavailable_value"'
    shapes = [mark, [mark], [encoded], list(mark.encode()), {mark: mark}, encoded]
    for shape in shapes:
        assert may_hold_placeholder(json.dumps({"after": {"v": shape}}).encode(), mark), shape
    assert may_hold_placeholder(('{"after": {"v": ' + escaped + "}}").encode(), mark)
    assert json.loads(escaped) == mark
    assert not may_hold_placeholder(b'{"after": {"id": 1, "name": "Ann"}}', mark)
    assert may_hold_placeholder(b'{"after": {"id": 1}}', "hex:")  # no bytes: always scanned
    values = [*shapes, "plain", 7, None, "é", [1, 2]]
    for n, value in enumerate(values):
        for text in (json.dumps, lambda v: json.dumps(v, ensure_ascii=False)):
            topics = Topics()
            record = topics.event(CUST, "u", {"id": n, "body": value})
            record = replace(record, value=text(json.loads(record.value or b"")).encode())
            event = read_debezium(feed(), record, decode_json_value)
            slow = read_debezium(feed(), record, lambda data: json.loads(data.decode("utf-8")))
            assert isinstance(event, DataEvent) and isinstance(slow, DataEvent)
            assert (event.row, event.unavailable) == (slow.row, slow.unavailable), value


def test_the_configured_placeholder_is_the_one_recognised() -> None:
    topics = Topics()
    topics.transaction("tx1", [(CUST, "u", {"id": 1, "body": "<toasted>", "name": "x"})])
    records = topics.take()
    mine = replace(feed(), placeholder="<toasted>")
    assert (
        rows_of(assemble(mine, records, decode_json_value, T0).ready[0], "shop.Customer")[0]["body"]
        is None
    )
    default = rows_of(assemble(feed(), records, decode_json_value, T0).ready[0], "shop.Customer")
    assert default[0]["body"] == "<toasted>"


def test_a_part_of_a_committed_transaction_sent_again_is_handed_on_not_held() -> None:
    """A connector restarted from older offsets sends the tail of a transaction the job
    applied, with its END: the ledger knows the END's id, so it is not held for its missing
    events (which would hold every later commit for ``max_wait``) but handed on — to be found
    DUPLICATE by triage."""
    topics = Topics()
    topics.begin("tx1")
    topics.event(CUST, "u", {"id": 1}, tx="tx1", order=2)  # the tail: event 1 of 2 not sent
    topics.end("tx1", {CUST: 2})
    topics.transaction("tx2", [(CUST, "c", {"id": 5})])
    records = topics.take()
    asked: list[list[str]] = []

    def ledger(ids: Sequence[str]) -> set[str]:
        asked.append(list(ids))
        return {"debezium:pg:tx1"} & set(ids)

    out = assemble(feed(), records, decode_json_value, T0, ledger)
    assert asked == [["debezium:pg:tx1"]]  # only the incomplete one is looked up
    assert ready_ids(out) == ["tx1", "tx2"] and out.waiting == []
    assert out.ready[0].error is None
    held = assemble(feed(), records, decode_json_value, T0)  # not in the ledger: it waits
    assert ready_ids(held) == [] and len(held.waiting) == len(records)


def test_a_source_transaction_sent_again_in_part_is_a_duplicate_not_an_id_reused() -> None:
    """Triage: the same id with other actions is TRANSACTION_ID_REUSED for a request, a repeat
    (DUPLICATE) for a source transaction, whose id names its commit for good."""
    whole = {
        "transactionId": "debezium:pg:tx1",
        "dataset": "shop",
        "actions": [
            {"operation": "UPSERT", "locationUri": "changes:debezium:pg:tx1/shop.Customer"},
            {"operation": "UPSERT", "locationUri": "changes:debezium:pg:tx1/shop.Order"},
        ],
    }
    part = {**whole, "actions": whole["actions"][1:]}

    def raw(kind: Any, value: dict[str, Any], place: int) -> RawRequest:
        position = SourcePosition(kind, f"kafka:t[0]@{place}", 0, place)
        return RawRequest(position, json.dumps(value).encode(), T0)

    verdicts = triage([raw("changes", whole, 0), raw("changes", part, 1)], {}, 0)
    assert [type(v).__name__ for v in verdicts] == ["Admitted", "Repeated"]
    requests = triage([raw("kafka", whole, 0), raw("kafka", part, 1)], {}, 0)
    assert [type(v).__name__ for v in requests] == ["Admitted", "Refused"]


def test_an_unreadable_record_is_rejected_alone() -> None:
    topics = Topics()
    topics.transaction("tx1", [(CUST, "c", {"id": 1})])
    bad = Received("pg.public.orders", 0, 0, None, b"\xff", T0, T0)
    out = assemble(feed(), [*topics.take(), bad], decode_json_value, T0)
    assert [(t.source_id, t.error and t.error.code) for t in out.ready] == [
        ("kafka:pg.public.orders[0]@0", "INVALID_CHANGE_EVENT"),
        ("tx1", None),
    ]


# -- the request it becomes ---------------------------------------------------------------------


SHOP = """
shop.Customer:
  properties:
    name: {type: string}
    sourcePosition: {type: string}
  watermark: [sourcePosition]
shop.Order:
  properties:
    amount: {type: number}
    sourcePosition: {type: string}
  watermark: [sourcePosition]
"""


def test_a_source_transactions_request_and_quarantined_records(tmp_path: Path) -> None:
    topics = Topics()
    topics.transaction("tx1", [(CUST, "c", {"id": 1, "name": "Ann"}), (ORD, "c", {"id": 10})])
    tx = assemble(feed(), topics.take(), decode_json_value, T0).ready[0]
    value = decode_changes_request(tx.payload())
    assert "sourceEvents" not in value
    assert [a["target"] for a in value["actions"]] == ["shop.Customer", "shop.Order"]
    kept = json.loads(tx.quarantined())["sourceEvents"]
    assert [(e["topic"], e["offset"]) for e in kept] == [(r.topic, r.offset) for r in tx.records]


def test_a_request_cannot_name_staged_rows_of_another_transaction(tmp_path: Path) -> None:
    from streaming.core.requests import validate_request

    request = validate_request(
        {
            "transactionId": "mine",
            "dataset": "shop",
            "actions": [
                {
                    "operation": "UPSERT",
                    "format": "DMS",
                    "target": "shop.Customer",
                    "locationUri": "changes:debezium:pg:tx1/shop.Customer",
                }
            ],
        }
    )
    with pytest.raises(RejectedError) as e:
        plan_transaction(
            request,
            first_ordinal=0,
            datasets={"shop": parse_dataset("shop", yaml.safe_load(SHOP))},
            layout=Layout(str(tmp_path), "c"),
            base_dir=str(tmp_path),
            allowed_locations=[],
            exists=lambda p: None,
        )
    assert e.value.code == "UNSUPPORTED_SCHEME"


# -- the config ---------------------------------------------------------------------------------


def test_a_schema_without_the_position_watermark_stops_the_job_naming_the_key() -> None:
    datasets = {
        "shop": parse_dataset(
            "shop", {"shop.Customer": {"properties": {"name": {"type": "string"}}}}
        )
    }
    cfg = ChangeFeedConfig(name="pg", dataset="shop", topic_prefix="pg")
    with pytest.raises(ConfigError) as e:
        feed_of(cfg, 0, datasets)
    assert "kafka.change_feeds[0].position_property" in e.value.message
    assert "watermark: [sourcePosition]" in e.value.message


def test_a_time_property_that_is_not_a_datetime_stops_the_job_naming_the_key() -> None:
    datasets = {"shop": parse_dataset("shop", yaml.safe_load(SHOP))}
    cfg = ChangeFeedConfig(name="pg", dataset="shop", topic_prefix="pg", time_property="name")
    with pytest.raises(ConfigError) as e:
        feed_of(cfg, 0, datasets)
    assert "kafka.change_feeds[0].time_property: schema shop.Customer" in e.value.message
    assert "`name: {type: datetime}`" in e.value.message


def test_a_time_property_stages_each_events_source_commit_time() -> None:
    from streaming.core.changefeed import TIME_COLUMN, column_mapping, read_debezium, staged_row

    timed = feed(time_property="changedAt")
    topics = Topics()
    record = topics.event("public.customers", "c", {"id": 1, "name": "Ann"})
    event = read_debezium(timed, record, decode_json_value)
    assert isinstance(event, DataEvent)
    stamp = json.loads(record.value or b"{}")["source"]["ts_ms"]
    expected = datetime.fromtimestamp(stamp / 1000, UTC).isoformat(timespec="milliseconds")
    assert staged_row(event)[TIME_COLUMN] == expected.replace("+00:00", "Z")
    assert column_mapping(timed)["changedAt"] == TIME_COLUMN
    untimed = read_debezium(feed(), record, decode_json_value)
    assert isinstance(untimed, DataEvent) and TIME_COLUMN not in staged_row(untimed)
    assert "changedAt" not in column_mapping(feed())


def test_a_feed_maps_every_object_schema_to_its_topic_by_default() -> None:
    datasets = {"shop": parse_dataset("shop", yaml.safe_load(SHOP))}
    got = feed_of(ChangeFeedConfig(name="pg", dataset="shop", topic_prefix="db"), 0, datasets)
    assert got.topics == {"db.shop.Customer": "shop.Customer", "db.shop.Order": "shop.Order"}
    assert got.all_topics[-1] == "db.transaction"
    mapped = ChangeFeedConfig(
        name="pg", dataset="shop", topic_prefix="db", tables={"shop.Customer": "public.customers"}
    )
    assert feed_of(mapped, 0, datasets).topics == {"db.public.customers": "public.customers"}


def test_a_debezium_feed_needs_its_topic_prefix() -> None:
    with pytest.raises(ValueError, match="topic_prefix"):
        ChangeFeedConfig(name="pg", dataset="shop")


def test_postgres_ids_of_one_transaction_are_grouped_by_txid_and_named_by_its_end() -> None:
    """Debezium 3.6's Postgres ids are ``<txId>:<lsn>``, the lsn each event's own (see
    tests/unit/fixtures/debezium_postgres_examples.json): BEGIN ``733:100``, the events
    ``733:100`` and ``733:130``, END ``733:160``."""
    topics = Topics()
    topics.begin("733:100")
    topics.event(CUST, "c", {"id": 1}, tx="733:100", order=1)
    topics.event(CUST, "u", {"id": 1}, tx="733:130", order=2)
    topics.end("733", {CUST: 2}, end_id="733:160")
    out = assemble(feed(), topics.take(), decode_json_value, T0)
    assert ready_ids(out) == ["733:160"] and out.waiting == []
    assert out.ready[0].transaction_id == "debezium:pg:733:160"
    assert len(out.ready[0].events) == 2


# -- real messages (Debezium 3.6.1's Postgres connector, the JSON converter with schemas) --------

EXAMPLES = json.loads(
    (Path(__file__).parent / "fixtures" / "debezium_postgres_examples.json").read_text()
)


def captured(example: dict[str, Any], offset: int) -> Received:
    """A record a real connector wrote (a fixture's entry), at ``offset`` of partition 0."""
    value = example["value"]
    return Received(
        example["topic"],
        0,
        offset,
        json.dumps(example["key"]).encode(),
        None if value is None else json.dumps(value).encode(),
        T0,
        T0,
    )


def real(name: str, offset: int) -> Received:
    return captured(EXAMPLES[name], offset)


def shop_feed():
    return feed(prefix="shop")


def test_real_snapshot_insert_update_delete_and_tombstone_read_as_changes() -> None:
    read: dict[str, Any] = {
        name: read_debezium(shop_feed(), real(name, i), decode_json_value)
        for i, name in enumerate(
            [
                "snapshot_customers",
                "insert_customers",
                "update_customers",
                "delete_orders",
                "tombstone_orders",
            ]
        )
    }
    assert read["tombstone_orders"] is None
    snap, ins, upd, dele = (read[n] for n in list(read)[:4])
    assert (snap.op, snap.transaction) == ("I", None)
    assert (ins.op, upd.op, dele.op) == ("I", "U", "D")
    assert ins.transaction == upd.transaction == dele.transaction  # one txId
    assert (
        upd.row["balance"] == EXAMPLES["update_customers"]["value"]["payload"]["after"]["balance"]
    )
    created = EXAMPLES["insert_customers"]["value"]["payload"]["after"]["created_at"]
    assert ins.row["created_at"].startswith("2024-") and isinstance(created, int)
    assert dele.row["id"] == int(dele.key) and dele.key == "11"
    assert snap.position < ins.position < upd.position


def test_real_transaction_assembles_from_its_begin_events_and_end() -> None:
    names = [
        "transaction_begin",
        "insert_customers",
        "update_customers",
        "insert_orders",
        "delete_orders",
        "tombstone_orders",
        "transaction_end",
    ]
    out = assemble(shop_feed(), [real(n, i) for i, n in enumerate(names)], decode_json_value, T0)
    end = EXAMPLES["transaction_end"]["value"]["payload"]
    assert ready_ids(out) == [end["id"]] and out.waiting == []
    tx = out.ready[0]
    assert [r[OP_COLUMN] for r in rows_of(tx, "shop.Customer")] == ["I", "U"]
    assert [r[OP_COLUMN] for r in rows_of(tx, "shop.Order")] == ["I", "D"]


# -- real messages of Debezium's MariaDB connector (3.5.0.Final, MariaDB 10.11, the JSON -------
# converter with schemas), written by tests/integration/test_debezium_mariadb.py
# (WRITE_DEBEZIUM_EXAMPLES): its workload's first transaction (GTID 0-1-8) inserts customer 4
# and order 12 and updates customer 1; order 11 is deleted in the next; orders 100-160 are one
# INSERT … SELECT (one binlog event, a row each).

MARIADB = json.loads(
    (Path(__file__).parent / "fixtures" / "debezium_mariadb_examples.json").read_text()
)
MARIADB_PREFIX = MARIADB["insert_customers"]["topic"].removesuffix(".cdc.customers")


def mariadb_feed():
    return feed(
        {"cdc.customers": "shop.Customer", "cdc.orders": "shop.Order"}, prefix=MARIADB_PREFIX
    )


def real_mariadb(name: str, offset: int) -> Received:
    return captured(MARIADB[name], offset)


def mariadb_source(name: str) -> dict:
    return MARIADB[name]["value"]["payload"]["source"]


def test_real_mariadb_events_carry_their_binlog_place_and_gtid() -> None:
    names = [
        "snapshot_customers",
        "insert_customers",
        "update_customers",
        "delete_orders",
        "tombstone_orders",
        "insert_orders_first_row",
        "insert_orders_later_row",
    ]
    read: dict[str, Any] = {
        n: read_debezium(mariadb_feed(), real_mariadb(n, i), decode_json_value)
        for i, n in enumerate(names)
    }
    assert read["tombstone_orders"] is None
    assert mariadb_source("insert_customers")["connector"] == "mariadb"
    for name in names:
        if read[name] is None:
            continue
        source = mariadb_source(name)
        assert source["file"] == "binlog.000001"
        assert read[name].position == (
            f"binlog.0000000001/{source['pos']:020d}/{source['row']:010d}"
        )
    snap, ins, upd, dele = (read[n] for n in names[:4])
    first, later = read["insert_orders_first_row"], read["insert_orders_later_row"]
    assert (snap.op, snap.transaction) == ("I", None)  # a snapshot read: no transaction
    assert (ins.op, upd.op, dele.op) == ("I", "U", "D")
    assert ins.transaction == upd.transaction == "0-1-8"  # the GTID, as the events carry it
    assert dele.transaction == "0-1-9" and dele.key == "11" and dele.row["id"] == 11
    assert snap.position < ins.position < upd.position < dele.position < first.position
    # Two rows of one binlog event: one position, told apart (and ordered) by the row.
    assert (
        mariadb_source("insert_orders_first_row")["pos"]
        == (mariadb_source("insert_orders_later_row")["pos"])
    )
    assert first.position < later.position


def test_real_mariadb_types_read_as_text_spark_casts_to_the_schemas_types() -> None:
    read = {
        name: read_debezium(mariadb_feed(), real_mariadb(name, 0), decode_json_value)
        for name in ("insert_customers", "insert_orders")
    }
    customer, order = (cast(DataEvent, read[n]) for n in ("insert_customers", "insert_orders"))
    # DECIMAL(12,2): the converter's Decimal bytes; ENUM: its text; DATE: epoch days;
    # DATETIME(3): io.debezium.time.Timestamp (ms), a local time; TIMESTAMP: ZonedTimestamp
    # (ISO, UTC "Z"), an instant: kept with its zone, so Spark's cast reads the same instant
    # whatever the session's time zone; JSON: MariaDB's LONGTEXT, its text as written.
    assert customer.row == {
        "id": 4,
        "name": "Dee",
        "balance": "7.25",
        "tier": "basic",
        "born": "2001-02-03",
        "since": "2026-03-01T08:00:00.125000",
        "seen": "2026-03-01T08:00:00Z",
        "profile": '{"tags": ["a"]}',
    }
    assert order.row == {
        "id": 12,
        "customer_id": 4,
        "amount": "99.99",
        "placed": "2026-03-01T09:00:00",
        "status": "new",
    }


def test_real_mariadb_transaction_assembles_by_its_gtid() -> None:
    names = [
        "transaction_begin",
        "insert_customers",
        "insert_orders",
        "update_customers",
        "transaction_end",
    ]
    out = assemble(
        mariadb_feed(), [real_mariadb(n, i) for i, n in enumerate(names)], decode_json_value, T0
    )
    assert ready_ids(out) == ["0-1-8"] and out.waiting == []
    tx = out.ready[0]
    assert tx.transaction_id == "debezium:pg:0-1-8"
    assert [(r[OP_COLUMN], r[KEY_COLUMN]) for r in rows_of(tx, "shop.Customer")] == [
        ("I", "4"),
        ("U", "1"),
    ]
    assert [(r[OP_COLUMN], r[KEY_COLUMN]) for r in rows_of(tx, "shop.Order")] == [("I", "12")]
    # Without its update the END's counts (cdc.customers: 2) are not met: it waits.
    partial = assemble(
        mariadb_feed(),
        [real_mariadb(n, i) for i, n in enumerate(names) if n != "update_customers"],
        decode_json_value,
        T0,
    )
    assert partial.ready == [] and len(partial.waiting) == 4


def test_binlog_positions_sort_across_files_past_six_digits() -> None:
    places = [
        ("binlog.000009", 9_000_000, 3),
        ("binlog.000010", 4, 0),
        ("binlog.999999", 4, 0),
        ("binlog.1000000", 4, 0),  # MariaDB goes on with 7 digits
        ("binlog.1000000", 4, 1),
    ]
    positions = [binlog_position({"file": f, "pos": p, "row": r}) for f, p, r in places]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    record = Received("t", 0, 3, None, None, T0, T0)
    source = {"connector": "mariadb", "file": "binlog.000001", "pos": 5175, "row": 1}
    assert source_position(source, record) == "binlog.0000000001/00000000000000005175/0000000001"


def test_binlog_transaction_ids_are_kept_whole() -> None:
    """MariaDB's GTID (``<domain>-<server>-<seq>``) and, without GTIDs, Debezium's
    ``file=<binlog>,pos=<pos>`` are one id per transaction: never cut as Postgres's are."""
    assert transaction_key("0-1-8") == "0-1-8"
    assert transaction_key("file=binlog.000001,pos=2406") == "file=binlog.000001,pos=2406"


# -- Avro (the Confluent wire format) and DMS's Kafka target --------------------------------------

AVRO_KEY = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "int"}]}
AVRO_ROW = {
    "type": "record",
    "name": "Value",
    "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": ["null", "string"]}],
}
AVRO_VALUE = {
    "type": "record",
    "name": "Envelope",
    "fields": [
        {"name": "before", "type": ["null", AVRO_ROW], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {
            "name": "source",
            "type": {
                "type": "record",
                "name": "Source",
                "fields": [
                    {"name": "connector", "type": "string"},
                    {"name": "lsn", "type": "long"},
                ],
            },
        },
        {"name": "op", "type": "string"},
        {
            "name": "transaction",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Block",
                    "fields": [
                        {"name": "id", "type": "string"},
                        {"name": "total_order", "type": "long"},
                        {"name": "data_collection_order", "type": "long"},
                    ],
                },
            ],
            "default": None,
        },
    ],
}


def test_avro_events_in_the_wire_format_assemble_like_json(tmp_path: Path) -> None:
    from connectors.avro import ChangeDecoder, codec_for, encode, load_schema
    from streaming.core.config import KafkaConfig

    for name, schema in (("key", AVRO_KEY), ("value", AVRO_VALUE)):
        (tmp_path / f"{name}.avsc").write_text(json.dumps(schema))
    avro = {
        "schemas": {
            1: "builtin:transaction_request",
            2: "builtin:outcome",
            10: str(tmp_path / "key.avsc"),
            11: str(tmp_path / "value.avsc"),
        },
        "outcome_schema_id": 2,
    }
    kafka = KafkaConfig(bootstrap="unused:9092", format="avro", avro=avro)
    codec = codec_for(kafka)
    assert codec is not None
    key_schema = load_schema(str(tmp_path / "key.avsc"), "key")
    value_schema = load_schema(str(tmp_path / "value.avsc"), "value")
    topics = Topics()
    begin = topics.begin("5:1")
    end_id = "5:30"
    records = [begin]
    for offset, (op, row, lsn) in enumerate(
        [("c", {"id": 1, "name": "Ann"}, 10), ("u", {"id": 1, "name": "Anne"}, 20)]
    ):
        value = {
            "before": None,
            "after": row,
            "source": {"connector": "postgresql", "lsn": lsn},
            "op": op,
            "transaction": {
                "id": f"5:{lsn}",
                "total_order": offset + 1,
                "data_collection_order": offset + 1,
            },
        }
        records.append(
            Received(
                "pg.public.customers",
                0,
                offset,
                encode(10, key_schema, {"id": 1}, strict=True),
                encode(11, value_schema, value, strict=True),
                T0,
                T0,
            )
        )
    records.append(topics.end("5", {CUST: 2}, end_id=end_id))

    def decode(data: bytes):  # the transaction topic's records here are JSON
        return decode_json_value(data) if data[:1] == b"{" else codec.decode_change(data)

    out = assemble(feed(), records, decode, T0)
    assert ready_ids(out) == [end_id]
    rows = rows_of(out.ready[0], "shop.Customer")
    assert [(r[OP_COLUMN], r[KEY_COLUMN], r["name"]) for r in rows] == [
        ("I", "1", "Ann"),
        ("U", "1", "Anne"),
    ]
    # What the executors get: the config, not the codec; the same values decoded.
    carried = pickle.loads(pickle.dumps(ChangeDecoder(kafka, codec)))
    assert carried._codec is None and carried(records[1].value) == codec.decode_change(
        records[1].value
    )
    with pytest.raises(RejectedError) as e:
        codec.decode_change(b"\x00\x00\x00\x00\x63body")  # schema id 99: unknown
    assert e.value.code in ("UNKNOWN_SCHEMA_ID", "INVALID_AVRO")


def dms_feed():
    from streaming.core.changefeed import Feed

    return Feed(
        "dmsk",
        "shop",
        "dms",
        {"public.customers": "shop.Customer"},
        {"dms.all": ""},
        None,
        "sourcePosition",
        timedelta(minutes=10),
        100_000,
    )


def dms_record(offset: int, operation: str, data: dict, stamp: str, record_type: str = "data"):
    value = {
        "data": data,
        "metadata": {
            "timestamp": stamp,
            "record-type": record_type,
            "operation": operation,
            "partition-key-type": "primary-key",
            "schema-name": "public",
            "table-name": "customers",
            "transaction-id": 77,
        },
    }
    return Received("dms.all", 0, offset, b"k", json.dumps(value).encode(), T0, T0)


def test_dms_kafka_messages_are_changes_per_key_in_a_chunk() -> None:
    records = [
        dms_record(0, "load", {"ID": 1, "NAME": "a"}, "2024-01-01T00:00:00.000001Z"),
        dms_record(1, "update", {"ID": 1, "NAME": "b"}, "2024-01-01T00:00:01.000000Z"),
        dms_record(2, "delete", {"ID": 1, "NAME": "b"}, "2024-01-01T00:00:02.000000Z"),
        dms_record(3, "create-table", {}, "2024-01-01T00:00:03.000000Z", "control"),
    ]
    out = assemble(dms_feed(), records, decode_json_value, T0)
    assert ready_ids(out) == ["dms.all[0]@0-2"]
    tx = out.ready[0]
    assert tx.transaction_id == "dms:dmsk:dms.all[0]@0-2"
    rows = rows_of(tx, "shop.Customer")
    assert [r[OP_COLUMN] for r in rows] == ["I", "U", "D"]
    assert [r[POSITION_COLUMN] for r in rows] == sorted(r[POSITION_COLUMN] for r in rows)
    request = tx.request()
    assert "id" not in request["actions"][0]["columnMapping"]  # DMS: the data's own id column


def test_a_dms_message_of_another_operation_is_rejected() -> None:
    out = assemble(dms_feed(), [dms_record(0, "upsert", {"ID": 1}, "t")], decode_json_value, T0)
    assert [t.error.code for t in out.ready] == ["INVALID_CHANGE_EVENT"]


def test_bytes_are_base64_text_whichever_converter_sent_them() -> None:
    """Avro's bytes come as bytes, the JSON converter's as base64 text: both staged as base64
    (a ``binary`` property decodes it), never as Python's ``b'...'``."""
    assert connect_value(b"\x00\xffab", None) == "AP9hYg=="
    assert connect_value("AP9hYg==", {"type": "bytes"}) == "AP9hYg=="


# -- the end of the initial snapshot -------------------------------------------------------------


def test_the_snapshot_ends_at_the_ready_item_holding_the_record_marked_last() -> None:
    for wrapped in (False, True):
        topics = Topics(wrapped=wrapped)
        topics.event(CUST, "r", {"id": 1}, snapshot="first")
        topics.event(CUST, "r", {"id": 2}, snapshot="true")
        topics.event(CUST, "r", {"id": 3}, snapshot="last_in_data_collection")
        topics.event(ORD, "r", {"id": 10}, snapshot="first_in_data_collection")
        first = assemble(feed(), topics.take(), decode_json_value, T0)
        assert ends_snapshot(feed(), first.ready, decode_json_value) is None  # a table's last
        topics.event(ORD, "r", {"id": 11}, snapshot="last")
        topics.transaction("700:1", [(CUST, "u", {"id": 1, "name": "Ada"})])
        second = assemble(feed(), topics.take(), decode_json_value, T0)
        ended = ends_snapshot(feed(), second.ready, decode_json_value)
        assert ended is not None and ended.source_id == "pg.public.orders[0]@1-1"
        # Streamed changes ("false", or no mark) end nothing.
        assert ends_snapshot(feed(), second.ready[1:], decode_json_value) is None


def test_a_real_snapshot_record_is_read_for_its_mark() -> None:
    marks = {n: snapshot_of(real(n, 0), decode_json_value) for n in EXAMPLES}
    assert marks["snapshot_customers"] == "first"
    assert marks["snapshot_customers_last"] == "last_in_data_collection"
    assert marks["insert_customers"] == "false"
    assert marks["transaction_end"] is None
    last = json.loads(json.dumps(EXAMPLES["snapshot_orders"]))
    last["value"]["payload"]["source"]["snapshot"] = SNAPSHOT_LAST
    record = Received(last["topic"], 0, 7, b"{}", json.dumps(last["value"]).encode(), T0, T0)
    chunk = assemble(shop_feed(), [record], decode_json_value, T0).ready
    assert ends_snapshot(shop_feed(), chunk, decode_json_value) is chunk[0]


def test_records_that_cannot_end_the_snapshot_are_not_decoded_again() -> None:
    decoded: list[bytes] = []

    def counting(data: bytes) -> object:
        decoded.append(data)
        return decode_json_value(data)

    topics = Topics()
    topics.event(CUST, "r", {"id": 1}, snapshot="true")
    topics.event(CUST, "r", {"id": 2, "name": "last"}, snapshot="true")  # "last" as data
    ready = assemble(feed(), topics.take(), decode_json_value, T0).ready
    assert ends_snapshot(feed(), ready, counting) is None
    assert len(decoded) == 1  # only the one whose bytes hold "last"
    dms = feed_of(
        ChangeFeedConfig(name="d", dataset="shop", format="dms", topic="dms"),
        0,
        {"shop": parse_dataset("shop", yaml.safe_load(SHOP))},
    )
    assert ends_snapshot(dms, ready, counting) is None  # DMS marks no snapshot


def test_a_dms_messages_time_is_its_metadata_timestamp() -> None:
    from streaming.core.changefeed import TIME_COLUMN, read_dms, staged_row

    record = dms_record(0, "update", {"ID": 1}, "2024-01-01T00:00:01.000000Z")
    timed = read_dms(replace(dms_feed(), time_property="changedAt"), record, decode_json_value)
    assert isinstance(timed, DataEvent)
    assert staged_row(timed)[TIME_COLUMN] == "2024-01-01T00:00:01.000000Z"
    plain = read_dms(dms_feed(), record, decode_json_value)
    assert isinstance(plain, DataEvent) and TIME_COLUMN not in staged_row(plain)


# -- no silent wrong value (issue 57): decimals exact, positions in commit order -----------------


def _unscaled_base64(unscaled: int) -> str:
    size = max(1, (unscaled.bit_length() + 8) // 8)  # two's complement, as Connect writes it
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode("ascii")


@given(
    unscaled=st.integers(min_value=-(10**38) + 1, max_value=10**38 - 1),
    scale=st.integers(min_value=0, max_value=38),
)
def test_decimals_of_up_to_38_digits_read_exact_at_every_scale(unscaled: int, scale: int) -> None:
    """Connect's Decimal and Debezium's VariableScaleDecimal → plain text of the exact value:
    no 28-digit context, no exponent (Decimal with a context as wide as the digits checks)."""
    fixed = connect_value(
        _unscaled_base64(unscaled),
        {"name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": str(scale)}},
    )
    variable = connect_value(
        {"scale": scale, "value": _unscaled_base64(unscaled)},
        {"name": "io.debezium.data.VariableScaleDecimal"},
    )
    exact = Decimal(unscaled).scaleb(-scale, Context(prec=80))
    assert fixed == variable == decimal_text(unscaled, scale)
    assert "E" not in fixed and "e" not in fixed
    assert Decimal(fixed) == exact
    digits = fixed.lstrip("-").replace(".", "").lstrip("0") or "0"
    assert len(digits) <= max(len(str(abs(unscaled))), 1)  # no digit invented, none dropped
    if scale:
        assert len(fixed.split(".")[1]) == scale  # the scale's digits, zeros kept


def test_the_issues_38_digit_decimal_is_not_rounded() -> None:
    """numeric(38,10) 99999999999999999999999999.9999999999 landed as 1E+26 (issue 57)."""
    value = connect_value(
        _unscaled_base64(999999999999999999999999999999999999),
        {"name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "10"}},
    )
    assert value == "99999999999999999999999999.9999999999"
    assert decimal_text(-5, 3) == "-0.005" and decimal_text(12, 0) == "12"
    assert decimal_text(12, -2) == "1200"


def test_avro_decimals_are_staged_as_exact_plain_text() -> None:
    """fastavro reads an Avro decimal as ``Decimal`` at the schema's precision; the staged row's
    JSON keeps every digit, without exponent notation."""
    row = {"big": Decimal("99999999999999999999999999.9999999999"), "e": Decimal("1E+30")}
    text = json.dumps(row, default=plain_json)
    assert json.loads(text) == {
        "big": "99999999999999999999999999.9999999999",
        "e": "1000000000000000000000000000000",
    }


def _pg_source(**fields: Any) -> dict[str, Any]:
    return {"connector": "postgresql", "db": "cdc", "schema": "public", "table": "b", **fields}


RECORD = Received("pg.public.b", 0, 0, None, None, T0, T0)


def test_an_incremental_snapshot_read_sorts_before_a_transaction_that_committed_after_it() -> None:
    """What Debezium 3.6.1 sent against PostgreSQL 15 (issue 57): a transaction updated id 3
    (LSN 26408872) and stayed open while an incremental snapshot read the chunk holding id 3
    (reads without ``lsn``, ``sequence`` of the stream's place, [26409648, 26409648]); it
    committed after, and its update was emitted after the read. By the change's LSN alone the
    read was newer and the update stale: the Delta table kept the old row."""
    read = source_position(
        _pg_source(snapshot="incremental", sequence='["26409648","26409648"]'), RECORD
    )
    late_commit = source_position(
        _pg_source(snapshot="false", lsn=26408872, sequence='["26412944","26408872"]'), RECORD
    )
    next_tx = source_position(
        _pg_source(snapshot="false", lsn=26412992, sequence='["26412992","26412992"]'), RECORD
    )
    later_chunk = source_position(
        _pg_source(snapshot="incremental", sequence='["26410368","26410368"]'), RECORD
    )
    assert read < later_chunk < late_commit < next_tx
    assert late_commit == "00000000000026412944/00000000000026408872"


def test_postgres_positions_order_one_transactions_changes_by_their_lsn() -> None:
    first, second = (
        source_position(_pg_source(lsn=lsn, sequence=f'["500","{lsn}"]'), RECORD)
        for lsn in (420, 480)
    )
    assert first < second
    # The initial snapshot's reads and the first transaction after a start carry no committed
    # LSN ([null, lsn]): the change's LSN stands for it, as before.
    snapshot = source_position(_pg_source(lsn=26380464, sequence='[null,"26380464"]'), RECORD)
    streamed = source_position(_pg_source(lsn=26380504, sequence='[null,"26380504"]'), RECORD)
    assert snapshot == "00000000000026380464/00000000000026380464" < streamed
    assert source_position(_pg_source(lsn=9), RECORD) == f"{9:020d}/{9:020d}"


def test_a_postgres_event_without_a_position_is_rejected_not_ordered_by_its_time() -> None:
    """Before, such an event fell back to ``<ts_ms>/<offset>``, text that sorts after every LSN:
    it won over every later change of its key."""
    for source in (_pg_source(ts_ms=1_700_000_000_000), _pg_source(sequence="[null,null]")):
        with pytest.raises(RejectedError) as e:
            source_position(source, RECORD)
        assert e.value.code == "INVALID_CHANGE_EVENT" and "no position" in e.value.message
    with pytest.raises(RejectedError):
        source_position({"connector": "mariadb", "ts_ms": 1}, RECORD)


def test_a_mariadb_incremental_read_sorts_before_a_transaction_that_committed_after_it() -> None:
    """What Debezium's MariaDB connector (3.5.0) sent against MariaDB 10.11: incremental reads
    carry the binlog place of the stream where they are emitted (row 0); a transaction open
    across the read is written to the binlog when it commits, after that place."""
    source = {"connector": "mariadb", "snapshot": "incremental", "row": 0}
    reads = [binlog_position({**source, "file": "binlog.000001", "pos": p}) for p in (4090, 7612)]
    late = binlog_position(
        {"connector": "mariadb", "file": "binlog.000001", "pos": 9179, "row": 0, "gtid": "0-1-22"}
    )
    assert reads[0] < reads[1] < late


def postgres_insert(column: dict[str, Any], value: Any, offset: int = 7) -> Received:
    """A PostgreSQL insert into ``public.customers`` of ``id`` 1 and one column of the given
    Connect schema (``{"field": …, "type": …, "name": …}``), with the converter's schema."""
    schema = {
        "type": "struct",
        "fields": [
            {
                "field": "after",
                "type": "struct",
                "fields": [{"field": "id", "type": "int32"}, column],
            }
        ],
    }
    payload = {
        "before": None,
        "after": {"id": 1, column["field"]: value},
        "source": {"connector": "postgresql", "lsn": 10, "sequence": '[null,"10"]'},
        "op": "c",
    }
    value_bytes = json.dumps(wrap(payload, schema)).encode()
    return Received("pg.public.customers", 0, offset, b'{"id": 1}', value_bytes, T0, T0)


def test_a_value_that_cannot_be_converted_is_rejected_not_a_crash() -> None:
    """What Debezium 3.6.1 sends for PostgreSQL's ``date 'infinity'``: an ``io.debezium.time.Date``
    of -2147472692 days, outside Python's dates. The conversion raised OverflowError out of the
    decoder (a failed task, the batch failing again on every retry); the record is now
    INVALID_CHANGE_EVENT, naming the column, its type and the value, and kept in quarantine."""
    date_column = {"field": "d", "type": "int32", "name": "io.debezium.time.Date"}
    record = postgres_insert(date_column, -2147472692)
    with pytest.raises(RejectedError) as e:
        read_debezium(feed(), record, decode_json_value)
    assert e.value.code == "INVALID_CHANGE_EVENT"
    assert "column 'd'" in e.value.message and "io.debezium.time.Date" in e.value.message
    assert "-2147472692" in e.value.message and "pg.public.customers[0]@7" in e.value.message


TYPES = json.loads((Path(__file__).parent / "fixtures" / "debezium_types.json").read_text())


def converted(db: str, row: str) -> dict[str, Any]:
    """Each column of a captured row (``fixtures/debezium_types.json``) through
    ``connect_value``, or the ``ValueError`` it raises."""
    fields = {f["field"]: f for f in TYPES[db]["after_schema"]["fields"]}
    out: dict[str, Any] = {}
    for column, value in TYPES[db]["rows"][row].items():
        try:
            out[column] = connect_value(value, fields[column])
        except ValueError as e:
            out[column] = e
    return out


def test_real_postgres_values_of_every_type_read_as_the_database_wrote_them() -> None:
    """PostgreSQL 15 through Debezium 3.6.1 (precise decimals, adaptive times): what each
    documented type becomes before Spark casts it to the property (docs/interface.md, "How
    PostgreSQL's types land"). Times of day are text whatever unit Debezium counted them in
    (``time`` in µs, ``time(0)`` in ms: as numbers the two columns differed 1000 times)."""
    typical, edges = converted("postgresql", "1"), converted("postgresql", "2")
    assert typical["n"] == "12.5000000000" and typical["nv"] == "3.14159"
    assert typical["m"] == "12.34"  # money: a Decimal of scale 2
    assert typical["tm"] == "10:11:12.123456" and typical["tm0"] == "10:11:12"
    assert typical["tmz"] == "08:11:12Z"  # timetz: Debezium's ZonedTime, in UTC
    assert typical["iv"] == 37091106500000  # 1 year 2 mons 3 days 04:05:06.5, in µs
    assert typical["ts"] == "2024-02-29T10:11:12.123456" and typical["dt"] == "2024-02-29"
    assert typical["ts3"] == "2024-02-29T10:11:12.123000"
    assert typical["tz"] == "2024-02-29T08:11:12.123456Z"
    assert typical["by"] == "AP8Q" and typical["bt"] == "Cg=="  # bytea, bit(4) '1010': bytes
    assert typical["b1"] is True and typical["ia"] == [1, 2, None]
    assert typical["pt"]["x"] == 1.5 and typical["hs"] == '{"a":"1","b":null}'
    assert typical["r4"] == "[1,10)" and typical["ip"] == "192.168.0.1/24"
    assert edges["n"] == "9999999999999999999999999999.9999999999"
    assert edges["m"] == "-92233720368547758.08"
    assert edges["r"] == "NaN" and edges["d"] == "Infinity"  # Spark casts them to doubles
    assert edges["nv"] is None  # numeric 'NaN': Debezium's precise mode sends NULL
    assert edges["tm"] == "24:00:00" and edges["tmz"] == "12:00:00Z"
    assert edges["dt"] == "0001-01-01" and edges["ts3"] == "9999-12-31T23:59:59.999000"
    assert edges["tz"] == "9999-12-31T23:59:59.999999Z"


@pytest.mark.parametrize(
    ("row", "column", "sent"),
    [
        ("10", "dt", -2147472692),  # date 'infinity'
        ("11", "ts", 9223372036825200000),  # timestamp 'infinity'
        ("12", "tz", "infinity"),  # timestamptz 'infinity'
        ("13", "ts", -9223372036832400000),  # timestamp '-infinity'
    ],
)
def test_real_postgres_infinities_are_values_no_delta_column_holds(
    row: str, column: str, sent: Any
) -> None:
    assert TYPES["postgresql"]["rows"][row][column] == sent
    error = converted("postgresql", row)[column]
    assert isinstance(error, ValueError) and "infinity" in str(error)


def test_real_postgres_interval_past_debeziums_limit_is_refused() -> None:
    """``interval '-178000000 years'`` came as -2^63: Debezium's MicroDuration saturates there
    (it approximates months as 30.4375 days too): refused, with the setting that sends text."""
    assert TYPES["postgresql"]["rows"]["2"]["iv"] == -(2**63)
    error = converted("postgresql", "2")["iv"]
    assert isinstance(error, ValueError) and "interval.handling.mode=string" in str(error)


def test_real_postgres_numeric_nan_and_infinity_come_as_null() -> None:
    """PostgreSQL's numeric 'NaN' and '-Infinity' (sized and not): Debezium's precise mode sends
    NULL, nothing the job can tell from a NULL (docs/interface.md says so, and what to set)."""
    assert TYPES["postgresql"]["rows"]["14"]["n"] is None
    assert TYPES["postgresql"]["rows"]["15"]["nv"] is None


def test_real_mariadb_values_of_every_type_read_as_the_database_wrote_them() -> None:
    typical, edges = converted("mariadb", "1"), converted("mariadb", "2")
    assert typical["tm"] == "10:11:12" and typical["tm6"] == "10:11:12.123456"
    assert typical["y"] == 2024 and typical["s"] == "a,c" and typical["e"] == "happy"
    assert typical["tb"] == 1 and typical["b1"] is True
    assert typical["b10"] == "qgI="  # BIT(10) b'1010101010': bytes, least significant first
    assert typical["n65"] == "1.500000000000000000000000000000"  # DECIMAL(65,30): text
    assert typical["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert edges["tm"] == "-838:59:59" and edges["tm6"] == "838:59:59"
    assert edges["n"] == "9999999999999999999999999999.9999999999"
    assert edges["dt"] is None and edges["dtt"] is None  # zero dates: Debezium sends NULL
    assert edges["bu"] == -1  # BIGINT UNSIGNED 18446744073709551615, wrapped by Debezium
    assert converted("mariadb", "4")["tm6"] == "-00:00:00.000001"
    assert converted("mariadb", "5")["y"] == 0  # YEAR 0000, sent as 1900


def test_a_wrapped_unsigned_bigint_is_refused_when_the_connector_names_the_type() -> None:
    """With ``column.propagate.source.type`` the schema says the column is unsigned: a negative
    value is one Debezium's ``bigint.unsigned.handling.mode=long`` wrapped."""
    schema = {
        "type": "int64",
        "optional": True,
        "parameters": {"__debezium.source.column.type": "BIGINT UNSIGNED"},
    }
    assert connect_value(7, schema) == 7
    with pytest.raises(ValueError, match=r"bigint\.unsigned\.handling\.mode"):
        connect_value(-1, schema)
    assert connect_value(-1, {"type": "int64"}) == -1  # signed: as sent


@pytest.mark.parametrize(
    ("name", "value", "text"),
    [
        ("io.debezium.time.MicroTime", 0, "00:00:00"),
        ("io.debezium.time.MicroTime", 86_400_000_000, "24:00:00"),
        ("io.debezium.time.MicroTime", 500_000, "00:00:00.5"),
        ("io.debezium.time.Time", 45_296_789, "12:34:56.789"),
        ("org.apache.kafka.connect.data.Time", 1, "00:00:00.001"),
        ("io.debezium.time.NanoTime", 1, "00:00:00.000000001"),
        ("io.debezium.time.MicroTime", -1, "-00:00:00.000001"),
        ("io.debezium.time.MicroTime", 3_020_399_000_000, "838:59:59"),
    ],
)
def test_times_of_day_are_text_in_every_unit(name: str, value: int, text: str) -> None:
    assert connect_value(value, {"type": "int64", "name": name}) == text


def test_a_time_into_an_integer_property_keeps_debeziums_count() -> None:
    """A property declared (or evolved) ``integer`` for a time column before times landed as
    text keeps getting the count Debezium sends; a string property gets the text."""
    shop = """
shop.Customer:
  properties: {{opensAt: {{type: {kind}}}, sourcePosition: {{type: string}}}}
  watermark: [sourcePosition]
"""
    micro = {"field": "opens_at", "type": "int64", "name": "io.debezium.time.MicroTime"}
    record = postgres_insert(micro, 36_000_000_000)
    got = {}
    for kind in ("integer", "string"):
        datasets = {"shop": parse_dataset("shop", yaml.safe_load(shop.format(kind=kind)))}
        cfg = ChangeFeedConfig(
            name="shop", dataset="shop", topic_prefix="pg", tables={"shop.Customer": CUST}
        )
        event = read_debezium(feed_of(cfg, 0, datasets), record, decode_json_value)
        assert isinstance(event, DataEvent) and event.row is not None
        got[kind] = event.row["opens_at"]
    assert got == {"integer": 36_000_000_000, "string": "10:00:00"}


def avro_schema_of(connect: dict[str, Any], name: str) -> Any:
    """The Avro schema Confluent's AvroConverter (``AvroData.fromConnectSchema``) writes for a
    Connect schema: Connect's name and parameters as ``connect.name`` and ``connect.parameters``,
    int8/int16 as an ``int`` with ``connect.type``, Connect's Decimal, Date, Time and Timestamp
    with their Avro logical types, an optional schema as a union with null (default null). No
    Connect Avro converter is served from Maven Central: this follows its documented rules."""
    kind = connect["type"]
    out: dict[str, Any]
    if kind == "struct":
        fields = []
        for f in connect["fields"]:
            field: dict[str, Any] = {
                "name": f["field"],
                "type": avro_schema_of(f, f"{name}_{f['field']}"),
            }
            if f.get("optional"):
                field["default"] = None
            fields.append(field)
        out = {"type": "record", "name": name, "fields": fields}
    elif kind == "array":
        out = {"type": "array", "items": avro_schema_of(connect["items"], f"{name}_items")}
    else:
        base = {"int8": "int", "int16": "int", "int32": "int", "int64": "long", "float": "float"}
        out = {"type": base.get(kind, {"float32": "float", "float64": "double"}.get(kind, kind))}
        if kind in ("int8", "int16"):
            out["connect.type"] = kind
    params = connect.get("parameters") or {}
    if connect.get("name"):
        out["connect.name"] = connect["name"]
        out["connect.version"] = 1
    if params:
        out["connect.parameters"] = dict(params)
    logical = {
        "org.apache.kafka.connect.data.Date": "date",
        "org.apache.kafka.connect.data.Time": "time-millis",
        "org.apache.kafka.connect.data.Timestamp": "timestamp-millis",
    }.get(connect.get("name") or "")
    if logical:
        out["logicalType"] = logical
    if connect.get("name") == "org.apache.kafka.connect.data.Decimal":
        precision = int(params.get("connect.decimal.precision", 64))
        out.update(logicalType="decimal", precision=precision, scale=int(params["scale"]))
    return ["null", out] if connect.get("optional") else out


def avro_value_of(value: Any, connect: dict[str, Any]) -> Any:
    """A value as the JSON converter wrote it → as the AvroConverter writes it (bytes raw,
    decimals as numbers)."""
    if value is None:
        return None
    name = connect.get("name")
    if name == "org.apache.kafka.connect.data.Decimal":
        unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
        return Decimal(unscaled).scaleb(-int(connect["parameters"]["scale"]), Context(prec=80))
    if connect["type"] == "bytes":
        return base64.b64decode(value)
    if connect["type"] in ("float", "double") and isinstance(value, str):
        return float(value)  # the JSON converter's "NaN", "Infinity"
    if connect["type"] == "struct":
        return {f["field"]: avro_value_of(value.get(f["field"]), f) for f in connect["fields"]}
    if connect["type"] == "array":
        return [avro_value_of(v, connect["items"]) for v in value]
    return value


@pytest.mark.parametrize(
    ("db", "row"),
    [
        ("postgresql", "1"),
        ("postgresql", "2"),
        ("mariadb", "1"),
        ("mariadb", "2"),
        ("mariadb", "5"),
    ],
)
def test_avro_events_read_every_type_as_the_json_converters_do(
    tmp_path: Path, db: str, row: str
) -> None:
    """The captured rows of every type (``fixtures/debezium_types.json``) written as the JSON
    converter wrote them and as the AvroConverter writes the same Connect records: the staged
    rows are the same (Debezium's semantic types — times, dates, decimals, bits — read from
    the Avro schema's ``connect.name``; before, Avro's were staged as raw counts)."""
    from connectors.avro import codec_for, encode, load_schema
    from streaming.core.config import KafkaConfig

    after = TYPES[db]["after_schema"]
    envelope = {
        "type": "struct",
        "fields": [
            {**after, "field": "before", "optional": True},
            {**after, "field": "after", "optional": True},
            {
                "type": "struct",
                "field": "source",
                "fields": [
                    {"type": "string", "field": "connector"},
                    {"type": "int64", "field": "lsn", "optional": True},
                    {"type": "string", "field": "file", "optional": True},
                    {"type": "int64", "field": "pos", "optional": True},
                    {"type": "int32", "field": "row", "optional": True},
                ],
            },
            {"type": "string", "field": "op"},
        ],
    }
    schema = avro_schema_of(envelope, "Envelope")
    (tmp_path / "value.avsc").write_text(json.dumps(schema))
    avro = {
        "schemas": {
            1: "builtin:transaction_request",
            2: "builtin:outcome",
            11: str(tmp_path / "value.avsc"),
        },
        "outcome_schema_id": 2,
    }
    codec = codec_for(KafkaConfig(bootstrap="unused:9092", format="avro", avro=avro))
    assert codec is not None
    values = TYPES[db]["rows"][row]
    if (db, row) == ("postgresql", "2"):  # its interval is past MicroDuration: rejected alike
        values = {**values, "iv": None}
    source = (
        {"connector": "postgresql", "lsn": 10, "file": None, "pos": None, "row": None}
        if db == "postgresql"
        else {"connector": "mariadb", "lsn": None, "file": "binlog.000001", "pos": 4, "row": 0}
    )
    payload = {"before": None, "after": values, "source": source, "op": "c"}
    as_avro = {**payload, "after": avro_value_of(values, {**after, "type": "struct"})}
    written = encode(11, load_schema(str(tmp_path / "value.avsc"), "value"), as_avro, strict=True)
    topic = "pg.public.customers"
    json_record = Received(topic, 0, 1, None, json.dumps(wrap(payload, envelope)).encode(), T0, T0)
    avro_record = Received(topic, 0, 1, None, written, T0, T0)
    from_json = read_debezium(feed(), json_record, decode_json_value)
    from_avro = read_debezium(feed(), avro_record, codec.decode_change)
    assert isinstance(from_json, DataEvent) and isinstance(from_avro, DataEvent)
    staged = [json.loads(json.dumps(e.row, default=plain_json)) for e in (from_json, from_avro)]
    assert staged[0] == staged[1]
    assert from_avro.row is not None and set(from_avro.row) == set(values)


def test_avros_logical_dates_times_and_timestamps_read_as_from_json() -> None:
    """Connect's own Date, Time and Timestamp (``time.precision.mode=connect``) carry Avro
    logical types, which fastavro reads as Python values: the same text as the counts JSON
    sends."""
    date_schema = {"type": "int32", "name": "org.apache.kafka.connect.data.Date"}
    stamp = {"type": "int64", "name": "org.apache.kafka.connect.data.Timestamp"}
    clock = {"type": "int32", "name": "org.apache.kafka.connect.data.Time"}
    assert connect_value(date(1, 1, 1), date_schema) == connect_value(-719162, date_schema)
    instant = datetime(2024, 2, 29, 10, 11, 12, 123000, tzinfo=UTC)
    assert connect_value(instant, stamp) == connect_value(1709201472123, stamp)
    assert connect_value(time(10, 11, 12, 500000), clock) == connect_value(36672500, clock)
    assert connect_value(float("nan"), {"type": "double"}) == "NaN"
    assert connect_value(1.100000023841858, {"type": "float"}) == 1.1  # a single, as JSON's
