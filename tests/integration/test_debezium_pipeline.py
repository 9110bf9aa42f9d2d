"""The real PostgreSQL → Debezium → Kafka pipeline the product will consume (issue 35): a
throwaway PostgreSQL 15 (tests/support/postgres.py), Kafka Connect with Debezium's PostgreSQL
connector (tests/support/kafka_connect.py) and the session's Kafka broker.

One connector start for the module: two tables with rows before it starts (the snapshot), then
one transaction over both tables (inserts, an update, a delete); the tests check what Debezium
wrote for them. ``WRITE_DEBEZIUM_EXAMPLES=<file>`` also writes the messages of the run as the
named examples of tests/unit/fixtures/debezium_postgres_examples.json.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.kafka import Record, read_topic
from tests.support.kafka_broker import LocalKafkaBroker
from tests.support.kafka_connect import DebeziumPostgresConnect, wait_for_slot
from tests.support.postgres import PostgresCluster

pytestmark = pytest.mark.kafka

PREFIX = "shop"
CUSTOMERS = "public.customers"
ORDERS = "public.orders"
SNAPSHOT_MARKS = {
    "first",
    "first_in_data_collection",
    "true",
    "last_in_data_collection",
    "last",
}
"""``source.snapshot`` of a snapshot event (``"false"`` for streamed ones)."""


@dataclass(frozen=True)
class Message:
    """One message as Connect wrote it (JSON with the schema wrapper), decoded."""

    topic: str
    key: dict[str, Any]
    value: dict[str, Any] | None  # None: a tombstone

    @property
    def payload(self) -> dict[str, Any]:
        assert self.value is not None, f"a tombstone on {self.topic}: {self.key}"
        payload: dict[str, Any] = self.value["payload"]
        return payload

    @property
    def key_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = self.key["payload"]
        return payload

    def example(self) -> dict[str, Any]:
        return {"topic": self.topic, "key": self.key, "value": self.value}


@dataclass(frozen=True)
class Run:
    customers: list[Message]
    orders: list[Message]
    transactions: list[Message]
    txid: int
    """The PostgreSQL transaction id of the multi-table transaction."""


def _decode(topic: str, records: list[Record]) -> list[Message]:
    messages = []
    for r in records:
        assert r.key is not None, f"{topic}@{r.offset}: no key"
        value = None if r.value is None else json.loads(r.value)
        messages.append(Message(topic, json.loads(r.key), value))
    return messages


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresCluster]:
    with PostgresCluster(tmp_path_factory.mktemp("postgres")) as pg:
        yield pg


@pytest.fixture(scope="module")
def run(
    postgres: PostgresCluster,
    kafka_broker: LocalKafkaBroker,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Run]:
    pg = postgres
    pg.execute(
        "CREATE TABLE customers (id int PRIMARY KEY, name text, balance numeric(10,2), "
        "created_at timestamp)"
    )
    pg.execute(
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric(10,2), "
        "placed_at timestamptz)"
    )
    for table in ("customers", "orders"):
        pg.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
    with pg.transaction() as cur:  # before the connector: the snapshot
        cur.execute(
            "INSERT INTO customers VALUES "
            "(1, 'Ada', 100.00, '2024-01-02 03:04:05.123456'), "
            "(2, 'Bob', 20.50, '2024-02-03 04:05:06'), "
            "(3, 'Cy', 0.00, NULL)"
        )
        cur.execute(
            "INSERT INTO orders VALUES "
            "(10, 1, 12.34, '2024-03-04 05:06:07.5+00'), "
            "(11, 2, 5.00, '2024-03-05 06:07:08+00')"
        )
    connect = DebeziumPostgresConnect(
        tmp_path_factory.mktemp("connect"),
        kafka_broker.bootstrap,
        pg,
        topic_prefix=PREFIX,
        tables=[CUSTOMERS, ORDERS],
    )
    connect.start()
    try:
        wait_for_slot(pg, connect.slot_name)
        with pg.transaction() as cur:  # one transaction over both tables
            cur.execute(
                "INSERT INTO customers VALUES (4, 'Dee', 7.25, '2024-04-05 06:07:08.000001')"
            )
            cur.execute("INSERT INTO orders VALUES (12, 4, 99.99, '2024-04-05 06:07:09+02')")
            cur.execute("UPDATE customers SET balance = balance - 12.34 WHERE id = 1")
            cur.execute("DELETE FROM orders WHERE id = 11")
            cur.execute("SELECT txid_current()")
            row = cur.fetchone()
            assert row is not None
            txid = int(row[0])
        bootstrap = kafka_broker.bootstrap
        customers = read_topic(bootstrap, connect.topic(CUSTOMERS), expect=3 + 2)
        orders = read_topic(bootstrap, connect.topic(ORDERS), expect=2 + 2 + 1)
        transactions = read_topic(bootstrap, connect.transaction_topic, expect=2)
    finally:
        connect.stop()
    result = Run(
        customers=_decode(connect.topic(CUSTOMERS), customers),
        orders=_decode(connect.topic(ORDERS), orders),
        transactions=_decode(connect.transaction_topic, transactions),
        txid=txid,
    )
    if target := os.environ.get("WRITE_DEBEZIUM_EXAMPLES"):
        _write_examples(result, Path(target))
    yield result


def _write_examples(run: Run, path: Path) -> None:
    c, o, t = run.customers, run.orders, run.transactions
    examples = {
        "snapshot_customers": c[0],
        "snapshot_customers_last": c[2],
        "snapshot_orders": o[0],
        "insert_customers": c[3],
        "update_customers": c[4],
        "insert_orders": o[2],
        "delete_orders": o[3],
        "tombstone_orders": o[4],
        "transaction_begin": t[0],
        "transaction_end": t[1],
    }
    text = json.dumps({name: m.example() for name, m in examples.items()}, indent=2)
    path.write_text(text + "\n")


def test_snapshot_events_are_reads_without_a_transaction(run: Run) -> None:
    snapshot = run.customers[:3] + run.orders[:2]
    assert [m.payload["op"] for m in snapshot] == ["r"] * 5
    assert [m.key_payload for m in run.customers[:3]] == [{"id": 1}, {"id": 2}, {"id": 3}]
    assert run.customers[0].payload["after"] == {
        "id": 1,
        "name": "Ada",
        "balance": "100.00",  # decimal.handling.mode=string
        "created_at": 1704164645123456,  # timestamp: microseconds since the epoch
    }
    for m in snapshot:
        assert m.payload["before"] is None
        assert m.payload["transaction"] is None
        assert m.payload["source"]["snapshot"] in SNAPSHOT_MARKS
        assert isinstance(m.payload["source"]["lsn"], int)
    # Each table's first and last read are marked; the snapshot's very last read is "last"
    # (what ends a feed's snapshot: tests/support/assembly.ends_snapshot).
    assert [m.payload["source"]["snapshot"] for m in snapshot] == [
        "first",
        "true",
        "last_in_data_collection",
        "first_in_data_collection",
        "last",
    ]


def test_the_transaction_s_events_carry_its_id_and_order(run: Run) -> None:
    events = [m for m in run.customers[3:] + run.orders[2:] if m.value is not None]
    events.sort(key=lambda m: m.payload["transaction"]["total_order"])
    assert [(m.topic, m.payload["op"], m.key_payload) for m in events] == [
        (f"{PREFIX}.{CUSTOMERS}", "c", {"id": 4}),
        (f"{PREFIX}.{ORDERS}", "c", {"id": 12}),
        (f"{PREFIX}.{CUSTOMERS}", "u", {"id": 1}),
        (f"{PREFIX}.{ORDERS}", "d", {"id": 11}),
    ]
    blocks = [m.payload["transaction"] for m in events]
    assert [b["total_order"] for b in blocks] == [1, 2, 3, 4]
    assert [b["data_collection_order"] for b in blocks] == [1, 1, 2, 2]
    for m, block in zip(events, blocks, strict=True):
        source = m.payload["source"]
        assert source["snapshot"] == "false"
        assert source["txId"] == run.txid
        # "<txId>:<lsn>": the lsn part is the event's own (source.lsn), not the transaction's.
        assert block["id"] == f"{run.txid}:{source['lsn']}"
        assert json.loads(source["sequence"])[1] == str(source["lsn"])
    lsns = [m.payload["source"]["lsn"] for m in events]
    assert lsns == sorted(lsns)


def test_an_update_has_before_and_after(run: Run) -> None:
    update = run.customers[4].payload
    assert update["op"] == "u"
    assert update["before"]["balance"] == "100.00"  # REPLICA IDENTITY FULL
    assert update["after"]["balance"] == "87.66"
    assert update["before"]["created_at"] == update["after"]["created_at"]


def test_a_delete_then_a_tombstone_with_its_key(run: Run) -> None:
    delete, tombstone = run.orders[3], run.orders[4]
    assert delete.payload["op"] == "d"
    assert delete.payload["after"] is None
    assert delete.payload["before"]["id"] == 11
    assert delete.payload["before"]["amount"] == "5.00"
    assert tombstone.value is None
    assert tombstone.key == delete.key


def test_begin_and_end_on_the_transaction_topic(run: Run) -> None:
    begin, end = (m.payload for m in run.transactions)
    assert begin["status"] == "BEGIN"
    assert begin["event_count"] is None
    assert end["status"] == "END"
    assert end["event_count"] == 4
    assert sorted((c["data_collection"], c["event_count"]) for c in end["data_collections"]) == [
        (CUSTOMERS, 2),
        (ORDERS, 2),
    ]
    for m in run.transactions:
        assert m.payload["id"].split(":")[0] == str(run.txid)
        assert m.key_payload == {"id": m.payload["id"]}
    # BEGIN's id is the first event's, END's carries the commit's lsn.
    first = min(
        (m for m in run.customers[3:] + run.orders[2:] if m.value is not None),
        key=lambda m: m.payload["transaction"]["total_order"],
    )
    assert begin["id"] == first.payload["transaction"]["id"]
