"""The broker stops and comes back while the job runs continuously: the query rides out the
outage (the Kafka source's offset fetches retry) and every transaction, sent before and after,
is applied once with its outcome on the topic."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import deltalake
import pytest
from pyspark.sql import SparkSession

from connectors.kafka_io import produce, read_outcomes
from streaming.core.outcomes import Status
from streaming.runtime.job import Job
from streaming.storage.tables import read_table
from tests.support import Workspace, request, upsert
from tests.support.kafka_broker import LocalKafkaBroker

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(1.0)


def test_broker_stop_and_start_mid_stream_loses_nothing(
    spark: SparkSession, ws: Workspace, tmp_path: Path
) -> None:
    broker = LocalKafkaBroker(tmp_path / "outage-broker")
    broker.start()
    try:
        ws.dataset("petstore", "petstore.Dog:\n  properties: {name: {type: string}}\n")
        ws.data("a/petstore/Dog/part.json", {"id": "dog1", "name": "Rex"})
        ws.data("b/petstore/Dog/part.json", {"id": "dog2", "name": "Fido"})
        cfg = ws.config(
            landing={},
            kafka={
                "bootstrap": broker.bootstrap,
                "transactions_topic": "outage.transactions",
                "outcomes_topic": "outage.outcomes",
            },
            trigger={"interval": "1 second"},
        )
        assert cfg.kafka is not None
        kafka = cfg.kafka
        broker.create_topics([kafka.transactions_topic, kafka.outcomes_topic])
        job = Job.create(spark, cfg)
        query = job.start(once=False)

        def committed(tid: str) -> Callable[[], bool]:
            outcomes = job.layout.outcomes
            return lambda: (
                read_table(spark, outcomes).where(f"transaction_id = '{tid}'").count() > 0
            )

        try:
            produce(
                kafka,
                kafka.transactions_topic,
                [("petstore", request("tx-1", upsert("./data/a")).encode())],
            )
            wait_for(committed("tx-1"), 180, "tx-1")
            broker.stop()
            time.sleep(10)  # the query keeps polling a broker that is gone
            broker.start()
            produce(
                kafka,
                kafka.transactions_topic,
                [("petstore", request("tx-2", upsert("./data/b")).encode())],
            )
            wait_for(committed("tx-2"), 300, "tx-2 after the outage")
            assert query.isActive and query.exception() is None
        finally:
            job.stop(query)

        dogs = deltalake.DeltaTable(job.layout.table("petstore", "petstore.Dog")).to_pyarrow_table()
        assert sorted(dogs.column("id").to_pylist()) == ["dog1", "dog2"]
        topic = {o.transaction_id: o.status for o in read_outcomes(kafka, idle_timeout=5)}
        assert topic == {"tx-1": Status.COMMITTED, "tx-2": Status.COMMITTED}
    finally:
        broker.stop()
