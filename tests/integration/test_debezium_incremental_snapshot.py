"""Incremental snapshots (issue 57): a table whose existing rows reach the job only through
Debezium's incremental snapshot (``execute-snapshot`` through the signal table), taken while
other sessions insert, update and delete its rows — some in transactions left open across the
snapshot's chunks — and then snapshotted again (a re-snapshot of a table already captured).

Real PostgreSQL 15 and MariaDB 10.11 with Debezium's connectors in Kafka Connect, the job
running with a 1-second trigger. Proven: the Delta tables equal the database at the end (read by
delta-rs); every outcome is COMMITTED or DUPLICATE; no streamed change is counted stale (before
issue 57 PostgreSQL's reads, which carry no ``lsn``, sorted after every later change of their
key, and an update made in a transaction open across a chunk's read sorted before that read:
the table kept older values and deleted rows came back; and a batch applied its reads before
its transactions, so changes the reads already held were counted stale).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.support import Workspace, lakestate, stored_outcomes, streaming_job
from tests.support.cdc import wait_until
from tests.support.kafka_broker import LocalKafkaBroker
from tests.support.kafka_connect import (
    DebeziumConnect,
    DebeziumMariaDBConnect,
    DebeziumPostgresConnect,
    wait_for_slot,
)
from tests.support.lakestate import State
from tests.support.mariadb import MariaDBServer
from tests.support.postgres import PostgresCluster
from tests.support.sources import KINDS, running

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
COLUMNS = {"shop.Account": ("balance",), "shop.Entry": ("amount", "note", "rev")}
ENTRIES = 600
CHUNK = 40


def delta_state(warehouse: Path) -> State:
    return lakestate.delta_state(warehouse, COLUMNS)


class Database:
    """What the scenario needs of a source database: its tables, its connector, its rows, and
    a session that writes transactions (statements as text: ints, decimals and plain words)."""

    name = ""

    def setup(self) -> None:
        raise NotImplementedError

    def connector(self, workdir: Path, bootstrap: str, prefix: str) -> DebeziumConnect:
        """Its connector, not started."""
        raise NotImplementedError

    def ready(self, connect: DebeziumConnect) -> None:
        """Wait, once ``connect`` started, for what its first records need (nothing here)."""

    def state(self) -> State:
        raise NotImplementedError

    def execute(self, statement: str) -> None:
        raise NotImplementedError

    def session(self) -> contextlib.AbstractContextManager[Callable[[list[str], float], None]]:
        """A connection of its own: ``run(statements, hold)`` runs them as one transaction,
        held open ``hold`` seconds before its commit."""
        raise NotImplementedError

    def table(self, name: str) -> str:
        raise NotImplementedError

    def signal(self, signal: str) -> None:
        data = json.dumps({"data-collections": [self.table("ledger")], "type": "incremental"})
        self.execute(f"INSERT INTO dbz_signal VALUES ('{signal}', 'execute-snapshot', '{data}')")

    def create_tables(self, rows: str) -> None:
        self.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance numeric(12,2))")
        self.execute(
            "CREATE TABLE ledger (id int PRIMARY KEY, amount numeric(12,2), note text, rev int)"
        )
        self.execute(
            "CREATE TABLE dbz_signal (id varchar(64) PRIMARY KEY, type varchar(32), data text)"
        )
        self.execute("INSERT INTO accounts VALUES (1, 100), (2, 200), (3, 300)")
        self.execute(f"INSERT INTO ledger SELECT {rows}")

    def properties(self) -> dict[str, str]:
        # The ledger is captured but not in the initial snapshot: its rows come only through
        # the incremental snapshot, as for a table added to a running connector.
        return {
            "signal.data.collection": self.table("dbz_signal"),
            "incremental.snapshot.chunk.size": str(CHUNK),
            "snapshot.include.collection.list": self.table("accounts"),
            "decimal.handling.mode": "precise",  # the default a new user gets
        }

    def state_of(self, read: Callable[[str], list[dict[str, Any]]]) -> State:
        return {
            schema: {str(r["id"]): tuple(r[c] for c in COLUMNS[schema]) for r in read(table)}
            for schema, table in (("shop.Account", "accounts"), ("shop.Entry", "ledger"))
        }


class Postgres(Database):
    name = "postgresql"

    def __init__(self, pg: PostgresCluster) -> None:
        self.pg = pg

    def table(self, name: str) -> str:
        return f"public.{name}"

    def setup(self) -> None:
        self.create_tables(f"g, g * 1.25, 'opening', 0 FROM generate_series(1, {ENTRIES}) g")
        for table in ("accounts", "ledger"):
            self.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")

    def execute(self, statement: str) -> None:
        self.pg.execute(statement)

    def state(self) -> State:
        return self.state_of(self.pg.read_table)

    def connector(self, workdir: Path, bootstrap: str, prefix: str) -> DebeziumConnect:
        tables = [self.table(t) for t in ("accounts", "ledger", "dbz_signal")]
        connect = DebeziumPostgresConnect(
            workdir,
            bootstrap,
            self.pg,
            topic_prefix=prefix,
            tables=tables,
            properties=self.properties(),
        )
        return connect

    def ready(self, connect: DebeziumConnect) -> None:
        assert isinstance(connect, DebeziumPostgresConnect)
        wait_for_slot(self.pg, connect.slot_name)

    @contextlib.contextmanager
    def session(self) -> Iterator[Callable[[list[str], float], None]]:
        with self.pg.connect() as conn:

            def run(statements: list[str], hold: float) -> None:
                with conn.transaction(), conn.cursor() as cur:
                    for statement in statements:
                        cur.execute(statement.encode())
                    time.sleep(hold)

            yield run


class MariaDB(Database):
    name = "mariadb"

    def __init__(self, db: MariaDBServer) -> None:
        self.db = db

    def table(self, name: str) -> str:
        return f"{self.db.database}.{name}"

    def setup(self) -> None:
        self.create_tables(f"seq, seq * 1.25, 'opening', 0 FROM seq_1_to_{ENTRIES}")

    def execute(self, statement: str) -> None:
        self.db.execute(statement)

    def state(self) -> State:
        return self.state_of(self.db.read_table)

    def connector(self, workdir: Path, bootstrap: str, prefix: str) -> DebeziumConnect:
        tables = [self.table(t) for t in ("accounts", "ledger", "dbz_signal")]
        connect = DebeziumMariaDBConnect(
            workdir,
            bootstrap,
            self.db,
            topic_prefix=prefix,
            tables=tables,
            properties=self.properties(),
        )
        return connect

    @contextlib.contextmanager
    def session(self) -> Iterator[Callable[[list[str], float], None]]:
        """One ``mariadb`` client kept open (the test's other helpers start one per call):
        statements go to its standard input as they are run, so a transaction stays open."""
        client = subprocess.Popen(
            [
                "mariadb",
                "--no-defaults",
                f"--socket={self.db.socket}",
                "--user=root",
                f"--database={self.db.database}",
            ],
            stdin=subprocess.PIPE,
            text=True,
        )
        assert client.stdin is not None
        stdin = client.stdin

        def run(statements: list[str], hold: float) -> None:
            stdin.write("START TRANSACTION;\n" + "".join(f"{s};\n" for s in statements))
            stdin.flush()
            time.sleep(hold)
            stdin.write("COMMIT;\n")
            stdin.flush()

        try:
            yield run
        finally:
            stdin.close()
            assert client.wait(timeout=60) == 0, "the mariadb client failed"


class Sessions:
    """Other sessions writing while a snapshot runs: transactions of one to three statements on
    the ledger (and an account), some held open a moment, so they span a chunk's read."""

    def __init__(self, db: Database, seed: int, ids: Iterator[int]) -> None:
        self.db = db
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

    def _statement(self) -> str:
        r = self.random
        kind = r.choice(["update", "update", "update", "delete", "insert", "account"])
        entry = r.randint(1, ENTRIES)
        if kind == "update":
            amount = Decimal(r.randint(1, 9999)) / 100
            return (
                f"UPDATE ledger SET amount = amount - {amount}, "
                f"note = 'session {self.transactions}', rev = rev + 1 WHERE id = {entry}"
            )
        if kind == "delete":
            return f"DELETE FROM ledger WHERE id = {entry}"
        if kind == "insert":
            return f"INSERT INTO ledger VALUES ({next(self.ids)}, 1, 'new', 0)"
        return f"UPDATE accounts SET balance = balance + 1 WHERE id = {r.randint(1, 3)}"

    def _run(self) -> None:
        try:
            with self.db.session() as run:
                while not self.stop.is_set():
                    statements = [self._statement() for _ in range(self.random.randint(1, 3))]
                    held = self.random.random() < 0.3  # open across a chunk's read
                    run(statements, self.random.uniform(0.2, 0.8) if held else 0.0)
                    self.transactions += 1
                    time.sleep(self.random.uniform(0.0, 0.05))
        except BaseException as e:  # raised by __exit__, in the test
            self.error = e


@pytest.fixture(scope="module", params=KINDS)
def database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Database]:
    with running(request.param, tmp_path_factory) as server:
        if isinstance(server, PostgresCluster):
            yield Postgres(server)
        else:
            yield MariaDB(server)


