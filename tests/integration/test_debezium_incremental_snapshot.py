"""Incremental snapshots (issue 57): a table whose existing rows reach the job only through
Debezium's incremental snapshot (``execute-snapshot`` through the signal table), taken while
other sessions insert, update and delete its rows — some in transactions left open across the
snapshot's chunks — and then snapshotted again (a re-snapshot of a table already captured).

Real PostgreSQL 15, Debezium's PostgreSQL connector in Kafka Connect, the job running with a
1-second trigger. Proven: the Delta tables equal PostgreSQL at the end (read by delta-rs); every
outcome is COMMITTED or DUPLICATE; no streamed change is counted stale (before issue 57 the
reads, which carry no ``lsn``, sorted after every later change of their key, and an update made
in a transaction open across a chunk's read sorted before that read: the table kept older
values and deleted rows came back).
"""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.runtime.job import Job
from tests.support import Workspace
from tests.support.cdc import wait_until
from tests.support.kafka_broker import LocalKafkaBroker
from tests.support.kafka_connect import DebeziumPostgresConnect, wait_for_slot
from tests.support.postgres import PostgresCluster

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

DATASET = """\
shop.Account:
  properties:
    balance: {type: decimal, precision: 12, scale: 2}
    sourcePosition: {type: string}
  watermark: [sourcePosition]
shop.Entry:
  properties:
    amount: {type: decimal, precision: 12, scale: 2}
    note: {type: string}
    rev: {type: integer}
    sourcePosition: {type: string}
  watermark: [sourcePosition]
"""
TABLES = {"shop.Account": "public.accounts", "shop.Entry": "public.ledger"}
COLUMNS = {"shop.Account": ("balance",), "shop.Entry": ("amount", "note", "rev")}
ENTRIES = 600
CHUNK = 40

State = dict[str, dict[str, tuple[Any, ...]]]


def pg_state(pg: PostgresCluster) -> State:
    return {
        schema: {
            str(r["id"]): tuple(r[c] for c in COLUMNS[schema])
            for r in pg.read_table(table.split(".")[1])
        }
        for schema, table in TABLES.items()
    }


def delta_state(warehouse: Path) -> State:
    state: State = {}
    for schema in TABLES:
        path = warehouse / "shop" / Path(*schema.split("."))
        rows = (
            deltalake.DeltaTable(str(path)).to_pyarrow_table().to_pylist() if path.exists() else []
        )
        state[schema] = {r["id"]: tuple(r[c] for c in COLUMNS[schema]) for r in rows}
    return state


def outcomes(warehouse: Path) -> list[dict[str, Any]]:
    path = warehouse / "_system" / "outcomes"
    if not path.exists():
        return []
    table = deltalake.DeltaTable(str(path))
    return [json.loads(r["outcome"]) for r in table.to_pyarrow_table().to_pylist()]


class Sessions:
    """Other sessions writing while a snapshot runs: transactions of one to three statements on
    the ledger (and an account), some held open a moment, so they span a chunk's read."""

    def __init__(self, pg: PostgresCluster, seed: int, ids: Iterator[int]) -> None:
        self.pg = pg
        self.random = random.Random(seed)
        self.ids = ids
        """Ids of new rows, shared by the rounds."""
        self.stop = threading.Event()
        self.transactions = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sessions:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)
        if self.error is not None:
            raise self.error

    def _statement(self) -> tuple[str, tuple[Any, ...]]:
        r = self.random
        kind = r.choice(["update", "update", "update", "delete", "insert", "account"])
        entry = r.randint(1, ENTRIES)
        if kind == "update":
            return (
                "UPDATE ledger SET amount = amount - %s, note = %s, rev = rev + 1 WHERE id = %s",
                (Decimal(r.randint(1, 9999)) / 100, f"session #{self.transactions}", entry),
            )
        if kind == "delete":
            return "DELETE FROM ledger WHERE id = %s", (entry,)
        if kind == "insert":
            return "INSERT INTO ledger VALUES (%s, %s, 'new', 0)", (next(self.ids), Decimal(1))
        return "UPDATE accounts SET balance = balance + 1 WHERE id = %s", (r.randint(1, 3),)

    def _run(self) -> None:
        try:
            with self.pg.connect() as conn:
                while not self.stop.is_set():
                    with conn.transaction(), conn.cursor() as cur:
                        for _ in range(self.random.randint(1, 3)):
                            cur.execute(*self._statement())
                        if self.random.random() < 0.3:  # open across a chunk's read
                            time.sleep(self.random.uniform(0.2, 0.8))
                    self.transactions += 1
                    time.sleep(self.random.uniform(0.0, 0.05))
        except BaseException as e:  # raised by __exit__, in the test
            self.error = e


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresCluster]:
    with PostgresCluster(tmp_path_factory.mktemp("postgres")) as pg:
        yield pg


