"""Issue 35's pipeline end to end: PostgreSQL 15 → Debezium's Postgres connector in Kafka
Connect → the test broker → the job (running, a 1-second trigger) → Delta.

A snapshot of two tables, then a workload of multi-table transactions (inserts, updates, deletes,
a key deleted and inserted again, many rows in one transaction) while the job runs. Proven:

- at the end the Delta tables equal Postgres's, row for row (read by delta-rs);
- after every micro-batch, the tables read at the versions the ledger recorded for it (the
  consistent read) equal Postgres as of one commit of the workload — never half a source
  transaction, never a later one before an earlier one;
- one COMMITTED outcome per source transaction, named by it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.support import Workspace, lakestate, stored_outcomes, streaming_job
from tests.support.cdc import wait_until
from tests.support.datasets import SHOP
from tests.support.kafka import read_topic
from tests.support.kafka_broker import LocalKafkaBroker
from tests.support.kafka_connect import DebeziumPostgresConnect, wait_for_slot
from tests.support.lakestate import State, versions_per_batch
from tests.support.postgres import PostgresCluster

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

TABLES = {"shop.Customer": "public.customers", "shop.Order": "public.orders"}
COLUMNS = {"shop.Customer": ("name", "balance"), "shop.Order": ("customerId", "amount")}
PG_COLUMNS = {"shop.Customer": ("name", "balance"), "shop.Order": ("customer_id", "amount")}


def _value(_: str, value: Any) -> Any:
    """A number as a float on both sides (PostgreSQL's numeric, the Delta table's decimal)."""
    return float(value) if isinstance(value, Decimal | float) else value


def pg_state(pg: PostgresCluster) -> State:
    return lakestate.source_state(pg.read_table, TABLES, PG_COLUMNS, value=_value)


def delta_state(warehouse: Path, versions: dict[str, int] | None = None) -> State:
    return lakestate.delta_state(warehouse, COLUMNS, versions, value=_value)


def consistent(warehouse: Path) -> State | None:
    return lakestate.consistent(warehouse, COLUMNS, value=_value)


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresCluster]:
    with PostgresCluster(tmp_path_factory.mktemp("postgres")) as pg:
        yield pg


def test_postgres_to_delta_equal_after_every_batch_and_at_the_end(
    spark: SparkSession,
    ws: Workspace,
    kafka_broker: LocalKafkaBroker,
    postgres: PostgresCluster,
    tmp_path_factory: pytest.TempPathFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pg = postgres
    prefix = f"pg{uuid.uuid4().hex[:6]}"
    pg.execute("CREATE TABLE customers (id int PRIMARY KEY, name text, balance numeric(10,2))")
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric(10,2))")
    for table in ("customers", "orders"):
        pg.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")  # deletes carry their row
    with pg.transaction() as cur:
        cur.execute("INSERT INTO customers VALUES (1, 'Ada', 100), (2, 'Bob', 20.5), (3, 'Cy', 0)")
        cur.execute("INSERT INTO orders VALUES (10, 1, 12.34), (11, 2, 5)")
    states = [pg_state(pg)]  # the snapshot's

    connect = DebeziumPostgresConnect(
        tmp_path_factory.mktemp("connect"),
        kafka_broker.bootstrap,
        pg,
        topic_prefix=prefix,
        tables=list(TABLES.values()),
    )
    ws.dataset("shop", SHOP)
    feed = {"name": "shop", "dataset": "shop", "topic_prefix": prefix, "tables": TABLES}
    cfg = ws.feed_config(kafka_broker, prefix, feed, trigger={"interval": "1 second"})
    caplog.set_level(logging.INFO, logger="streaming.runtime.sink")
    with connect:  # stopped when the block ends, however it ends
        wait_for_slot(pg, connect.slot_name)
        # The snapshot is in Kafka before the job starts: its first batch takes all of it.
        read_topic(kafka_broker.bootstrap, connect.topic("public.customers"), expect=3)
        read_topic(kafka_broker.bootstrap, connect.topic("public.orders"), expect=2)
        with streaming_job(spark, cfg):
            warehouse = ws.root / "warehouse"
            wait_until(
                "the snapshot applied", lambda: consistent(warehouse) == states[0], timeout=240
            )

            # The batch that applied it said so, with the rows of each table (the snapshot's end,
            # Debezium's source.snapshot = last).
            def said_snapshot() -> list[str]:
                return [
                    r.getMessage() for r in caplog.records if "initial snapshot" in r.getMessage()
                ]

            wait_until("the snapshot's end said", lambda: bool(said_snapshot()), timeout=60)
            said = said_snapshot()
            assert len(said) == 1, said
            assert said[0].startswith("feed shop: initial snapshot applied in batch "), said
            assert said[0].endswith("(5 rows in tables shop.Customer 3, shop.Order 2)"), said
            workload = [
                [  # inserts in both tables, an update
                    "INSERT INTO customers VALUES (4, 'Dee', 7.25)",
                    "INSERT INTO orders VALUES (12, 4, 99.99)",
                    "UPDATE customers SET balance = balance - 12.34 WHERE id = 1",
                ],
                [
                    "DELETE FROM orders WHERE id = 11",
                    "UPDATE customers SET name = 'Rob' WHERE id = 2",
                ],
                ["DELETE FROM customers WHERE id = 3"],
                ["INSERT INTO customers VALUES (3, 'Cyd', 3)"],  # deleted, then inserted again
                [  # many rows of one table in one transaction, and the other table too
                    "UPDATE customers SET balance = balance + 1",
                    "INSERT INTO orders SELECT g, 1 + g % 4, g / 10.0 "
                    "FROM generate_series(100, 160) g",
                ],
                [
                    "UPDATE orders SET amount = amount * 2 WHERE id % 3 = 0",
                    "DELETE FROM orders WHERE id = 12",
                ],
            ]
            for statements in workload:
                with pg.transaction() as cur:
                    for statement in statements:
                        cur.execute(statement)
                states.append(pg_state(pg))
                time.sleep(2)  # spread the transactions over batches
            final = states[-1]
            wait_until(  # and every outcome recorded: the last batch is at its end
                "the tables read consistently equal to Postgres's",
                lambda: (
                    consistent(warehouse) == final
                    and len(stored_outcomes(warehouse)) == 2 + len(workload)
                ),
                timeout=240,
            )

    assert delta_state(warehouse) == pg_state(pg)
    batches = versions_per_batch(warehouse)
    assert len(batches) >= 3  # the snapshot, then the workload in two batches or more
    for batch, versions in batches.items():
        seen = delta_state(warehouse, versions)
        matches = [i for i, state in enumerate(states) if state == seen]
        assert matches, f"batch {batch}: the tables at {versions} are no commit of Postgres"
    recorded = stored_outcomes(warehouse)
    streamed = [o for o in recorded if "@" not in o["transactionId"]]  # not snapshot chunks
    assert len(streamed) == len(workload)
    assert {o["status"] for o in recorded} == {"COMMITTED"}
    assert len({o["transactionId"] for o in recorded}) == len(recorded)
    assert all(o["transactionId"].startswith("debezium:shop:") for o in recorded)
