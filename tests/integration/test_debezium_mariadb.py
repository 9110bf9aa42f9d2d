"""MariaDB's change feed end to end: MariaDB 10.11 (tests/support/mariadb.py) → Debezium's
MariaDB connector in Kafka Connect → the test broker → the job (running, a 1-second trigger) →
Delta, as tests/integration/test_debezium_end_to_end.py does for PostgreSQL.

A snapshot of two tables, then a workload of multi-table transactions (inserts, updates,
deletes, a key deleted and inserted again, many rows in one transaction) while the job runs,
over MariaDB's types: DECIMAL (the converter's Decimal bytes), ENUM, DATE, DATETIME(3), DATETIME,
TIMESTAMP, JSON. Proven:

- at the end the Delta tables equal MariaDB's, row for row and value for value (read by
  delta-rs);
- after every micro-batch, the tables read at the versions the ledger recorded for it equal
  MariaDB as of one commit of the workload;
- one COMMITTED outcome per source transaction, named by its GTID;
- every row's position is the binlog's (file/position/row), none past the binlog's end.

``WRITE_DEBEZIUM_EXAMPLES=<file>`` also writes messages of the run as the named examples of
tests/unit/fixtures/debezium_mariadb_examples.json.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.core.changefeed import binlog_position
from tests.support import Workspace, lakestate, stored_outcomes, streaming_job
from tests.support.cdc import wait_until
from tests.support.datasets import SHOP_MARIADB
from tests.support.kafka import read_topic
from tests.support.kafka_broker import LocalKafkaBroker
from tests.support.kafka_connect import DebeziumMariaDBConnect
from tests.support.lakestate import State, versions_per_batch
from tests.support.mariadb import MariaDBServer

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

TABLES = {"shop.Customer": "cdc.customers", "shop.Order": "cdc.orders"}
COLUMNS = {
    "shop.Customer": ("name", "balance", "tier", "born", "since", "seen", "profile"),
    "shop.Order": ("customerId", "amount", "placed", "status"),
}
DB_COLUMNS = {
    "shop.Customer": COLUMNS["shop.Customer"],
    "shop.Order": ("customer_id", "amount", "placed", "status"),
}
KINDS = {"born": "date", "since": "time", "seen": "time", "placed": "time", "profile": "json"}
POSITION = re.compile(r"binlog\.\d{10}/\d{20}/\d{10}")


def _db_value(column: str, value: Any) -> Any:
    """A value as MariaDB's JSON_OBJECT gives it (tests/support/mariadb.py) → Python's type."""
    kind = KINDS.get(column)
    if value is None or kind in (None, "json"):
        return value
    return date.fromisoformat(value) if kind == "date" else datetime.fromisoformat(value)


def _delta_value(column: str, value: Any) -> Any:
    kind = KINDS.get(column)
    if value is None:
        return None
    if kind == "json":
        return json.loads(value, parse_float=Decimal)
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def db_state(db: MariaDBServer) -> State:
    return lakestate.source_state(db.read_table, TABLES, DB_COLUMNS, value=_db_value)


def delta_state(warehouse: Path, versions: dict[str, int] | None = None) -> State:
    return lakestate.delta_state(warehouse, COLUMNS, versions, value=_delta_value)


def consistent(warehouse: Path) -> State | None:
    return lakestate.consistent(warehouse, COLUMNS, value=_delta_value)


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    with MariaDBServer(tmp_path_factory.mktemp("mariadb")) as db:
        yield db


def test_mariadb_to_delta_equal_after_every_batch_and_at_the_end(
    spark: SparkSession,
    ws: Workspace,
    kafka_broker: LocalKafkaBroker,
    mariadb: MariaDBServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    db = mariadb
    prefix = f"mdb{uuid.uuid4().hex[:6]}"
    db.execute(
        "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(40), balance DECIMAL(12,2), "
        "tier ENUM('basic','gold'), born DATE, since DATETIME(3), seen TIMESTAMP NULL, "
        "profile JSON)"
    )
    db.execute(
        "CREATE TABLE orders (id INT PRIMARY KEY, customer_id INT, amount DECIMAL(10,2), "
        "placed DATETIME, status ENUM('new','paid'))"
    )
    with db.transaction() as tx:
        tx.execute(
            "INSERT INTO customers VALUES "
            "(1, 'Ada', 100, 'gold', '1990-05-17', '2026-01-02 03:04:05.678', "
            "'2026-01-02 03:04:05', '{\"vip\": true}'), "
            "(2, 'Bob', 20.5, 'basic', NULL, '2026-01-05 00:00:00', NULL, '{\"vip\": false}'), "
            "(3, 'Cy', 0, 'basic', '1985-12-31', '2026-01-06 12:00:00', "
            "'2026-01-06 12:00:00', '[]')"
        )
        tx.execute(
            "INSERT INTO orders VALUES (10, 1, 12.34, '2026-01-03 10:00:00', 'paid'), "
            "(11, 2, 5, '2026-01-04 11:00:00', 'new')"
        )
    states = [db_state(db)]  # the snapshot's

    connect = DebeziumMariaDBConnect(
        tmp_path_factory.mktemp("connect"),
        kafka_broker.bootstrap,
        db,
        topic_prefix=prefix,
        tables=list(TABLES.values()),
    )
    ws.dataset("shop", SHOP_MARIADB)
    feed = {"name": "shop", "dataset": "shop", "topic_prefix": prefix, "tables": TABLES}
    cfg = ws.feed_config(kafka_broker, prefix, feed, trigger={"interval": "1 second"})
    workload = [
        [  # inserts in both tables, an update of several types
            "INSERT INTO customers VALUES (4, 'Dee', 7.25, 'basic', '2001-02-03', "
            "'2026-03-01 08:00:00.125', '2026-03-01 08:00:00', '{\"tags\": [\"a\"]}')",
            "INSERT INTO orders VALUES (12, 4, 99.99, '2026-03-01 09:00:00', 'new')",
            "UPDATE customers SET balance = balance - 12.34, tier = 'basic', "
            "seen = '2026-03-02 10:11:12' WHERE id = 1",
        ],
        [
            "DELETE FROM orders WHERE id = 11",
            "UPDATE customers SET name = 'Rob', profile = JSON_SET(profile, '$.vip', true) "
            "WHERE id = 2",
        ],
        ["DELETE FROM customers WHERE id = 3"],
        [  # deleted, then inserted again
            "INSERT INTO customers VALUES (3, 'Cyd', 3, 'gold', NULL, '2026-03-03 00:00:00', "
            "NULL, NULL)"
        ],
        [  # many rows of one table in one transaction (one binlog event), and the other table
            "UPDATE customers SET balance = balance + 1",
            "INSERT INTO orders SELECT seq, 1 + seq % 4, seq / 10.0, "
            "'2026-03-04 00:00:00' + INTERVAL seq SECOND, IF(seq % 2, 'new', 'paid') "
            "FROM seq_100_to_160",
        ],
        [
            "UPDATE orders SET amount = amount * 2, status = 'paid' WHERE id % 3 = 0",
            "DELETE FROM orders WHERE id = 12",
        ],
    ]
    with connect:  # stopped when the block ends, however it ends
        # The snapshot is in Kafka before the job starts: its first batch takes all of it.
        read_topic(kafka_broker.bootstrap, connect.topic(TABLES["shop.Customer"]), expect=3)
        read_topic(kafka_broker.bootstrap, connect.topic(TABLES["shop.Order"]), expect=2)
        with streaming_job(spark, cfg):
            warehouse = ws.root / "warehouse"
            wait_until(
                "the snapshot applied", lambda: consistent(warehouse) == states[0], timeout=240
            )
            for statements in workload:
                with db.transaction() as tx:
                    for statement in statements:
                        tx.execute(statement)
                states.append(db_state(db))
                time.sleep(2)  # spread the transactions over batches
            final = states[-1]
            wait_until(  # and every outcome recorded: the last batch is at its end
                "the tables read consistently equal to MariaDB's",
                lambda: (
                    consistent(warehouse) == final
                    and len(stored_outcomes(warehouse)) == 2 + len(workload)
                ),
                timeout=240,
            )
            if target := os.environ.get("WRITE_DEBEZIUM_EXAMPLES"):
                write_examples(kafka_broker.bootstrap, connect, Path(target))

    assert delta_state(warehouse) == db_state(db)
    # The columns have the types the dataset declares: DECIMAL's own size, DATE, TIMESTAMP.
    arrow = {
        schema: deltalake.DeltaTable(str(warehouse / "shop" / Path(*schema.split("."))))
        .to_pyarrow_table()
        .schema
        for schema in TABLES
    }
    assert str(arrow["shop.Customer"].field("balance").type) == "decimal128(12, 2)"
    assert str(arrow["shop.Order"].field("amount").type) == "decimal128(10, 2)"
    assert str(arrow["shop.Customer"].field("born").type) == "date32[day]"
    assert str(arrow["shop.Customer"].field("seen").type).startswith("timestamp[us")
    batches = versions_per_batch(warehouse)
    assert len(batches) >= 3  # the snapshot, then the workload in two batches or more
    for batch, versions in batches.items():
        seen = delta_state(warehouse, versions)
        matches = [i for i, state in enumerate(states) if state == seen]
        assert matches, f"batch {batch}: the tables at {versions} are no commit of MariaDB"
    recorded = stored_outcomes(warehouse)
    streamed = [o for o in recorded if "@" not in o["transactionId"]]  # not snapshot chunks
    assert len(streamed) == len(workload)
    assert {o["status"] for o in recorded} == {"COMMITTED"}
    assert len({o["transactionId"] for o in recorded}) == len(recorded)
    # MariaDB's GTIDs (domain 0, server 1) name the source transactions: one per transaction
    # of the workload, none left out.
    gtids = [o["transactionId"].removeprefix("debezium:shop:") for o in streamed]
    assert all(re.fullmatch(r"0-1-\d+", g) for g in gtids), gtids
    seqs = sorted(int(g.rsplit("-", 1)[1]) for g in gtids)
    assert seqs == list(range(seqs[0], seqs[0] + len(workload)))
    # Every row's position is a place in the binlog, none after its end; the rows the last
    # transaction changed are at its end, the snapshot's rows left alone before it.
    file, pos, _ = db.binlog_position()
    end = binlog_position({"file": file, "pos": pos, "row": 0})
    stored = lakestate.delta_state(warehouse, dict.fromkeys(TABLES, ("sourcePosition",)))
    positions = {schema: {k: v[0] for k, v in rows.items()} for schema, rows in stored.items()}
    for schema, by_id in positions.items():
        for row_id, position in by_id.items():
            assert POSITION.fullmatch(position) and position < end, (schema, row_id, position)
    orders = positions["shop.Order"]
    assert orders["10"] < orders["101"] < orders["102"]  # snapshot < workload 5 < workload 6


def write_examples(bootstrap: str, connect: DebeziumMariaDBConnect, path: Path) -> None:
    """Messages of the run, named, as tests/unit/fixtures/debezium_mariadb_examples.json holds
    them: topic, key and value as the JSON converter wrote them (with their schemas)."""
    topics = {
        "customers": connect.topic(TABLES["shop.Customer"]),
        "orders": connect.topic(TABLES["shop.Order"]),
        "transaction": connect.transaction_topic,
    }
    read = {
        name: [
            {
                "topic": topic,
                "key": None if r.key is None else json.loads(r.key),
                "value": None if r.value is None else json.loads(r.value),
            }
            for r in read_topic(bootstrap, topic)
        ]
        for name, topic in topics.items()
    }

    def find(name: str, op: str, row_id: int, nth: int = 0) -> dict[str, Any]:
        found = [
            m
            for m in read[name]
            if m["value"] is not None
            and m["value"]["payload"]["op"] == op
            and m["key"]["payload"]["id"] == row_id
        ]
        return found[nth]

    insert = find("customers", "c", 4)
    gtid = insert["value"]["payload"]["transaction"]["id"]
    tx = [m for m in read["transaction"] if m["value"]["payload"]["id"] == gtid]
    deleted = read["orders"].index(find("orders", "d", 11))
    examples = {
        "snapshot_customers": find("customers", "r", 1),
        "snapshot_orders": find("orders", "r", 10),
        "insert_customers": insert,
        "insert_orders": find("orders", "c", 12),
        "update_customers": find("customers", "u", 1),
        "delete_orders": read["orders"][deleted],
        "tombstone_orders": read["orders"][deleted + 1],
        "insert_orders_first_row": find("orders", "c", 100),
        "insert_orders_later_row": find("orders", "c", 101),
        "transaction_begin": tx[0],
        "transaction_end": tx[1],
    }
    path.write_text(json.dumps(examples, indent=2) + "\n")
