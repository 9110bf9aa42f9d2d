"""Reading a Kafka topic in a test: to the end offsets the broker reports, never "until nothing
came for a few seconds".

Reading until silence made every read wait the silence out, and missed a message a slow broker
delivered after it. Here the broker is asked for the high watermark of every partition (the
offset its next message will get); the topic is read from the beginning up to those offsets and
no further. With ``expect=N`` the read first waits (polling the watermarks, up to ``timeout``)
until at least N messages exist: a test that waits for an outcome names how many it waits for.

The counts are offsets: right for the topics the tests write (no compaction, no transactional
producer, so no control records between the messages).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from connectors.avro import codec_for
from connectors.kafka_io import decode_outcome
from streaming.core.config import KafkaConfig
from streaming.core.outcomes import Outcome

TIMEOUT = 60.0
"""The longest a read waits for its messages (or for the broker to answer)."""


@dataclass(frozen=True)
class Record:
    """One message of a topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def _consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            # assign() only: no group offsets are read or committed; a group of its own anyway.
            "group.id": f"tests-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )


LEADER_MOVING = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
"""What a topic a connector has just created answers until its partitions have a leader."""


def _watermarks(consumer: Consumer, topic: str, timeout: float) -> dict[int, tuple[int, int]]:
    """``{partition: (low, high)}``; empty when the topic does not exist (yet), or exists but
    its partitions have no leader yet (just created: the caller asks again)."""
    found = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if found is None or found.error is not None:
        return {}
    marks: dict[int, tuple[int, int]] = {}
    for partition in sorted(found.partitions):
        try:
            got = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout, cached=False
            )
        except KafkaException as e:
            if e.args and e.args[0].code() in LEADER_MOVING:
                return {}
            raise
        if got is None:
            raise KafkaException(f"no watermarks for {topic}[{partition}] within {timeout}s")
        marks[partition] = (int(got[0]), int(got[1]))
    return marks


def end_offsets(bootstrap: str, topic: str, *, timeout: float = TIMEOUT) -> dict[int, int]:
    """``{partition: high watermark}`` of an existing topic (0 for a partition never written)."""
    consumer = _consumer(bootstrap)
    try:
        marks = _watermarks(consumer, topic, timeout)
    finally:
        consumer.close()
    if not marks:
        raise AssertionError(f"topic {topic} does not exist on {bootstrap}")
    return {partition: high for partition, (_, high) in marks.items()}


def read_topic(
    bootstrap: str, topic: str, *, expect: int | None = None, timeout: float = TIMEOUT
) -> list[Record]:
    """Every message of ``topic`` up to the end offsets, in partition/offset order.

    Without ``expect`` the topic must exist and is read to the ends it has now. With
    ``expect=N`` the read waits until the topic exists and holds at least N messages, then reads
    to the ends of that moment (all of them: a test compares the list, so a message written
    twice shows). Fails (AssertionError) when ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    consumer = _consumer(bootstrap)
    try:
        while True:
            left = max(deadline - time.monotonic(), 1.0)
            marks = _watermarks(consumer, topic, min(left, 10.0))
            held = sum(high - low for low, high in marks.values())
            if expect is None and not marks:
                raise AssertionError(f"topic {topic} does not exist on {bootstrap}")
            if marks and (expect is None or held >= expect):
                return _read_to_ends(consumer, topic, marks, deadline)
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout:.0f}s waiting for {expect} message(s) on {topic} "
                    f"({held} there)"
                )
            time.sleep(0.1)
    finally:
        consumer.close()


def _read_to_ends(
    consumer: Consumer, topic: str, marks: dict[int, tuple[int, int]], deadline: float
) -> list[Record]:
    ends = {partition: high for partition, (low, high) in marks.items() if high > low}
    consumer.assign([TopicPartition(topic, p, marks[p][0]) for p in sorted(ends)])
    pending = dict(ends)
    records: list[Record] = []
    while pending:
        if time.monotonic() > deadline:
            short = {p: f"end {ends[p]}" for p in sorted(pending)}
            raise AssertionError(f"timed out reading {topic} to its end offsets: {short}")
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        partition, offset = msg.partition(), msg.offset()
        assert partition is not None and offset is not None
        error = msg.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                raise KafkaException(error)
            if partition in pending and offset >= pending[partition]:
                del pending[partition]
            continue
        if partition not in ends or offset >= ends[partition]:
            continue  # written after the ends were taken: not this read's
        records.append(Record(partition, offset, msg.key(), msg.value()))
        if offset + 1 >= ends[partition]:
            pending.pop(partition, None)
    return sorted(records, key=lambda r: (r.partition, r.offset))


def read_values(
    bootstrap: str, topic: str, *, expect: int | None = None, timeout: float = TIMEOUT
) -> list[bytes]:
    """The message values of ``read_topic`` (a message without a value fails)."""
    values: list[bytes] = []
    for record in read_topic(bootstrap, topic, expect=expect, timeout=timeout):
        assert record.value is not None, f"{topic}[{record.partition}]@{record.offset}: no value"
        values.append(record.value)
    return values


def outcome_events(
    cfg: KafkaConfig, *, expect: int | None = None, timeout: float = TIMEOUT
) -> list[Outcome]:
    """The outcome events on ``cfg``'s outcomes topic (read over ``cfg.bootstrap`` without the
    config's client options), decoded as ``cdc results`` decodes them (JSON, or Avro with
    ``format: avro``)."""
    codec = codec_for(cfg)
    values = read_values(cfg.bootstrap, cfg.outcomes_topic, expect=expect, timeout=timeout)
    return [decode_outcome(value, codec) for value in values]