def test_incremental_snapshots_under_concurrent_writes_equal_the_database(
    spark: SparkSession,
    ws: Workspace,
    kafka_broker: LocalKafkaBroker,
    database: Database,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    db = database
    prefix = f"inc{uuid.uuid4().hex[:6]}"
    db.setup()
    connect = db.connector(tmp_path_factory.mktemp("connect"), kafka_broker.bootstrap, prefix)
    tables = {"shop.Account": db.table("accounts"), "shop.Entry": db.table("ledger")}
    ws.dataset("shop", DATASET)
    feed = {"name": "shop", "dataset": "shop", "topic_prefix": prefix, "tables": tables}
    cfg = ws.feed_config(kafka_broker, prefix, feed, trigger={"interval": "1 second"})
    warehouse = ws.root / "warehouse"
    with connect:  # stopped when the block ends, however it ends
        db.ready(connect)
        with streaming_job(spark, cfg):
            ids = itertools.count(ENTRIES + 1)
            for round_, seed in enumerate((1, 2)):  # the snapshot, then a re-snapshot
                with Sessions(db, seed, ids) as sessions:
                    time.sleep(0.5)
                    db.signal(f"snapshot-{round_}")
                    wait_until(
                        f"snapshot {round_}: the ledger's rows read",
                        lambda: len(delta_state(warehouse)["shop.Entry"]) >= ENTRIES // 2,
                        timeout=240,
                    )
                    time.sleep(3)  # writes go on past the snapshot's last chunks
                assert sessions.transactions > 20
            final = db.state()
            wait_until(
                "the Delta tables equal the database's",
                lambda: delta_state(warehouse) == final,
                timeout=240,
            )

    assert delta_state(warehouse) == db.state()
    recorded = stored_outcomes(warehouse)
    assert recorded
    assert {o["status"] for o in recorded} <= {"COMMITTED", "DUPLICATE"}, [
        o for o in recorded if o["status"] not in ("COMMITTED", "DUPLICATE")
    ]
    streamed = [o for o in recorded if "@" not in o["transactionId"]]
    reads = [o for o in recorded if "@" in o["transactionId"]]
    assert streamed and reads
    stale = [(o["transactionId"], a) for o in streamed for a in o["actions"] if a.get("stale")]
    assert not stale, stale[:5]
