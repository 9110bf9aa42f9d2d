"""The sink's outcome publisher keeps one idempotent producer across batches (a producer per
batch paid its connection and producer-id handshake every batch), and drops it when a batch's
events are not all acknowledged, so the next batch starts with a new one."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaException

from connectors.kafka_io import OutcomePublisher, outcome_publisher
from streaming.core.config import KafkaConfig
from streaming.core.outcomes import Outcome, Status
from tests.support.kafka import outcome_events
from tests.support.ports import free_port

pytestmark = [pytest.mark.kafka]


def outcome(tid: str, batch: int) -> Outcome:
    return Outcome(transaction_id=tid, status=Status.COMMITTED, batch_id=batch, source="test")


def test_one_producer_publishes_batch_after_batch(kafka_broker: Any) -> None:
    cfg = KafkaConfig(
        bootstrap=kafka_broker.bootstrap,
        transactions_topic="publisher.transactions",
        outcomes_topic="publisher.outcomes",
    )
    kafka_broker.create_topics([cfg.outcomes_topic])
    publish = outcome_publisher(cfg)
    publish([outcome("tx-1", 0), outcome("tx-2", 0)])
    producer = publish._producer
    assert producer is not None
    publish([outcome("tx-3", 1)])
    assert publish._producer is producer
    events = [(o.transaction_id, o.batch_id) for o in outcome_events(cfg)]
    assert events == [("tx-1", 0), ("tx-2", 0), ("tx-3", 1)]
    publish.close()
    assert publish._producer is None


def test_a_batch_not_acknowledged_fails_and_drops_the_producer() -> None:
    cfg = KafkaConfig(
        bootstrap=f"127.0.0.1:{free_port()}",  # nothing listens there
        transactions_topic="nowhere.transactions",
        outcomes_topic="nowhere.outcomes",
    )
    publish = OutcomePublisher(cfg, None, timeout=1.0)
    with pytest.raises(KafkaException, match=r"not delivered to nowhere\.outcomes"):
        publish([outcome("tx-1", 0)])
    assert publish._producer is None
