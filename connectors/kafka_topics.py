"""The Kafka topics of the job, and what happens when one does not exist (docs/interface.md).

*Read* topics are waited for: the requests topic (``kafka.transactions_topic``) and each change
feed's topics (a data topic per source table, and Debezium's transaction topic). Spark's Kafka
source subscribes them by a pattern of their exact names (``connectors.sources``), so a topic
that is not there yet matches nothing until it is created, and is then read from its first
message, whatever ``kafka.starting_offsets`` says (that applies to the topics there when a
checkpoint starts). A ``subscribe`` of a missing topic failed the query instead, once the
source's retries of its offsets ran out (about 60 s). At startup one line per missing topic
says what creates it; ``TopicWatch`` then says when it is there (one line) and keeps
``cdc_kafka_topic_missing`` up to date from topic lists the job gets anyway — the credential
recheck's metadata request and Spark's progress events —, never from a request of its own.

The *written* topic, the outcomes topic (``kafka.outcomes_topic``), is checked instead
(``require_topic``): the job's producer has the broker create it where the broker creates
topics on first use (``auto.create.topics.enable``, Kafka's default); where it does not, no
one but a person would ever create it, so the job stops at startup with ``KAFKA_TOPIC_MISSING``
naming the topic and the command — rather than failing its first batch after committing it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Producer

from streaming.core.changefeed import Feed
from streaming.core.codes import Code
from streaming.core.config import KafkaConfig
from streaming.core.errors import CdcError

__all__ = [
    "CREATE_WAIT",
    "KafkaTopicMissing",
    "ReadTopic",
    "Report",
    "TopicWatch",
    "create_command",
    "read_topics",
    "require_topic",
]

log = logging.getLogger(__name__)

CREATE_WAIT = 5.0
"""Seconds ``require_topic`` waits for a broker that creates topics on first use to have made
it (a local broker: well under a second)."""


_NOT_THERE_YET = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE})
"""A topic's metadata errors while it does not exist, or is being created."""


class KafkaTopicMissing(CdcError):
    """A topic only a person can create is not there (the broker does not create topics)."""

    code = Code.KAFKA_TOPIC_MISSING


def create_command(bootstrap: str, topic: str) -> str:
    """The command that creates ``topic`` (Kafka's own tool; partitions and replication as the
    broker's defaults)."""
    return f"kafka-topics.sh --bootstrap-server {bootstrap} --create --topic {topic}"


@dataclass(frozen=True)
class ReadTopic:
    """A topic the job reads, what it is, and what creates it."""

    name: str
    what: str
    created_by: str


def read_topics(cfg: KafkaConfig, feeds: Sequence[Feed]) -> list[ReadTopic]:
    """Every topic the job reads: the requests topic, then each feed's topics."""
    topics = [
        ReadTopic(
            cfg.transactions_topic,
            "the requests topic, kafka.transactions_topic",
            "`cdc publish` (its first request, where the broker creates topics on first use)",
        )
    ]
    for feed in feeds:
        for topic, table in sorted(feed.topics.items()):
            what = f"change feed {feed.name}" + (f", table {table}" if table else "")
            topics.append(ReadTopic(topic, what, "the connector (with the table's first event)"))
        if feed.transaction_topic is not None:
            topics.append(
                ReadTopic(
                    feed.transaction_topic,
                    f"change feed {feed.name}, transaction metadata",
                    "Debezium (provide.transaction.metadata=true, at its first transaction)",
                )
            )
    return topics


Report = Callable[[str, bool], None]
"""(topic, missing) → e.g. the job's ``cdc_kafka_topic_missing`` gauge."""


class TopicWatch:
    """Which of the job's read topics are missing: set from the topics the broker listed at
    startup (``start``), then from every later list (``seen``); each change is reported, and
    a topic that comes is said once."""

    def __init__(self, topics: Sequence[ReadTopic], bootstrap: str, report: Report | None) -> None:
        self.topics = {t.name: t for t in topics}
        self.bootstrap = bootstrap
        self._report = report
        self._lock = threading.Lock()
        self.missing: set[str] = set()

    def start(self, existing: Iterable[str] | None) -> None:
        """At startup, with the topics the broker has (None: it did not answer — then nothing
        is said, and nothing is counted missing)."""
        if existing is None:
            return
        there = set(existing)
        with self._lock:
            self.missing = {name for name in self.topics if name not in there}
        for name, topic in self.topics.items():
            if name in self.missing:
                log.warning(
                    "kafka: topic %s (%s) does not exist yet: the job waits for it and reads it "
                    "from its first message. It is created by %s, or with: %s",
                    name,
                    topic.what,
                    topic.created_by,
                    create_command(self.bootstrap, name),
                )
            if self._report is not None:
                self._report(name, name in self.missing)

    def seen(self, existing: Iterable[str]) -> None:
        """Topics known to exist now (a metadata list, the topics of a progress event)."""
        if not self.missing:
            return
        with self._lock:
            came = sorted(self.missing.intersection(existing))
            self.missing.difference_update(came)
        for name in came:
            log.info("kafka: topic %s (%s) exists now: reading it", name, self.topics[name].what)
            if self._report is not None:
                self._report(name, False)


def require_topic(cfg: KafkaConfig, topic: str, what: str, *, timeout: float = CREATE_WAIT) -> None:
    """``topic`` exists, or the broker creates it now (asked by a producer's metadata request,
    which librdkafka sends with auto-creation allowed), or ``KafkaTopicMissing``. A broker that
    does not answer, or another error (the client may not see the topic), is not this check's
    to report: the client that uses the topic reports it."""
    producer = Producer(cfg.client_options_for())
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = producer.list_topics(topic, timeout=min(timeout, 10.0)).topics.get(topic)
        except KafkaException:
            return
        error = None if found is None else found.error
        if found is not None and (error is None or error.code() not in _NOT_THERE_YET):
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    raise KafkaTopicMissing(
        f"topic {topic} ({what}) does not exist on {cfg.bootstrap}, and the broker does not "
        "create topics on first use (auto.create.topics.enable=false, or this client may not "
        f"create topics): create it with\n  {create_command(cfg.bootstrap, topic)}"
    )
