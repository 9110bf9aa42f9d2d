"""Avro requests and outcomes through a real broker (``kafka.format: avro``, local schemas).

``cdc publish`` encodes a good UPSERT as Avro; two bad messages are produced as raw bytes (an
unknown schema id, a truncated body). One run of the job: the good one is COMMITTED, the bad
ones are REJECTED with their own codes and their raw bytes quarantined, and the outcomes on the
topic are Avro in the wire format. The good one sent again is DUPLICATE (the ledger finds its
id in the Avro payload).
"""

from __future__ import annotations

import struct
from typing import Any

import deltalake
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from pyspark.sql import SparkSession

from connectors.avro import codec_for
from connectors.kafka_io import produce, read_outcomes
from streaming.cli import main
from streaming.config import AppConfig
from streaming.outcomes import Outcome, Status
from tests.support import Workspace, request, upsert

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

DOG = "petstore.Dog:\n  properties:\n    name:\n      type: string\n"
REQUEST_ID, OUTCOME_ID = 11, 12


def avro_config(ws: Workspace, bootstrap: str) -> AppConfig:
    return ws.config(
        landing={},
        kafka={
            "bootstrap": bootstrap,
            "transactions_topic": "avro.transactions",
            "outcomes_topic": "avro.outcomes",
            "format": "avro",
            "avro": {
                "schemas": {
                    REQUEST_ID: "builtin:transaction_request",
                    OUTCOME_ID: "builtin:outcome",
                },
                "request_schema_id": REQUEST_ID,
                "outcome_schema_id": OUTCOME_ID,
            },
        },
    )


def raw_values(bootstrap: str, topic: str) -> list[bytes]:
    """Every message value of the topic's partition 0, as bytes."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "avro-test-raw"})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        while (msg := consumer.poll(5)) is not None:
            value = msg.value()
            if msg.error() is None and value is not None:
                values.append(value)
        return values
    finally:
        consumer.close()


def test_avro_requests_and_outcomes_through_kafka(
    spark: SparkSession, ws: Workspace, kafka_broker: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap: str = kafka_broker.bootstrap
    ws.dataset("petstore", DOG)
    ws.data(
        "ingest1/petstore/Dog/part.json",
        {"id": "dog1", "name": "Scooby"},
        {"id": "dog2", "name": "Lassie"},
    )
    cfg = avro_config(ws, bootstrap)
    assert cfg.kafka is not None
    codec = codec_for(cfg.kafka)
    assert codec is not None
    config_file = ws.root / "cdc.yaml"
    config_file.write_text(cfg.model_dump_json())
    requests_file = ws.root / "requests.jsonl"
    requests_file.write_text(request("tx-avro-1", upsert("./data/ingest1")) + "\n")
    assert main(["publish", str(requests_file), "--config", str(config_file)]) == 0

    good = raw_values(bootstrap, cfg.kafka.transactions_topic)[0]
    assert struct.unpack(">bI", good[:5]) == (0, REQUEST_ID)
    unknown_id = struct.pack(">bI", 0, 404) + good[5:]
    truncated = good[: len(good) // 2]
    produce(cfg.kafka, cfg.kafka.transactions_topic, [("petstore", unknown_id)])
    produce(cfg.kafka, cfg.kafka.transactions_topic, [("petstore", truncated)])

    job = ws.run_once(spark, cfg)
    # The progress listener read the lag from Spark's Kafka offsets: nothing left behind.
    assert job.listener.entries[-1]["lag"] == {cfg.kafka.transactions_topic: 0}
    assert sum(e["inputRows"] for e in job.listener.entries) == 3

    dogs = job.layout.table("petstore", "petstore.Dog")
    rows = deltalake.DeltaTable(dogs).to_pyarrow_table(columns=["id", "version", "name"])
    assert sorted((r["id"], r["version"], r["name"]) for r in rows.to_pylist()) == [
        ("dog1", 1, "Scooby"),
        ("dog2", 1, "Lassie"),
    ]

    on_topic = raw_values(bootstrap, cfg.kafka.outcomes_topic)
    assert [struct.unpack(">bI", v[:5]) for v in on_topic] == [(0, OUTCOME_ID)] * 3
    outcomes = [codec.decode_outcome(v) for v in on_topic]
    topic = cfg.kafka.transactions_topic
    assert [(o.transaction_id, o.status, o.error.code if o.error else None) for o in outcomes] == [
        ("tx-avro-1", Status.COMMITTED, None),
        (None, Status.REJECTED, "UNKNOWN_SCHEMA_ID"),
        (None, Status.REJECTED, "INVALID_AVRO"),
    ]
    assert [o.source for o in outcomes] == [f"kafka:{topic}[0]@{n}" for n in range(3)]
    assert (outcomes[0].actions[0].inserted, outcomes[0].table_versions) == (
        2,
        {"petstore.Dog": 1},
    )
    assert [o.status for o in read_outcomes(cfg.kafka, idle_timeout=3)] == [
        o.status for o in outcomes
    ]

    quarantined = (
        spark.read.format("delta")
        .load(job.layout.quarantine)
        .orderBy("source")
        .select("error_code", "payload")
        .collect()
    )
    assert [(r["error_code"], bytes(r["payload"])) for r in quarantined] == [
        ("UNKNOWN_SCHEMA_ID", unknown_id),
        ("INVALID_AVRO", truncated),
    ]

    # The same request again, as Avro: the ledger finds its id, so it is DUPLICATE.
    assert main(["publish", str(requests_file), "--config", str(config_file)]) == 0
    version = deltalake.DeltaTable(dogs).version()
    ws.run_once(spark, cfg)
    assert deltalake.DeltaTable(dogs).version() == version
    capsys.readouterr()
    assert main(["results", "--config", str(config_file), "--json"]) == 0
    printed = [Outcome.from_json(line) for line in capsys.readouterr().out.splitlines()]
    assert [(o.transaction_id, o.status) for o in printed][-1] == ("tx-avro-1", Status.DUPLICATE)
    assert len(printed) == 4
