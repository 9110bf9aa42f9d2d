"""A column added in the source database while the job runs (issue 47, item 2): PostgreSQL 15 →
Debezium's Postgres connector in Kafka Connect → the test broker → the job → Delta.

- ``schema_changes: evolve`` (the default): ``ALTER TABLE docs ADD COLUMN tag text`` while the
  job runs, then inserts and updates setting ``tag`` → the Delta table (read by delta-rs) has
  ``tag`` with those values, every transaction COMMITTED; the job started again on the same
  checkpoint starts (its definition and the table agree) and keeps writing ``tag``.
- ``schema_changes: fail``: the job stops with SOURCE_SCHEMA_CHANGED before applying the
  event, and again at the next start; the table keeps what came before.
- A column's type changed in the source so that its values no longer fit the property
  (``integer`` → ``double precision``): SOURCE_TYPE_CHANGED, whatever the policy.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.core.config import AppConfig
from streaming.core.errors import CdcError
from streaming.runtime.job import Job
from tests.support import Workspace, stored_outcomes
from tests.support.cdc import wait_until
from tests.support.kafka import read_topic
from tests.support.kafka_broker import LocalKafkaBroker
from tests.support.kafka_connect import DebeziumPostgresConnect, wait_for_slot
from tests.support.postgres import PostgresCluster

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

DOCS = """\
docs.Doc:
  properties:
    title: {type: string}
    sourcePosition: {type: string}
  watermark: [sourcePosition]
