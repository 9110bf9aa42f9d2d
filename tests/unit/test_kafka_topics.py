"""connectors.kafka_topics without a broker: the topics the job reads, the pattern that
subscribes exactly them, and the watch that says (once) which are missing and when they come.
With a broker: tests/integration/test_kafka_topics.py."""

from __future__ import annotations

import logging
import re
from dataclasses import replace

import pytest

from connectors.kafka_check import exact_names
from connectors.kafka_topics import TopicWatch, create_command, read_topics
from streaming.core.config import KafkaConfig
from streaming.runtime.metrics import Metrics
from tests.support.debezium import feed


def test_the_job_reads_the_requests_topic_and_each_feeds_table_and_transaction_topics() -> None:
    cfg = KafkaConfig(bootstrap="b:9092", transactions_topic="req")
    topics = read_topics(cfg, [feed(prefix="db")])
    assert [t.name for t in topics] == [
        "req",
        "db.public.customers",
        "db.public.orders",
        "db.transaction",
    ]
    assert topics[1].what == "change feed pg, table public.customers"
    assert [t.name for t in read_topics(cfg, [feed(prefix="db", metadata=False)])][-1] == (
        "db.public.orders"
    )


def test_the_pattern_matches_exactly_the_topics_it_names() -> None:
    pattern = re.compile(exact_names(["cdc.transactions", "pg.public.a-b"]))
    for name in ("cdc.transactions", "pg.public.a-b"):
        assert pattern.fullmatch(name) and pattern.search(name)
    for name in ("cdcxtransactions", "cdc.transactions.old", "x.cdc.transactions", "pg.public.a"):
        assert not pattern.search(name), name


def test_a_missing_topic_is_said_once_at_startup_and_once_when_it_comes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    cfg = KafkaConfig(bootstrap="b:9092", transactions_topic="req")
    watch = TopicWatch(read_topics(cfg, [feed(prefix="db")]), cfg.bootstrap, metrics.topic)
    caplog.set_level(logging.INFO, logger="connectors.kafka_topics")

    def missing(topic: str) -> float | None:
        return metrics.registry.get_sample_value("cdc_kafka_topic_missing", {"topic": topic})

    watch.start({"db.public.customers", "other"})
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert lines[0] == (
        "kafka: topic req (the requests topic, kafka.transactions_topic) does not exist yet: the "
        "job waits for it and reads it from its first message. It is created by `cdc publish` "
        "(its first request, where the broker creates topics on first use), or with: "
        + create_command("b:9092", "req")
    )
    assert [missing(t) for t in ("req", "db.public.customers", "db.transaction")] == [1, 0, 1]

    caplog.clear()
    watch.seen({"db.transaction": 0, "unrelated": 3})  # a progress event's topics
    watch.seen({"db.transaction", "req"})  # a metadata list
    watch.seen({"req"})
    assert [r.getMessage() for r in caplog.records] == [
        "kafka: topic db.transaction (change feed pg, transaction metadata) exists now: reading it",
        "kafka: topic req (the requests topic, kafka.transactions_topic) exists now: reading it",
    ]
    assert missing("req") == missing("db.transaction") == 0
    assert missing("db.public.orders") == 1 and watch.missing == {"db.public.orders"}


def test_a_broker_that_did_not_answer_at_startup_counts_no_topic_missing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    cfg = KafkaConfig(bootstrap="b:9092")
    watch = TopicWatch(read_topics(cfg, []), cfg.bootstrap, metrics.topic)
    watch.start(None)
    assert watch.missing == set() and not caplog.records
    assert metrics.registry.get_sample_value("cdc_kafka_topic_missing", {"topic": "x"}) is None


def test_the_snapshot_gauge_is_set_per_feed() -> None:
    metrics = Metrics()
    shop, crm = replace(feed(), name="shop"), replace(feed(), name="crm")
    dms = replace(feed(), name="dms", format="dms")
    metrics.snapshots([shop, crm, dms], {"shop": 4, "dms": 1})
    value = metrics.registry.get_sample_value
    assert value("cdc_change_feed_snapshot_complete", {"feed": "shop"}) == 1
    assert value("cdc_change_feed_snapshot_complete", {"feed": "crm"}) == 0
    assert value("cdc_change_feed_snapshot_complete", {"feed": "dms"}) is None  # not marked
