"""Avro requests and outcomes through a real broker (``kafka.format: avro``).

Local schemas: ``cdc publish`` encodes a good UPSERT as Avro; two bad messages are produced as
raw bytes (an unknown schema id, a truncated body). One run of the job: the good one is
COMMITTED, the bad ones are REJECTED with their own codes and their raw bytes quarantined, and the
outcomes on the topic are Avro in the wire format. The good one sent again is DUPLICATE (the
ledger finds its id in the Avro payload).

A registry that requires basic auth (``tests/fake_registry.py`` on 127.0.0.1, through
confluent-kafka's client): ``cdc publish``, the job and ``cdc results`` work with the right
credentials; with wrong ones each fails clearly (a batch fails and is replayed, its request is
not rejected), and no secret reaches a log line or a message.
"""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from connectors.avro import RegistryError, codec_for
from connectors.kafka_io import produce
from streaming.cli.main import main
from streaming.core.config import AppConfig
from streaming.core.outcomes import Outcome, Status
from streaming.runtime.job import Job
from streaming.storage.tables import read_table
from tests import fake_registry
from tests.support import Workspace, request, upsert
from tests.support.datasets import DOG
from tests.support.kafka import outcome_events, read_values

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

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

    [good] = read_values(bootstrap, cfg.kafka.transactions_topic)
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

    on_topic = read_values(bootstrap, cfg.kafka.outcomes_topic)
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
    again = read_values(bootstrap, cfg.kafka.outcomes_topic)
    assert again[:3] == on_topic and len(again) == 4  # one event more, in Avro
    duplicate = codec.decode_outcome(again[3])
    assert (duplicate.transaction_id, duplicate.status) == ("tx-avro-1", Status.DUPLICATE)
    # `cdc results` decodes the same four events (confluent-kafka's reader, the Avro codec).
    capsys.readouterr()
    assert main(["results", "--config", str(config_file), "--json"]) == 0
    printed = [Outcome.from_json(line) for line in capsys.readouterr().out.splitlines()]
    assert [(o.transaction_id, o.status, o.source) for o in printed] == [
        (o.transaction_id, o.status, o.source) for o in [*outcomes, duplicate]
    ]


USER, SECRET = "cdc-job", "pa55-W0rd-registry"
WRONG_SECRET = f"not-{SECRET}"
USER_INFO_ENV = "CDC_KAFKA__AVRO__REGISTRY__BASIC_AUTH_USER_INFO"


def registry_config(ws: Workspace, bootstrap: str, url: str, user_info: str) -> AppConfig:
    return ws.config(
        landing={},
        kafka={
            "bootstrap": bootstrap,
            "transactions_topic": "registry.transactions",
            "outcomes_topic": "registry.outcomes",
            "format": "avro",
            "avro": {"registry": {"url": url, "basic.auth.user.info": user_info, "max.retries": 0}},
        },
    )


def write_config_without_secret(cfg: AppConfig, path: Path) -> None:
    """The config file as a user keeps it: the registry's credentials come from the
    environment (``CDC_KAFKA__AVRO__REGISTRY__BASIC_AUTH_USER_INFO``)."""
    data = cfg.model_dump(mode="json", by_alias=True)
    del data["kafka"]["avro"]["registry"]["basic.auth.user.info"]
    path.write_text(json.dumps(data))


