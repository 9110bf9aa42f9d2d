"""Capture Debezium's events of a column added in PostgreSQL, for the unit tests
(tests/unit/fixtures/debezium_postgres_column_added.json):

    python -m tests.support.capture_column_added \
        tests/unit/fixtures/debezium_postgres_column_added.json

A PostgreSQL 15 cluster, a Kafka broker and Kafka Connect with Debezium's Postgres connector
(the JSON converter with schemas, as tests/support/kafka_connect.py configures it): ``docs (id
int, title text)``, an insert, ``ALTER TABLE docs ADD COLUMN tag text``, an insert and an update
setting ``tag``. The messages are written as they came (key and value as JSON), named.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from tests.support.kafka import read_topic
from tests.support.kafka_broker import LocalKafkaBroker
from tests.support.kafka_connect import DebeziumPostgresConnect, wait_for_slot
from tests.support.postgres import PostgresCluster

NAMES = ["insert_before_alter", "insert_after_alter", "update_after_alter"]


def capture(out: Path) -> None:
    root = Path(tempfile.mkdtemp(prefix="capture-"))
    prefix = "cap"
    with PostgresCluster(root / "pg") as pg:
        broker = LocalKafkaBroker(root / "kafka")
        broker.start()
        try:
            pg.execute("CREATE TABLE docs (id int PRIMARY KEY, title text)")
            pg.execute("ALTER TABLE docs REPLICA IDENTITY FULL")
            connect = DebeziumPostgresConnect(
                root / "connect", broker.bootstrap, pg, topic_prefix=prefix, tables=["public.docs"]
            )
            connect.start()
            try:
                wait_for_slot(pg, connect.slot_name)
                pg.execute("INSERT INTO docs VALUES (1, 'one')")
                read_topic(broker.bootstrap, connect.topic("public.docs"), expect=1)
                pg.execute("ALTER TABLE docs ADD COLUMN tag text")
                pg.execute("INSERT INTO docs VALUES (2, 'two', 'red')")
                pg.execute("UPDATE docs SET tag = 'blue' WHERE id = 1")
                records = read_topic(broker.bootstrap, connect.topic("public.docs"), expect=3)
            finally:
                connect.stop()
        finally:
            broker.stop()
    examples: dict[str, object] = {"topic_prefix": prefix}
    for name, record in zip(NAMES, records, strict=True):
        examples[name] = {
            "topic": connect.topic("public.docs"),
            "key": json.loads(record.key or b"null"),
            "value": json.loads(record.value or b"null"),
        }
    out.write_text(json.dumps(examples, indent=2) + "\n")


if __name__ == "__main__":
    capture(Path(sys.argv[1]))