def _snapshot(pg: PostgresCluster, signal: str) -> None:
    data = json.dumps({"data-collections": ["public.ledger"], "type": "incremental"})
    pg.execute("INSERT INTO dbz_signal VALUES (%s, 'execute-snapshot', %s)", (signal, data))


def test_incremental_snapshots_under_concurrent_writes_equal_postgres(
    spark: SparkSession,
    ws: Workspace,
    kafka_broker: LocalKafkaBroker,
    postgres: PostgresCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    pg = postgres
    prefix = f"inc{uuid.uuid4().hex[:6]}"
    pg.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance numeric(12,2))")
    pg.execute("CREATE TABLE ledger (id int PRIMARY KEY, amount numeric(12,2), note text, rev int)")
    pg.execute("CREATE TABLE dbz_signal (id varchar(64) PRIMARY KEY, type varchar(32), data text)")
    for table in ("accounts", "ledger"):
        pg.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
    pg.execute("INSERT INTO accounts VALUES (1, 100), (2, 200), (3, 300)")
    pg.execute(
        "INSERT INTO ledger SELECT g, g * 1.25, 'opening', 0 FROM generate_series(1, %s) g",
        (ENTRIES,),
    )
    # The ledger is captured but not in the initial snapshot: its rows come only through the
    # incremental snapshot, as for a table added to a running connector.
    connect = DebeziumPostgresConnect(
        tmp_path_factory.mktemp("connect"),
        kafka_broker.bootstrap,
        pg,
        topic_prefix=prefix,
        tables=[*TABLES.values(), "public.dbz_signal"],
        properties={
            "signal.data.collection": "public.dbz_signal",
            "incremental.snapshot.chunk.size": str(CHUNK),
            "snapshot.include.collection.list": "public.accounts",
            "decimal.handling.mode": "precise",  # the default a new user gets
        },
    )
    connect.start()
    ws.dataset("shop", DATASET)
    kafka_broker.create_topics([f"{prefix}.requests", f"{prefix}.outcomes"])
    cfg = ws.config(
        landing={},
        trigger={"interval": "1 second"},
        kafka={
            "bootstrap": kafka_broker.bootstrap,
            "transactions_topic": f"{prefix}.requests",
            "outcomes_topic": f"{prefix}.outcomes",
            "change_feeds": [
                {"name": "shop", "dataset": "shop", "topic_prefix": prefix, "tables": TABLES}
            ],
        },
    )
    warehouse = ws.root / "warehouse"
    job: Job | None = None
    query = None
    try:
        wait_for_slot(pg, connect.slot_name)
        job = Job.create(spark, cfg)
        query = job.start(once=False)
        ids = itertools.count(ENTRIES + 1)
        for round_, seed in enumerate((1, 2)):  # the snapshot, then a re-snapshot
            with Sessions(pg, seed, ids) as sessions:
                time.sleep(0.5)
                _snapshot(pg, f"snapshot-{round_}")
                wait_until(
                    f"snapshot {round_}: the ledger's rows read",
                    lambda: len(delta_state(warehouse)["shop.Entry"]) >= ENTRIES // 2,
                    timeout=240,
                )
                time.sleep(3)  # writes go on past the snapshot's last chunks
            assert sessions.transactions > 20
        final = pg_state(pg)
        wait_until(
            "the Delta tables equal PostgreSQL's",
            lambda: delta_state(warehouse) == final,
            timeout=240,
        )
    finally:
        try:
            if job is not None and query is not None:
                job.stop(query)
        finally:
            connect.stop()

    assert delta_state(warehouse) == pg_state(pg)
    recorded = outcomes(warehouse)
    assert recorded
    assert {o["status"] for o in recorded} <= {"COMMITTED", "DUPLICATE"}, [
        o for o in recorded if o["status"] not in ("COMMITTED", "DUPLICATE")
    ]
    streamed = [o for o in recorded if "@" not in o["transactionId"]]
    reads = [o for o in recorded if "@" in o["transactionId"]]
    assert streamed and reads
    stale = [(o["transactionId"], a) for o in streamed for a in o["actions"] if a.get("stale")]
    assert not stale, stale[:5]
