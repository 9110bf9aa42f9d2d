"""Seed 000's first example through Kafka: publish → ``cdc run --once`` → outcome on the topic.

A real broker (KRaft, from the Maven jars), the real Spark Kafka source, confluent-kafka to
publish requests and read outcomes back.
"""

from __future__ import annotations

import deltalake
import pytest
from pyspark.sql import SparkSession

from connectors.kafka_io import produce
from streaming.cli.main import main
from streaming.core.config import AppConfig
from streaming.core.outcomes import Outcome, Status
from tests.support import Workspace, request, upsert
from tests.support.datasets import DOG
from tests.support.kafka import outcome_events

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def kafka_config(ws: Workspace, bootstrap: str, name: str) -> AppConfig:
    return ws.config(
        landing={},
        kafka={
            "bootstrap": bootstrap,
            "transactions_topic": f"{name}.transactions",
            "outcomes_topic": f"{name}.outcomes",
        },
    )


def test_seed_upsert_via_kafka_then_duplicate(
    spark: SparkSession, ws: Workspace, kafka_broker: object, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap: str = kafka_broker.bootstrap  # type: ignore[attr-defined]
    ws.dataset("petstore", DOG)
    ws.data("ingest0/petstore/Dog/part.json", {"id": "dog1", "name": "Scooby Doo"})
    ws.data(
        "ingest1/petstore/Dog/anyfile.json",
        {"id": "dog1", "name": "Scooby"},
        {"id": "dog2", "name": "Lassie"},
        {"id": "dog3", "name": "Clifford"},
    )
    cfg = kafka_config(ws, bootstrap, "seed")
    assert cfg.kafka is not None
    topic = cfg.kafka.transactions_topic
    config_file = ws.root / "cdc.yaml"
    config_file.write_text(cfg.model_dump_json())  # JSON is YAML: `cdc publish --config` reads it
    requests_file = ws.root / "requests.jsonl"
    requests_file.write_text(
        request("tx-0000", upsert("./data/ingest0"))
        + "\n"
        + request("tx-0001", upsert("./data/ingest1"))
        + "\n"
    )
    assert main(["publish", str(requests_file), "--config", str(config_file)]) == 0

    job = ws.run_once(spark, cfg)
    dogs = job.layout.table("petstore", "petstore.Dog")
    rows = (
        deltalake.DeltaTable(dogs).to_pyarrow_table(columns=["id", "version", "name"]).to_pylist()
    )
    assert sorted((r["id"], r["version"], r["name"]) for r in rows) == [
        ("dog1", 2, "Scooby"),
        ("dog2", 1, "Lassie"),
        ("dog3", 1, "Clifford"),
    ]
    # One event per transaction, in the order they were read (a second event for one fails).
    first = outcome_events(cfg.kafka)
    assert [(o.transaction_id, o.status) for o in first] == [
        ("tx-0000", Status.COMMITTED),
        ("tx-0001", Status.COMMITTED),
    ]
    assert [o.source for o in first] == [f"kafka:{topic}[0]@0", f"kafka:{topic}[0]@1"]
    assert (first[1].actions[0].inserted, first[1].actions[0].updated) == (2, 1)

    version = deltalake.DeltaTable(dogs).version()
    produce(cfg.kafka, topic, [("petstore", request("tx-0001", upsert("./data/ingest1")).encode())])
    ws.run_once(spark, cfg)
    assert deltalake.DeltaTable(dogs).version() == version
    assert [(o.transaction_id, o.status) for o in outcome_events(cfg.kafka)] == [
        ("tx-0000", Status.COMMITTED),
        ("tx-0001", Status.COMMITTED),
        ("tx-0001", Status.DUPLICATE),
    ]

    capsys.readouterr()
    assert (
        main(["results", "--config", str(config_file), "--transaction", "tx-0001", "--json"]) == 0
    )
    printed = [Outcome.from_json(line) for line in capsys.readouterr().out.splitlines()]
    assert [o.status for o in printed] == [Status.COMMITTED, Status.DUPLICATE]
