"""The broker stops and comes back while the job runs continuously: the query rides out the
outage (its trigger waits on the gone broker for the topic's offsets) and every transaction, sent
before and after, is applied once with its outcome once in the outcomes table and on the topic."""

from __future__ import annotations

import time
from pathlib import Path

import deltalake
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from connectors.kafka_io import produce
from streaming.core.outcomes import Status
from streaming.runtime.job import Job
from tests.support import Workspace, request, upsert
from tests.support.cdc import wait_until
from tests.support.datasets import DOG
from tests.support.kafka import outcome_events
from tests.support.kafka_broker import LocalKafkaBroker

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

TRIGGER_SECONDS = 1.0


def stuck_on_offsets(query: StreamingQuery, seconds: float) -> bool:
    """Whether the query's trigger has been getting the source's offsets, without a moment's
    break, for ``seconds``. A trigger gets a reachable broker's offsets in milliseconds and then
    waits for the next one; one that is still at it after longer than the trigger interval is
    waiting on a broker that does not answer."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status = query.status
        if not (status["isTriggerActive"] and status["message"].startswith("Getting offsets")):
            return False
        time.sleep(0.1)
    return True


def test_broker_stop_and_start_mid_stream_loses_nothing(
    spark: SparkSession, ws: Workspace, tmp_path: Path
) -> None:
    broker = LocalKafkaBroker(tmp_path / "outage-broker")
    broker.start()
    try:
        ws.dataset("petstore", DOG)
        ws.data("a/petstore/Dog/part.json", {"id": "dog1", "name": "Rex"})
        ws.data("b/petstore/Dog/part.json", {"id": "dog2", "name": "Fido"})
        cfg = ws.config(
            landing={},
            kafka={
                "bootstrap": broker.bootstrap,
                "transactions_topic": "outage.transactions",
                "outcomes_topic": "outage.outcomes",
            },
            trigger={"interval": f"{TRIGGER_SECONDS:.0f} second"},
        )
        assert cfg.kafka is not None
        kafka = cfg.kafka
        broker.create_topics([kafka.transactions_topic, kafka.outcomes_topic])
        job = Job.create(spark, cfg)
        query = job.start(once=False)

        def published(count: int, timeout: float) -> list[str | None]:
            """The transactions of the outcome events, once there are ``count``: the sink
            publishes a batch's events last, after the tables, the ledger and the outcomes
            table — the batch is done."""
            return [o.transaction_id for o in outcome_events(kafka, expect=count, timeout=timeout)]

        try:
            produce(
                kafka,
                kafka.transactions_topic,
                [("petstore", request("tx-1", upsert("./data/a")).encode())],
            )
            assert published(1, timeout=180) == ["tx-1"]
            address = broker.bootstrap
            broker.stop()
            # The query keeps asking the gone broker for offsets (it does not fail, nor stop
            # asking): seen as a trigger stuck on it for longer than a trigger interval.
            wait_until(
                "the query's trigger waiting on the stopped broker",
                lambda: stuck_on_offsets(query, 1.5 * TRIGGER_SECONDS),
                timeout=60,
            )
            assert not broker.is_running()
            broker.start()
            assert broker.bootstrap == address  # back where the job looks for it
            produce(
                kafka,
                kafka.transactions_topic,
                [("petstore", request("tx-2", upsert("./data/b")).encode())],
            )
            assert published(2, timeout=300) == ["tx-1", "tx-2"]  # after the outage
            assert query.isActive and query.exception() is None
        finally:
            job.stop(query)

        dogs = deltalake.DeltaTable(job.layout.table("petstore", "petstore.Dog")).to_pyarrow_table()
        assert sorted(dogs.column("id").to_pylist()) == ["dog1", "dog2"]
        once_each = [("tx-1", Status.COMMITTED), ("tx-2", Status.COMMITTED)]
        table = deltalake.DeltaTable(job.layout.outcomes).to_pyarrow_table(
            columns=["transaction_id", "status"]
        )
        rows = sorted((r["transaction_id"], Status(r["status"])) for r in table.to_pylist())
        assert rows == once_each
        events = sorted((o.transaction_id, o.status) for o in outcome_events(kafka))
        assert events == once_each
    finally:
        broker.stop()
