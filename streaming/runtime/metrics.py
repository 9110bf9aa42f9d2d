"""Prometheus metrics of the running job (``metrics.enabled``; docs/operations.md).

``Metrics`` holds the metric objects in a registry of its own (not prometheus_client's global
one: a process may run several jobs, the tests do) and is fed by the job: the sink after each
micro-batch (``batch``: its outcomes, the Spark jobs and Delta commits it cost, its duration;
``waiting``: the change feeds' records that wait; ``snapshots``: whose initial snapshot is
applied), the job's topic watch (``topic``: a topic it reads missing), the progress listener
after each of Spark's progress events (``progress``: the Kafka lag), and a callable for the
landing folders' backlog, asked at each scrape. ``serve`` exposes the registry over HTTP
(``/metrics``) until ``Exporter.close``.

Counters count what this process did: they start at 0 when the job starts, as Prometheus
expects of counters (``rate()`` takes the restarts).
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from streaming.core.changefeed import Feed
from streaming.core.codes import Code
from streaming.core.errors import CdcError, ConfigError
from streaming.core.outcomes import Outcome, Status

__all__ = ["BATCH_SECONDS_BUCKETS", "ROW_ACTIONS", "Backlog", "Exporter", "Metrics", "serve"]

log = logging.getLogger(__name__)

BATCH_SECONDS_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, float("inf"))
"""A micro-batch takes seconds (a few Spark jobs and Delta commits each), large ones minutes."""

ROW_ACTIONS = ("inserted", "updated", "deleted", "unchanged", "skipped", "stale")
"""What a transaction's action did to its rows: the counts of an outcome's ``actions``."""

Backlog = Callable[[], Mapping[str, int]]
"""Landing folder (``transactions``, ``dms``) → files not yet taken into a micro-batch."""


class Metrics:
    """The metrics of one job (the module's docstring), in ``registry``."""

    def __init__(
        self, backlog: Backlog | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.registry = CollectorRegistry()
        self._clock = clock
        self._last_batch = clock()
        registry = self.registry
        self.batch_seconds = Histogram(
            "cdc_batch_duration_seconds",
            "Duration of a micro-batch in the sink, from reading its input to its last outcome",
            buckets=BATCH_SECONDS_BUCKETS,
            registry=registry,
        )
        self.transactions = Counter(
            "cdc_transactions",
            "Transactions (one outcome each) by status",
            ["status"],
            registry=registry,
        )
        for status in Status:  # every status present from the start: rate() sees the first
            self.transactions.labels(status=status.value)
        self.rows = Counter(
            "cdc_rows",
            "Rows of committed transactions by what was done to them (action) and table",
            ["dataset", "table", "action"],
            registry=registry,
        )
        self.spark_jobs = Counter(
            "cdc_spark_jobs", "Spark jobs started while micro-batches ran", registry=registry
        )
        self.delta_commits = Counter(
            "cdc_delta_commits", "Delta commits micro-batches made", registry=registry
        )
        self.kafka_lag = Gauge(
            "cdc_kafka_lag_records",
            "Records on the broker the last micro-batch did not reach, per topic",
            ["topic"],
            registry=registry,
        )
        self.waiting_events = Gauge(
            "cdc_change_feed_waiting_events",
            "Records of a change feed's source transactions not applied yet (_system/pending)",
            ["feed"],
            registry=registry,
        )
        self.oldest_waiting = Gauge(
            "cdc_change_feed_oldest_waiting_timestamp_seconds",
            "When the oldest waiting record of a change feed arrived (Unix time); 0: none waits",
            ["feed"],
            registry=registry,
        )
        self.snapshot_complete = Gauge(
            "cdc_change_feed_snapshot_complete",
            "1 once a batch applied the last record of a Debezium change feed's initial snapshot "
            "(from then on the tables read consistently equal the database as of one of its "
            "commits); 0 before",
            ["feed"],
            registry=registry,
        )
        self.topic_missing = Gauge(
            "cdc_kafka_topic_missing",
            "1 while a topic the job reads (requests, change feeds) does not exist and the job "
            "waits for it; 0 once it does",
            ["topic"],
            registry=registry,
        )
        self.upkeep_runs = Counter(
            "cdc_upkeep_runs",
            "Upkeep tasks the job ran between micro-batches, by action (compact, order, vacuum, "
            "retention) and result (done, failed)",
            ["action", "result"],
            registry=registry,
        )
        self.upkeep_seconds = Counter(
            "cdc_upkeep_seconds",
            "Seconds upkeep tasks took, by action",
            ["action"],
            registry=registry,
        )
        self.table_files = Gauge(
            "cdc_table_files",
            "Live data files of a table the job writes, as of its last write by the job",
            ["table"],
            registry=registry,
        )
        self.last_batch = Gauge(
            "cdc_last_batch_timestamp_seconds",
            "When the last micro-batch finished (Unix time); the job's start before the first",
            registry=registry,
        )
        self.last_batch.set(self._last_batch)
        since = Gauge(
            "cdc_seconds_since_last_batch",
            "Seconds since the last micro-batch finished (since the job started, before the first)",
            registry=registry,
        )
        since.set_function(lambda: max(0.0, self._clock() - self._last_batch))
        if backlog is not None:
            registry.register(_BacklogCollector(backlog))

    def batch(
        self,
        outcomes: Sequence[Outcome],
        *,
        spark_jobs: int,
        delta_commits: int,
    ) -> None:
        """What a micro-batch did: its outcomes by status, the rows its committed transactions
        changed (a DUPLICATE's counts are its original's: not counted again), its cost."""
        for outcome in outcomes:
            self.transactions.labels(status=outcome.status.value).inc()
            if outcome.status is not Status.COMMITTED:
                continue
            for action in outcome.actions:
                for name in ROW_ACTIONS:
                    count = getattr(action, name)
                    if count:
                        labels = {"dataset": outcome.dataset or "", "table": action.target}
                        self.rows.labels(**labels, action=name).inc(count)
        self.spark_jobs.inc(spark_jobs)
        self.delta_commits.inc(delta_commits)

    def batch_finished(self, seconds: float) -> None:
        """A micro-batch ran to its end (its commits made) in ``seconds``."""
        self.batch_seconds.observe(seconds)
        self._last_batch = self._clock()
        self.last_batch.set(self._last_batch)

    def waiting(self, waiting: Mapping[str, tuple[int, float | None]]) -> None:
        """After a batch: per change feed, the records that wait and the oldest one's arrival
        (Unix)."""
        for feed, (count, oldest) in waiting.items():
            self.waiting_events.labels(feed=feed).set(count)
            self.oldest_waiting.labels(feed=feed).set(oldest or 0)

    def snapshots(self, feeds: Sequence[Feed], applied: Collection[str]) -> None:
        """Per Debezium change feed: whether its initial snapshot is applied (its name in
        ``applied``)."""
        for feed in feeds:
            if feed.format == "debezium":
                self.snapshot_complete.labels(feed=feed.name).set(1 if feed.name in applied else 0)

    def topic(self, name: str, missing: bool) -> None:
        """Whether a topic the job reads is missing (``connectors.kafka_topics.TopicWatch``)."""
        self.topic_missing.labels(topic=name).set(1 if missing else 0)

    def upkeep(self, runs: Sequence[tuple[str, str, float]], files: Mapping[str, int]) -> None:
        """After a batch's upkeep: its tasks as (action, result, seconds), and the live files of
        each table it looked at."""
        for action, result, seconds in runs:
            self.upkeep_runs.labels(action=action, result=result).inc()
            self.upkeep_seconds.labels(action=action).inc(seconds)
        for table, count in files.items():
            self.table_files.labels(table=table).set(count)

    def progress(self, entry: Mapping[str, Any]) -> None:
        """One of Spark's progress events (``observe.progress_entry``): the lag per topic."""
        for topic, lag in (entry.get("lag") or {}).items():
            self.kafka_lag.labels(topic=topic).set(lag)


class _BacklogCollector(Collector):
    """``cdc_landing_unread_files``, asked of ``backlog`` at each scrape: files that arrive while
    no batch runs (a stalled job) count too. A failure leaves the metric out of that scrape."""

    def __init__(self, backlog: Backlog) -> None:
        self.backlog = backlog
        self._warned = False

    def describe(self) -> list[GaugeMetricFamily]:
        return [self._family()]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            counts = self.backlog()
        except Exception as e:  # a scrape must answer; say it once
            if not self._warned:
                log.warning("metrics: landing backlog unknown: %s", str(e).splitlines()[0])
                self._warned = True
            return
        family = self._family()
        for source, count in sorted(counts.items()):
            family.add_metric([source], count)
        yield family

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "cdc_landing_unread_files",
            "Files of a landing folder no micro-batch has taken yet",
            labels=["source"],
        )


@dataclass
class Exporter:
    """The HTTP server of ``serve`` and its thread."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        """Stop serving and free the port."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve(metrics: Metrics, host: str, port: int) -> Exporter:
    """Serve ``metrics`` at ``http://host:port/metrics`` from a daemon thread. A port in use
    stops the job at startup (METRICS_PORT_IN_USE), an address that cannot be bound too
    (CONFIG_ERROR)."""
    try:
        server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise CdcError(
                f"metrics.port {port} on {host} is in use (another job's metrics, or another "
                "server): set metrics.port (CDC_METRICS__PORT) to a free port, or stop what "
                "listens there",
                code=Code.METRICS_PORT_IN_USE,
            ) from e
        raise ConfigError(f"metrics.host {host!r}, metrics.port {port}: cannot bind: {e}") from e
    exporter = Exporter(server, thread)
    log.info("metrics at http://%s:%s/metrics", host, exporter.port)
    return exporter
