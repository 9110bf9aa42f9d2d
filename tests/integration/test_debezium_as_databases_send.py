"""Issue 47: change events as a real database sends them, PostgreSQL 15 → Debezium's Postgres
connector in Kafka Connect → the test broker → the job (running, a 1-second trigger) → Delta.

- **Unchanged TOAST values.** ``docs`` keeps PostgreSQL's default replica identity and holds
  bodies and tag arrays large enough to be stored out of line; an UPDATE of another column makes
  Debezium send ``__debezium_unavailable_value`` for them. The lake keeps the stored values
  (never the placeholder), counts them in the outcome (``unavailable``), and takes a new value
  when one comes.
- **A truncate** (``skipped.operations=none``: the connector sends it) in a transaction with
  rows before and after it: every row of the table deleted in that transaction — history rows
  for each — and the rows after it applied; the outcome's action ``TRUNCATE`` counts them.
- **A part of an applied transaction sent again** (what a connector restarted from an offset
  stored in the middle of a transaction sends: the tail of its events and its END, here copied
  from the topics as Debezium wrote them): DUPLICATE at once, no REJECTED outcome, and no
  later transaction held behind it.

Proven each time: the Delta tables equal PostgreSQL's, read by delta-rs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.core.changefeed import Received, is_unavailable
from tests.support import Workspace, streaming_job
from tests.support.cdc import wait_until
from tests.support.debezium import send
from tests.support.kafka import read_topic
from tests.support.kafka_broker import LocalKafkaBroker
from tests.support.kafka_connect import DebeziumPostgresConnect, wait_for_slot
from tests.support.postgres import PostgresCluster

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

DOCS = """\
docs.Doc:
  properties:
    title: {type: string}
    body: {type: string}
    tags: {type: array, items: {type: string}}
    blob: {type: binary}
    sourcePosition: {type: string}
  watermark: [sourcePosition]
docs.Note:
  properties:
    text: {type: string}
    sourcePosition: {type: string}
  watermark: [sourcePosition]
