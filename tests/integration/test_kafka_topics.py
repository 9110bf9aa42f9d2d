"""Topics the job reads that do not exist yet (issue 47): the job waits for them instead of
failing. Spark's Kafka source asks for a subscribed topic's offsets ``fetchOffset.numRetries``
times, ``fetchOffset.retryIntervalMs`` apart (``connectors.sources``: 30 x 2 s); a topic the
broker does not know failed every attempt (UnknownTopicOrPartitionException), so ``cdc run``
on a fresh broker died about 60 s after it started. Here that window is lowered to 1 s and the
job runs well past it before the topics come; then what is sent to them is applied."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from connectors import sources
from connectors.kafka_io import produce
from streaming.cli.main import main
from streaming.core.config import KafkaConfig
from streaming.core.outcomes import Status
from streaming.runtime.job import Job
from tests.support import Workspace, request, upsert
from tests.support.cdc import wait_until
from tests.support.datasets import DOG, SHOP
from tests.support.debezium import Topics, send
from tests.support.kafka import outcome_events
from tests.support.kafka_broker import LocalKafkaBroker
from tests.support.ports import free_port

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

CUST, ORD = "public.customers", "public.orders"
PAST_THE_WINDOW = 8.0
"""Seconds the job runs with its topics missing: the lowered retry window (1 s) many times over,
several trigger intervals (1 s)."""


def test_topics_that_do_not_exist_yet_are_waited_for_then_read_from_their_first_message(
    spark: SparkSession,
    ws: Workspace,
    kafka_broker: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(sources, "FETCH_OFFSET_RETRIES", 2)
    monkeypatch.setattr(sources, "FETCH_OFFSET_RETRY_MS", 500)
    prefix = f"late{uuid.uuid4().hex[:8]}"
    ws.dataset("shop", SHOP)
    ws.dataset("petstore", DOG)
    ws.data("a/petstore/Dog/part.json", {"id": "dog1", "name": "Rex"})
    requests_topic = f"{prefix}.requests"
    cfg = ws.config(
        landing={},
        kafka={
            "bootstrap": kafka_broker.bootstrap,
            "transactions_topic": requests_topic,
            "outcomes_topic": f"{prefix}.outcomes",
            # A topic created after the start is read from its first message all the same.
            "starting_offsets": "latest",
            "change_feeds": [
                {
                    "name": "pg",
                    "dataset": "shop",
                    "topic_prefix": prefix,
                    "tables": {"shop.Customer": CUST, "shop.Order": ORD},
                }
            ],
        },
        trigger={"interval": "1 second"},
        metrics={"enabled": True, "host": "127.0.0.1", "port": free_port()},
    )
    assert cfg.kafka is not None
    kafka = cfg.kafka
    waited_for = [requests_topic, f"{prefix}.{CUST}", f"{prefix}.{ORD}", f"{prefix}.transaction"]
    caplog.set_level(logging.INFO)
    job = Job.create(spark, cfg)
    query = job.start(once=False)
    try:
        metrics = job.sink.metrics
        assert metrics is not None

        def missing(topic: str) -> float | None:
            return metrics.registry.get_sample_value("cdc_kafka_topic_missing", {"topic": topic})

        until = time.monotonic() + PAST_THE_WINDOW
        while time.monotonic() < until:
            assert query.exception() is None
            time.sleep(0.2)
        assert query.isActive
        for topic in waited_for:
            said = [r.getMessage() for r in caplog.records if f"topic {topic} " in r.getMessage()]
            assert len(said) == 1, said  # one line, at startup, naming the command
            assert "does not exist yet" in said[0] and "kafka-topics.sh" in said[0], said[0]
            assert missing(topic) == 1.0
        assert missing(kafka.outcomes_topic) is None  # written by the job, not waited for

        topics = Topics(prefix=prefix)
        topics.event(CUST, "r", {"id": 1, "name": "Ada", "balance": "1.00"}, snapshot="last")
        topics.transaction("700:1", [(ORD, "c", {"id": 10, "customer_id": 1, "amount": "2.00"})])
        send(kafka_broker.bootstrap, topics.take())
        produce(kafka, requests_topic, [("petstore", request("tx-1", upsert("./data/a")).encode())])

        got = {o.transaction_id: o for o in outcome_events(kafka, expect=3, timeout=180)}
        assert sorted(got) == sorted(
            [f"debezium:pg:{prefix}.{CUST}[0]@0-0", "debezium:pg:700:1", "tx-1"]
        )
        assert {o.status for o in got.values()} == {Status.COMMITTED}
        wait_until(
            "the topics counted as there",
            lambda: all(missing(t) == 0.0 for t in waited_for),
            timeout=60,
        )
        came = [r.getMessage() for r in caplog.records if "exists now" in r.getMessage()]
        assert sorted(m.split()[2] for m in came) == sorted(waited_for)  # one line each
        # The one snapshot record, marked last, ended the feed's snapshot.
        snapshot = {"feed": "pg"}
        wait_until(
            "the snapshot counted as applied",
            lambda: (
                metrics.registry.get_sample_value("cdc_change_feed_snapshot_complete", snapshot)
                == 1.0
            ),
            timeout=60,
        )
        (line,) = [r.getMessage() for r in caplog.records if "initial snapshot" in r.getMessage()]
        assert line.startswith("feed pg: initial snapshot applied in batch "), line
        assert line.endswith("(2 rows in tables shop.Customer 1, shop.Order 1)"), line
        assert query.exception() is None
    finally:
        job.stop(query)
        job.close()

    # Started again: the snapshot counts as applied before any batch (_system/pending keeps
    # it), and no topic is missing.
    caplog.clear()
    port = {"metrics": cfg.metrics.model_copy(update={"port": free_port()})}
    again = Job.create(spark, cfg.model_copy(update=port))
    try:
        assert again.sink.metrics is not None
        value = again.sink.metrics.registry.get_sample_value
        assert value("cdc_change_feed_snapshot_complete", {"feed": "pg"}) == 1.0
        assert [value("cdc_kafka_topic_missing", {"topic": t}) for t in waited_for] == [0.0] * 4
        assert not [r for r in caplog.records if "does not exist yet" in r.getMessage()]
    finally:
        again.close()


def test_an_outcomes_topic_the_broker_does_not_create_stops_the_job_at_startup(
    spark: SparkSession, ws: Workspace, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """On a broker that does not create topics on first use, the outcomes topic — written by
    the job alone, so no one else would create it — stops ``cdc run`` before it reads anything,
    with the command that creates it; ``cdc publish`` likewise for the requests topic. Once
    they are created, both run."""
    broker = LocalKafkaBroker(
        tmp_path / "broker", properties={"auto.create.topics.enable": "false"}
    )
    broker.start()
    try:
        ws.dataset("petstore", DOG)
        ws.data("a/petstore/Dog/part.json", {"id": "dog1", "name": "Rex"})
        config = ws.root / "cdc.json"
        config.write_text(
            ws.config(
                landing={},
                kafka={
                    "bootstrap": broker.bootstrap,
                    "transactions_topic": "t.requests",
                    "outcomes_topic": "t.outcomes",
                },
            ).model_dump_json()
        )
        requests = ws.root / "requests.jsonl"
        requests.write_text(request("tx-1", upsert("./data/a")) + "\n")

        def cdc(*args: str) -> tuple[int, str]:
            capfd.readouterr()
            code = main([*args, "--config", str(config)])
            return code, capfd.readouterr().err

        command = f"kafka-topics.sh --bootstrap-server {broker.bootstrap} --create --topic"
        code, said = cdc("run", "--once")
        errors = [line for line in said.splitlines() if line.startswith("cdc: error")]
        assert code == 2 and len(errors) == 1, said[-3000:]
        assert errors[0].startswith(
            "cdc: error [KAFKA_TOPIC_MISSING]: topic t.outcomes (the outcomes topic, "
            f"kafka.outcomes_topic) does not exist on {broker.bootstrap}, and the broker does not "
            "create topics on first use"
        ), errors
        assert f"\n  {command} t.outcomes\n" in said, said[-3000:]
        assert "Traceback" not in said
        assert not (ws.root / "checkpoints" / "cdc" / "offsets").exists()  # nothing read

        code, said = cdc("publish", str(requests))
        assert code == 2, said[-3000:]
        assert "cdc: error [KAFKA_TOPIC_MISSING]: topic t.requests (the requests topic" in said
        assert f"\n  {command} t.requests\n" in said, said[-3000:]

        broker.create_topics(["t.outcomes", "t.requests"])
        assert cdc("publish", str(requests))[0] == 0
        code, said = cdc("run", "--once")
        assert code == 0, said[-3000:]
        (outcome,) = outcome_events(
            KafkaConfig(bootstrap=broker.bootstrap, outcomes_topic="t.outcomes")
        )
        assert (outcome.transaction_id, outcome.status) == ("tx-1", Status.COMMITTED)
    finally:
        broker.stop()