"""
TABLES = {"docs.Doc": "public.docs"}


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresCluster]:
    with PostgresCluster(tmp_path_factory.mktemp("postgres")) as pg:
        yield pg


def doc_path(warehouse: Path) -> Path:
    return warehouse / "docs" / "docs" / "Doc"


def delta_rows(warehouse: Path) -> dict[str, dict[str, Any]]:
    table = deltalake.DeltaTable(str(doc_path(warehouse)))
    return {r["id"]: r for r in table.to_pyarrow_table().to_pylist()}


def pg_tags(pg: PostgresCluster) -> dict[str, tuple[Any, Any]]:
    return {str(r["id"]): (r["title"], r.get("tag")) for r in pg.read_table("docs")}


def delta_tags(warehouse: Path) -> dict[str, tuple[Any, Any]]:
    return {k: (r["title"], r.get("tag")) for k, r in delta_rows(warehouse).items()}


def setup(
    pg: PostgresCluster,
    ws: Workspace,
    broker: LocalKafkaBroker,
    workdir: Path,
    policy: str | None,
    *,
    dataset: str = DOCS,
    rank: bool = False,
) -> tuple[DebeziumPostgresConnect, AppConfig]:
    """``docs (id, title)`` (and ``rank int``) with rows 1 and 2, a connector on it, the job's
    config; the snapshot in Kafka."""
    prefix = f"pg{uuid.uuid4().hex[:6]}"
    pg.execute("DROP TABLE IF EXISTS docs")
    pg.execute(f"CREATE TABLE docs (id int PRIMARY KEY, title text{', rank int' if rank else ''})")
    pg.execute("ALTER TABLE docs REPLICA IDENTITY FULL")
    pg.execute("INSERT INTO docs (id, title) VALUES (1, 'one'), (2, 'two')")
    connect = DebeziumPostgresConnect(
        workdir, broker.bootstrap, pg, topic_prefix=prefix, tables=list(TABLES.values())
    )
    connect.start()
    ws.dataset("docs", dataset)
    feed: dict[str, Any] = {"name": "docs", "dataset": "docs", "topic_prefix": prefix}
    feed["tables"] = TABLES
    if policy is not None:
        feed["schema_changes"] = policy
    cfg = ws.feed_config(broker, prefix, feed, trigger={"interval": "1 second"})
    wait_for_slot(pg, connect.slot_name)
    read_topic(broker.bootstrap, connect.topic("public.docs"), expect=2)  # the snapshot
    return connect, cfg


def test_a_column_added_in_postgres_arrives_with_its_values_and_a_restart_agrees(
    spark: SparkSession,
    ws: Workspace,
    kafka_broker: LocalKafkaBroker,
    postgres: PostgresCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    pg = postgres
    connect, cfg = setup(pg, ws, kafka_broker, tmp_path_factory.mktemp("connect"), None)
    warehouse = ws.root / "warehouse"
    job: Job | None = None
    query = None
    try:
        job = Job.create(spark, cfg)
        query = job.start(once=False)
        wait_until(
            "the snapshot applied", lambda: len(stored_outcomes(warehouse)) >= 1, timeout=240
        )
        assert "tag" not in next(iter(delta_rows(warehouse).values()))
        pg.execute("ALTER TABLE docs ADD COLUMN tag text, ADD COLUMN rank int")
        with pg.transaction() as cur:
            cur.execute("INSERT INTO docs VALUES (3, 'three', 'red', 7)")
            cur.execute("UPDATE docs SET tag = 'blue' WHERE id = 1")
        time.sleep(2)
        with pg.transaction() as cur:
            cur.execute("UPDATE docs SET tag = 'green', title = 'TWO' WHERE id = 2")
            cur.execute("INSERT INTO docs VALUES (4, 'four', NULL, NULL)")
        expected = pg_tags(pg)
        wait_until(
            "tag in Delta with Postgres's values, every outcome recorded",
            lambda: (
                "tag" in next(iter(delta_rows(warehouse).values()))
                and delta_tags(warehouse) == expected
                and len(stored_outcomes(warehouse)) == 3  # the snapshot's and two transactions'
            ),
            timeout=240,
        )
    finally:
        if job is not None and query is not None:
            job.stop(query)
            job.close()
    assert expected == {
        "1": ("one", "blue"),
        "2": ("TWO", "green"),
        "3": ("three", "red"),
        "4": ("four", None),
    }
    recorded = stored_outcomes(warehouse)
    assert {o["status"] for o in recorded} == {"COMMITTED"}
    assert len([o for o in recorded if "@" not in o["transactionId"]]) == 2
    ranks = {k: r["rank"] for k, r in delta_rows(warehouse).items()}
    assert ranks == {"1": None, "2": None, "3": 7, "4": None}
    fields = {
        f.name: f.type for f in deltalake.DeltaTable(str(doc_path(warehouse))).schema().fields
    }
    assert str(fields["rank"]) == str(deltalake.schema.PrimitiveType("long"))  # integer
    history = deltalake.DeltaTable(str(warehouse / "docs" / "_history" / "docs" / "Doc"))
    tags = {(r["id"], r["tag"]) for r in history.to_pyarrow_table().to_pylist()}
    assert ("3", "red") in tags and ("1", "blue") in tags
    evolved = deltalake.DeltaTable(str(warehouse / "_system" / "evolved_properties"))
    rows = evolved.to_pyarrow_table().to_pylist()
    assert [(r["schema"], r["property"], r["type"]) for r in rows] == [
        ("docs.Doc", "tag", "string"),
        ("docs.Doc", "rank", "integer"),
    ]
    # Started again on the same checkpoint: the definition (file + evolved) agrees with the
    # tables, and later changes of tag are applied.
    try:
        with pg.transaction() as cur:
            cur.execute("UPDATE docs SET tag = 'red2' WHERE id = 3")
            cur.execute("INSERT INTO docs VALUES (5, 'five', 'black', 9)")
        expected = pg_tags(pg)
        job = Job.create(spark, cfg)
        assert "tag" in job.datasets["docs"].schemas["docs.Doc"].properties
        query = job.start(once=False)
        wait_until(
            "the later changes",
            lambda: delta_tags(warehouse) == expected and len(stored_outcomes(warehouse)) == 4,
            timeout=240,
        )
    finally:
        try:
            job.stop(query)
            job.close()
        finally:
            connect.stop()  # even when stopping the job fails: no Connect JVM left behind
    assert {o["status"] for o in stored_outcomes(warehouse)} == {"COMMITTED"}
    assert len(evolved.to_pyarrow_table().to_pylist()) == 2  # nothing added twice
    assert delta_rows(warehouse)["5"]["rank"] == 9


def test_with_fail_the_job_stops_before_the_event_and_again_at_the_next_start(
    spark: SparkSession,
    ws: Workspace,
    kafka_broker: LocalKafkaBroker,
    postgres: PostgresCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    pg = postgres
    connect, cfg = setup(pg, ws, kafka_broker, tmp_path_factory.mktemp("connect"), "fail")
    warehouse = ws.root / "warehouse"
    try:
        job = Job.create(spark, cfg)
        job.run(once=True)  # the snapshot
        job.close()
        assert set(delta_tags(warehouse)) == {"1", "2"}
        pg.execute("ALTER TABLE docs ADD COLUMN tag text")
        pg.execute("INSERT INTO docs VALUES (3, 'three', 'red')")
        read_topic(kafka_broker.bootstrap, connect.topic("public.docs"), expect=3)
        for _ in range(2):  # and again at the next start
            job = Job.create(spark, cfg)
            with pytest.raises(CdcError) as stopped:
                job.run(once=True)
            job.close()
            assert stopped.value.code == "SOURCE_SCHEMA_CHANGED"
            message = stopped.value.message
            assert "'tag'" in message and "public.docs" in message and "docs.Doc" in message
            assert "'docs'" in message and "schema_changes" in message
            assert set(delta_tags(warehouse)) == {"1", "2"}  # nothing of it applied
            assert "tag" not in next(iter(delta_rows(warehouse).values()))
    finally:
        connect.stop()


def test_a_type_that_no_longer_fits_stops_the_job_whatever_the_policy(
    spark: SparkSession,
    ws: Workspace,
    kafka_broker: LocalKafkaBroker,
    postgres: PostgresCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    pg = postgres
    ranked = DOCS.replace(
        "title: {type: string}", "title: {type: string}\n    rank: {type: integer}"
    )
    workdir = tmp_path_factory.mktemp("connect")
    connect, cfg = setup(pg, ws, kafka_broker, workdir, None, dataset=ranked, rank=True)
    warehouse = ws.root / "warehouse"
    try:
        job = Job.create(spark, cfg)
        job.run(once=True)  # the snapshot
        job.close()
        assert set(delta_tags(warehouse)) == {"1", "2"}
        pg.execute("ALTER TABLE docs ALTER COLUMN rank TYPE double precision")
        pg.execute("UPDATE docs SET rank = 1.5 WHERE id = 1")
        read_topic(kafka_broker.bootstrap, connect.topic("public.docs"), expect=3)
        job = Job.create(spark, cfg)
        with pytest.raises(CdcError) as stopped:
            job.run(once=True)
        job.close()
        assert stopped.value.code == "SOURCE_TYPE_CHANGED"
        message = stopped.value.message
        assert "'rank'" in message and "public.docs" in message and "double" in message
        assert "integer" in message and "To fix" in message
        assert delta_rows(warehouse)["1"]["rank"] is None  # 1.5 was not cut to 1
    finally:
        connect.stop()