def test_avro_through_a_registry_that_requires_basic_auth(
    spark: SparkSession,
    ws: Workspace,
    kafka_broker: Any,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)  # restored after the test; `cdc -v` logs at DEBUG too
    bootstrap: str = kafka_broker.bootstrap
    ws.dataset("petstore", DOG)
    ws.data("ingest1/petstore/Dog/part.json", {"id": "dog1", "name": "Scooby"})
    ws.data("ingest2/petstore/Dog/part.json", {"id": "dog2", "name": "Lassie"})
    requests_file = ws.root / "requests.jsonl"
    config_file = ws.root / "cdc.yaml"
    shown: list[str] = []  # everything printed (fd 1 and 2: Spark's JVM too) or raised

    def output() -> tuple[str, str]:
        """What was printed since the last call (kept, to be searched for the secrets)."""
        out, err = capfd.readouterr()
        shown.extend((out, err))
        return out, err

    with fake_registry.serve(fake_registry.Registry(user=USER, password=SECRET)) as registry:
        cfg = registry_config(ws, bootstrap, registry.url, f"{USER}:{SECRET}")
        wrong = registry_config(ws, bootstrap, registry.url, f"{USER}:{WRONG_SECRET}")
        assert cfg.kafka is not None
        kafka = cfg.kafka
        write_config_without_secret(cfg, config_file)
        assert SECRET not in config_file.read_text()

        # Right credentials: publish (registers the request schema), run, read the results.
        monkeypatch.setenv(USER_INFO_ENV, f"{USER}:{SECRET}")
        requests_file.write_text(request("tx-registry-1", upsert("./data/ingest1")) + "\n")
        assert main(["-v", "publish", str(requests_file), "--config", str(config_file)]) == 0
        request_id = registry.subjects["registry.transactions-value"][0]
        job = ws.run_once(spark, cfg)
        outcome_id = registry.subjects["registry.outcomes-value"][0]
        on_topic = read_values(bootstrap, kafka.outcomes_topic)
        assert [struct.unpack(">bI", v[:5]) for v in on_topic] == [(0, outcome_id)]
        output()
        assert main(["-v", "results", "--config", str(config_file), "--json"]) == 0
        printed = [Outcome.from_json(line) for line in output()[0].splitlines()]
        assert [(o.transaction_id, o.status) for o in printed] == [
            ("tx-registry-1", Status.COMMITTED)
        ]
        assert {status for *_, status in registry.calls} == {200}
        assert request_id != outcome_id

        # Wrong credentials: each command fails clearly; nothing is sent, nothing rejected.
        monkeypatch.setenv(USER_INFO_ENV, f"{USER}:{WRONG_SECRET}")
        requests_file.write_text(request("tx-registry-2", upsert("./data/ingest2")) + "\n")
        output()
        for command in (["publish", str(requests_file)], ["results", "--json"]):
            assert main(["-v", *command, "--config", str(config_file)]) == 2
            err = output()[1]
            assert "cdc: error [SCHEMA_REGISTRY_ERROR]" in err and "HTTP 401" in err, err
            assert "basic.auth.user.info" in err
        assert len(read_values(bootstrap, kafka.transactions_topic)) == 1  # nothing published
        with pytest.raises(RegistryError, match="HTTP 401") as refused:
            Job.create(spark, wrong)  # the outcome schema is resolved at startup
        shown.append(str(refused.value))

        # The credentials stop working after the job started: its batch fails and is replayed
        # (not rejected); with them back, the request is applied once.
        monkeypatch.setenv(USER_INFO_ENV, f"{USER}:{SECRET}")
        assert main(["-v", "publish", str(requests_file), "--config", str(config_file)]) == 0
        assert len(read_values(bootstrap, kafka.transactions_topic)) == 2
        stale_job = Job.create(spark, cfg)  # a new process: no schema cached but the outcome's
        registry.password = "rotated"
        with pytest.raises(Exception, match="HTTP 401") as failed:
            stale_job.run(once=True)
        shown.append(str(failed.value))
        outcomes = read_table(spark, job.layout.outcomes).select("transaction_id").collect()
        assert [r["transaction_id"] for r in outcomes] == ["tx-registry-1"]
        assert read_values(bootstrap, kafka.outcomes_topic) == on_topic  # no event either
        registry.password = SECRET
        ws.run_once(spark, cfg)
        once_each = [("tx-registry-1", "COMMITTED"), ("tx-registry-2", "COMMITTED")]
        table = read_table(spark, job.layout.outcomes).select("transaction_id", "status", "outcome")
        stored = table.collect()
        assert sorted((r[0], r[1]) for r in stored) == once_each
        events = outcome_events(kafka)
        assert sorted((o.transaction_id, o.status.value) for o in events) == once_each

    # No secret (the right one or the wrong one) anywhere: printed, raised, logged, or in an
    # outcome event (on the topic, raw, and in the outcomes table).
    output()
    topic = kafka.outcomes_topic
    everything = [
        *shown,
        caplog.text,
        *(raw.decode("utf-8", errors="replace") for raw in read_values(bootstrap, topic)),
        *(r["outcome"] for r in stored),
    ]
    assert any("SCHEMA_REGISTRY_ERROR" in text for text in shown)  # the capture works
    assert "HTTP 401" in caplog.text  # the failed batch was logged, and searched
    for secret in (SECRET, WRONG_SECRET):
        leaks = [text for text in everything if secret in text]
        assert not leaks, f"a secret in: {leaks[0][:2000]}"