"""
TABLES = {"docs.Doc": "public.docs", "docs.Note": "public.notes"}
PLACEHOLDER = "__debezium_unavailable_value"
LARGE = "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 700))"
"""~22 KB of text that does not compress: stored out of line (TOAST)."""
LARGE_TAGS = "(SELECT array_agg(md5(random()::text)) FROM generate_series(1, 300))"
LARGE_BYTES = (
    "(SELECT decode(string_agg(md5(random()::text), ''), 'hex') FROM generate_series(1, 700))"
)
KINDS = (("body", "string"), ("tags", "array"), ("blob", "bytes"))
"""The columns stored out of line, each of its own kind (their Connect types)."""


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresCluster]:
    with PostgresCluster(tmp_path_factory.mktemp("postgres")) as pg:
        yield pg


def pg_docs(pg: PostgresCluster) -> dict[str, tuple[Any, ...]]:
    return {str(r["id"]): doc(r) for r in pg.read_table("docs")}


def doc(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["title"], row["body"], list(row["tags"] or []), bytes(row["blob"] or b""))


def pg_notes(pg: PostgresCluster) -> dict[str, str]:
    return {str(r["id"]): r["text"] for r in pg.read_table("notes")}


def table(warehouse: Path, *parts: str) -> list[dict[str, Any]]:
    path = warehouse.joinpath(*parts)
    if not path.exists():
        return []
    return deltalake.DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def lake_docs(warehouse: Path) -> dict[str, tuple[Any, ...]]:
    return {r["id"]: doc(r) for r in table(warehouse, "docs", "docs", "Doc")}


def lake_notes(warehouse: Path) -> dict[str, str]:
    return {r["id"]: r["text"] for r in table(warehouse, "docs", "docs", "Note")}


def outcomes(warehouse: Path) -> list[dict[str, Any]]:
    return [json.loads(r["outcome"]) for r in table(warehouse, "_system", "outcomes")]


def streamed(warehouse: Path) -> list[dict[str, Any]]:
    """The outcomes of source transactions (not the snapshot's chunks), in batch order."""
    found = [o for o in outcomes(warehouse) if "@" not in o["transactionId"]]
    return sorted(found, key=lambda o: o["batchId"])


def test_toast_placeholders_truncates_and_a_resent_part_as_postgres_and_debezium_send_them(
    spark: SparkSession,
    ws: Workspace,
    kafka_broker: LocalKafkaBroker,
    postgres: PostgresCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    pg = postgres
    prefix = f"pg{uuid.uuid4().hex[:6]}"
    pg.execute(
        "CREATE TABLE docs (id int PRIMARY KEY, title text, body text, tags text[], blob bytea)"
    )
    pg.execute("CREATE TABLE notes (id int PRIMARY KEY, text text)")
    pg.execute("ALTER TABLE notes REPLICA IDENTITY FULL")
    with pg.transaction() as cur:
        for i in range(1, 7):
            cur.execute(
                f"INSERT INTO docs VALUES ({i}, 'v1', {LARGE}, {LARGE_TAGS}, {LARGE_BYTES})"
            )
        cur.execute("INSERT INTO notes VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    # Out of line: the TOAST table holds the values (else the test proves nothing).
    (toast,) = pg.execute(
        "SELECT reltoastrelid::regclass::text FROM pg_class WHERE relname = 'docs'"
    )
    assert pg.execute(f"SELECT count(DISTINCT chunk_id) FROM {toast[0]}")[0][0] >= 6
    connect = DebeziumPostgresConnect(
        tmp_path_factory.mktemp("connect"),
        kafka_broker.bootstrap,
        pg,
        topic_prefix=prefix,
        tables=list(TABLES.values()),
        properties={"skipped.operations": "none"},  # truncates are sent
    )
    ws.dataset("docs", DOCS)
    feed = {"name": "docs", "dataset": "docs", "topic_prefix": prefix, "tables": TABLES}
    cfg = ws.feed_config(kafka_broker, prefix, feed, trigger={"interval": "1 second"})
    warehouse = ws.root / "warehouse"
    with connect:  # stopped when the block ends, however it ends
        wait_for_slot(pg, connect.slot_name)
        read_topic(kafka_broker.bootstrap, connect.topic("public.docs"), expect=6)
        with streaming_job(spark, cfg):
            wait_until(
                "the snapshot applied", lambda: lake_docs(warehouse) == pg_docs(pg), timeout=240
            )

            # 1. Another column updated: body and tags not sent (the placeholder instead).
            pg.execute("UPDATE docs SET title = 'v2'")
            # 2. A new body for one row: its tags still not sent.
            pg.execute("UPDATE docs SET title = 'v3', body = 'short now' WHERE id = 1")
            # 3. Rows before a truncate, the truncate, rows after it; and another table's change.
            with pg.transaction() as cur:
                cur.execute("INSERT INTO notes VALUES (4, 'd')")
                cur.execute("TRUNCATE notes")
                cur.execute("INSERT INTO notes VALUES (5, 'e'), (1, 'a again')")
                cur.execute("UPDATE docs SET title = 'v4' WHERE id = 2")
            wait_until(
                "the three transactions applied",
                lambda: (
                    len(streamed(warehouse)) == 3
                    and lake_docs(warehouse) == pg_docs(pg)
                    and lake_notes(warehouse) == pg_notes(pg)
                ),
                timeout=240,
            )

            # The connector's events really carried the placeholder (else the test proves nothing).
            docs_topic = read_topic(kafka_broker.bootstrap, connect.topic("public.docs"))
            values = [json.loads(r.value) for r in docs_topic if r.value is not None]
            updates = [v["payload"] for v in values if v["payload"]["op"] == "u"]
            sent = [
                sum(is_unavailable(u["after"][c], PLACEHOLDER, {"type": kind}) for c, kind in KINDS)
                for u in updates
            ]
            assert sum(sent[:6]) >= 12  # the first update: at least each row's body and blob

            # 4. The tail of transaction 1 and its END sent again (a connector restarted from an
            # offset stored in the middle of it), then a new transaction.
            first_tx = updates[0]["transaction"]["id"].split(":")[0]
            tail = [
                r
                for r, v in zip([r for r in docs_topic if r.value is not None], values, strict=True)
                if (v["payload"].get("transaction") or {}).get("id", "").split(":")[0] == first_tx
            ][-2:]
            assert len(tail) == 2
            ends = read_topic(kafka_broker.bootstrap, connect.transaction_topic)
            end = next(
                r
                for r in ends
                if json.loads(r.value)["payload"]["status"] == "END"
                and json.loads(r.value)["payload"]["id"].split(":")[0] == first_tx
            )
            now = datetime.now(UTC)
            again = [
                Received(connect.topic("public.docs"), 0, 0, r.key, r.value, now, now) for r in tail
            ] + [Received(connect.transaction_topic, 0, 0, end.key, end.value, now, now)]
            send(kafka_broker.bootstrap, again)
            pg.execute("UPDATE docs SET title = 'v5' WHERE id = 3")
            wait_until(
                "the part sent again found DUPLICATE and the next transaction applied",
                lambda: len(streamed(warehouse)) == 5 and lake_docs(warehouse) == pg_docs(pg),
                timeout=90,  # far under max_wait (10 minutes): nothing was held
            )

    assert lake_docs(warehouse) == pg_docs(pg)
    assert lake_notes(warehouse) == pg_notes(pg) == {"5": "e", "1": "a again"}
    assert not any(
        PLACEHOLDER in json.dumps(r, default=str)
        for parts in (("docs", "docs", "Doc"), ("docs", "_history", "docs", "Doc"))
        for r in table(warehouse, *parts)
    )
    found = streamed(warehouse)
    assert {o["status"] for o in outcomes(warehouse)} <= {"COMMITTED", "DUPLICATE"}
    toast_1, toast_2, truncating = found[:3]
    assert [o["status"] for o in found[:3]] == ["COMMITTED"] * 3
    (duplicate,) = [o for o in found if o["status"] == "DUPLICATE"]
    assert duplicate["transactionId"] == toast_1["transactionId"]
    assert [a["unavailable"] for a in toast_1["actions"]] == [sum(sent[:6])]
    assert [a["unavailable"] for a in toast_2["actions"]] == [sent[6]]
    notes = [
        (a["operation"], a["inserted"], a["deleted"])
        for a in truncating["actions"]
        if a["target"] == "docs.Note"
    ]
    assert notes == [("UPSERT", 1, 0), ("TRUNCATE", 0, 4), ("UPSERT", 2, 0)]
    history = table(warehouse, "docs", "_history", "docs", "Note")
    deleted = sorted(r["id"] for r in history if r["__op"] == "d")
    assert deleted == ["1", "2", "3", "4"]
