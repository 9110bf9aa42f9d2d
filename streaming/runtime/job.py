"""Wiring of the streaming job: datasets, tables, sources, the sink, the query."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any, NoReturn

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from connectors.avro import AvroRequestDecoder, ChangeDecoder, codec_for
from connectors.kafka_check import CredentialWatch, check_kafka, refusal_in
from connectors.kafka_io import OutcomePublisher, outcome_publisher
from connectors.kafka_topics import TopicWatch, read_topics, require_topic
from connectors.sources import (
    RAW_COLUMNS,
    change_feed_records,
    dms_files,
    kafka_requests,
    landing_requests,
    unread_landing_files,
)
from streaming.apply.scd2 import backfill
from streaming.core.batch import decode_json_request
from streaming.core.catalog import Dataset, load_dataset
from streaming.core.changefeed import Feed, decode_json_value, feed_of
from streaming.core.codes import Code
from streaming.core.config import AppConfig
from streaming.core.errors import CdcError, ConfigError
from streaming.core.failures import query_failure
from streaming.core.layout import CURRENT_FILE_MIB, Layout
from streaming.core.sourceschema import with_evolved
from streaming.platform import hadoop
from streaming.platform.exceptions import java_text
from streaming.platform.spark import CALLBACK_LOGGER, kill_driver_jvm
from streaming.runtime.lease import Lease
from streaming.runtime.metrics import Exporter, Metrics, serve
from streaming.runtime.observe import ProgressListener
from streaming.runtime.parallel import Sessions
from streaming.runtime.sink import Sink
from streaming.runtime.stopping import (
    POLL_SECONDS,
    BatchGate,
    Ending,
    QuietStop,
    Shutdown,
    Stop,
    StopRequested,
)
from streaming.runtime.upkeep import Upkeep, retention_properties
from streaming.storage import evolved
from streaming.storage.commits import BatchCommit
from streaming.storage.evolution import apply_changes, plan_evolution
from streaming.storage.log import holds_no_rows, latest_version
from streaming.storage.maintain import current_tables
from streaming.storage.pending import applied_snapshots
from streaming.storage.schemas import (
    LEDGER_SCHEMA,
    OUTCOMES_SCHEMA,
    PENDING_SCHEMA,
    QUARANTINE_SCHEMA,
)
from streaming.storage.tables import add_missing_columns, ensure_table

__all__ = [
    "QUIET_STOP",
    "SCD2_BACKFILL",
    "STOP_SECONDS",
    "TABLE_CREATORS",
    "Job",
    "build_scd2_tables",
    "end_now",
    "load_datasets",
    "prepare_tables",
    "request_stream",
    "storage_of",
]

log = logging.getLogger(__name__)

PY4J_LOG = logging.getLogger(CALLBACK_LOGGER)
QUIET_STOP = QuietStop()
"""Hides py4j's report of a batch refused by a stopping job (``stopping.QuietStop``) while a
query of a job runs."""

STOP_SECONDS = 10
"""How long ``query.stop()`` may take, between batches, before the job gives up on it."""


def storage_of(cfg: AppConfig) -> str:
    """The job's storage as an error names it: its warehouse and its checkpoints."""
    return f"the warehouse {cfg.warehouse} or the checkpoints {cfg.checkpoints}"


def load_datasets(cfg: AppConfig) -> dict[str, Dataset]:
    return {name: load_dataset(name, path) for name, path in cfg.datasets.items()}


def prepare_tables(
    spark: SparkSession,
    datasets: Mapping[str, Dataset],
    layout: Layout,
    *,
    deletion_vectors: bool = False,
    feeds: bool = False,
    properties: Mapping[str, str] | None = None,
) -> None:
    """Create every table the job writes (empty), so readers find them from the start, and bring
    the tables of changed dataset definitions up to date (``storage.evolution``) — or refuse
    to start, before the query consumes anything or a table is created, when a change is not
    additive. ``deletion_vectors``: the current tables have them on (``tables.deletion_vectors``);
    ``properties``: on every table created (upkeep's retention).

    The missing tables are created side by side (``TABLE_CREATORS`` threads; an existing
    system table is found from its log, ``tables.ensure_table``): a creation is a Delta commit
    of driver work (~0.2 s), and a dataset of n schemas has 2 to 4 n tables; the columns added
    and properties recorded then commit one by one (their commit metadata is the session's
    conf)."""
    extra = dict(properties or {})
    plans = plan_evolution(
        spark, datasets, layout, deletion_vectors=deletion_vectors, properties=extra
    )
    system = {layout.ledger: LEDGER_SCHEMA, layout.outcomes: OUTCOMES_SCHEMA}
    system[layout.quarantine] = QUARANTINE_SCHEMA
    if feeds:
        system[layout.pending] = PENDING_SCHEMA
    tables = [(path, schema, extra) for path, schema in system.items()]
    tables += [(t.path, t.schema, dict(t.properties)) for plan in plans for t in plan.create]
    Sessions(spark, TABLE_CREATORS).map(lambda session, t: ensure_table(session, *t), tables)
    add_missing_columns(spark, layout.ledger, LEDGER_SCHEMA)  # ledgers of older versions
    for plan in plans:
        apply_changes(spark, plan)
    build_scd2_tables(spark, datasets, layout)


TABLE_CREATORS = 4
"""Threads creating a job's missing tables at startup (``prepare_tables``): on 2 cores 19 tables
took 2.1-2.5 s with 4 against 3.7-4.5 s one by one."""


def build_scd2_tables(spark: SparkSession, datasets: Mapping[str, Dataset], layout: Layout) -> None:
    """Fill each SCD2 table that holds no rows while its schema's history does, from the whole
    history (``apply.scd2.backfill``: the code that maintains it batch by batch)."""
    for name, dataset in datasets.items():
        for schema in dataset.object_schemas():
            if schema.scd2 is None:
                continue
            paths = layout.object_table(name, schema.name, scd2=True)
            assert paths.scd2 is not None
            if not _holds_rows(spark, paths.history) or _holds_rows(spark, paths.scd2):
                continue
            commit = BatchCommit(SCD2_BACKFILL, 0, datetime.now(UTC), replay_possible=False)
            versions, intervals = backfill(spark, paths.history, schema, paths.scd2, commit)
            log.info(
                "scd2: built %s's SCD2 table from its history (%s versions → %s intervals)",
                schema.name,
                versions,
                intervals,
            )


SCD2_BACKFILL = "scd2-backfill"
"""The ``cdc`` of a backfill's commit metadata (and its ``txnAppId``): not the query's."""


def _holds_rows(spark: SparkSession, path: str) -> bool:
    return not holds_no_rows(spark, path, latest_version(spark, path))


def _ensure_dir(spark: SparkSession, path: str) -> str:
    """Create a landing folder that is not there yet: Spark's file source refuses to start on a
    path that does not exist (PATH_NOT_FOUND). On object storage (s3a://) a folder without
    objects does not exist until Hadoop's ``mkdirs`` writes its marker."""
    if "://" not in path:
        os.makedirs(path, exist_ok=True)
        return path
    hadoop.ensure_dir(spark, path)
    return path


def request_stream(spark: SparkSession, cfg: AppConfig, feeds: Sequence[Feed] = ()) -> DataFrame:
    """All request sources of the config (and the change feeds' topics), unioned into one
    stream of raw records."""
    streams: list[DataFrame] = []
    if cfg.landing.transactions:
        folder = _ensure_dir(spark, cfg.landing.transactions)
        streams.append(landing_requests(spark, cfg.landing, folder))
    if cfg.landing.dms:
        streams.append(dms_files(spark, cfg.landing, _ensure_dir(spark, cfg.landing.dms)))
    if cfg.kafka is not None:
        streams.append(kafka_requests(spark, cfg.kafka))
        topics = sorted({t for feed in feeds for t in feed.all_topics})
        if topics:
            streams.append(change_feed_records(spark, cfg.kafka, topics))
    if not streams:
        raise ConfigError("landing / kafka: configure at least one source")
    union = streams[0].select(RAW_COLUMNS)
    for other in streams[1:]:
        union = union.unionByName(other.select(RAW_COLUMNS))
    return union


@dataclass
class Job:
    spark: SparkSession
    cfg: AppConfig
    datasets: dict[str, Dataset]
    layout: Layout
    sink: Sink
    exporter: Exporter | None = None
    """The metrics endpoint (``metrics.enabled``), served until ``close``."""
    lease: Lease | None = None
    """The job's lease on its checkpoint (``runtime.lease``): taken and renewed from ``create``
    on, released when ``run`` ends cleanly or ``stop`` stops the query (taken again by the next
    ``start``)."""
    topics: TopicWatch | None = None
    """Which topics the job reads are missing (``connectors.kafka_topics``); None: no Kafka."""
    listener: ProgressListener = field(init=False)
    """Logs Spark's progress of the query (rates, duration, Kafka lag); its last entries."""

    def __post_init__(self) -> None:
        self.listener = ProgressListener(self.cfg.query_name, on_progress=self._progress)

    def _progress(self, entry: dict[str, Any]) -> None:
        """One of Spark's progress events: the metrics' lag; its topics are there."""
        if self.sink.metrics is not None:
            self.sink.metrics.progress(entry)
        if self.topics is not None:
            self.topics.seen(entry.get("lag") or {})

    @classmethod
    def create(cls, spark: SparkSession, cfg: AppConfig) -> Job:
        """The job of ``cfg``, its tables ready; with ``metrics.enabled`` its metrics served
        (``close`` ends that)."""
        layout = Layout(cfg.warehouse, cfg.checkpoints, cfg.query_name)
        metrics, exporter = None, None
        if cfg.metrics.enabled:  # first: a port in use stops the job before it does anything
            backlog = None
            if cfg.landing.transactions or cfg.landing.dms:
                backlog = partial(unread_landing_files, spark, cfg.landing, layout.checkpoint)
            metrics = Metrics(backlog)
            exporter = serve(metrics, cfg.metrics.host, cfg.metrics.port)
        # Then the checkpoint: a second runner stops here (CHECKPOINT_HELD), before it creates a
        # table or reads a batch.
        try:
            lease = Lease.of(spark, layout.checkpoint, cfg.lease)
            lease.take()
        except BaseException:
            if exporter is not None:
                exporter.close()
            raise
        lease.start()  # renewed from now on: preparing the tables may take a while
        try:
            return cls._create(spark, cfg, layout, metrics, exporter, lease)
        except BaseException:
            lease.release()
            if exporter is not None:
                exporter.close()
            raise

    @classmethod
    def _create(
        cls,
        spark: SparkSession,
        cfg: AppConfig,
        layout: Layout,
        metrics: Metrics | None,
        exporter: Exporter | None,
        lease: Lease,
    ) -> Job:
        kafka = cfg.kafka
        datasets = load_datasets(cfg)
        if kafka is not None and kafka.change_feeds:  # and the properties the feeds added
            datasets = with_evolved(datasets, evolved.read(spark, layout.evolved))
        feeds = [
            feed_of(feed, index, datasets)
            for index, feed in enumerate(kafka.change_feeds if kafka else [])
        ]
        # Before anything else connects: a definition its tables cannot follow stops here.
        upkeep = cfg.upkeep
        prepare_tables(
            spark,
            datasets,
            layout,
            deletion_vectors=cfg.tables.deletion_vectors,
            feeds=bool(feeds),
            properties=retention_properties(upkeep.retention_seconds) if upkeep.enabled else {},
        )
        topics = None
        if kafka is not None:  # credentials the broker refuses stop the job here
            known = check_kafka(spark, kafka)
            if known is not None and kafka.outcomes_topic not in known:
                # Written by the job only: where the broker does not create it, stop here.
                what = "the outcomes topic, kafka.outcomes_topic"
                require_topic(kafka, kafka.outcomes_topic, what)
            report = metrics.topic if metrics is not None else None
            topics = TopicWatch(read_topics(kafka, feeds), kafka.bootstrap, report)
            topics.start(known)
        if metrics is not None and feeds:
            metrics.snapshots(feeds, applied_snapshots(spark, layout.pending))
        codec = codec_for(kafka)  # Avro schemas are read (or fetched) at startup
        sink = Sink(
            spark=spark,
            datasets=datasets,
            layout=layout,
            base_dir=cfg.base_dir,
            allowed_locations=[
                *cfg.allowed_locations,
                *([cfg.landing.dms] if cfg.landing.dms else []),
            ],
            dms_zone=cfg.landing.dms,
            shuffle_partitions=cfg.spark.shuffle_partitions,
            publish=outcome_publisher(kafka) if kafka else None,
            decode=AvroRequestDecoder(codec) if codec else decode_json_request,
            refusal=partial(refusal_in, kafka) if kafka else None,
            metrics=metrics,
            lease=lease,
            feeds=feeds,
            decode_change=ChangeDecoder(kafka, codec) if kafka and codec else decode_json_value,
            storage_retry=cfg.storage_retry,
            upkeep=Upkeep(
                spark,
                upkeep,
                current=current_tables(layout, datasets),
                current_file_mib=CURRENT_FILE_MIB,
                tombstones={
                    layout.tombstones(name, schema.name): layout.table(name, schema.name)
                    for name, dataset in datasets.items()
                    for schema in dataset.object_schemas()
                },
                root=layout.warehouse,
                metrics=metrics,
            )
            if upkeep.enabled
            else None,
        )
        return cls(
            spark, cfg, datasets, layout, sink, exporter=exporter, lease=lease, topics=topics
        )

    def close(self) -> None:
        """The job is done with: stop serving the metrics (if served; the port is free again)
        and give its checkpoint's lease up — unless a batch was left running (a stop past its
        grace period: the lease then expires, or the next runner on this machine sees this
        process gone). A job created only to prepare its tables (the bench) must be closed, or
        a ``cdc run`` on its checkpoint waits for the lease to expire."""
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None
        if self.lease is not None and self.sink.gate.running is None:
            self.lease.release()

    def start(self, *, once: bool) -> StreamingQuery:
        """Start the query; ``run`` waits for it, else end it with ``stop`` (which detaches the
        progress listener: a listener left behind would log the next query of the same name)."""
        if self.lease is not None:  # held again after an earlier run released it
            self.lease.hold()
            self.lease.start()
        self.spark.streams.addListener(self.listener)
        PY4J_LOG.addFilter(QUIET_STOP)
        writer = (
            request_stream(self.spark, self.cfg, self.sink.feeds)
            .writeStream.queryName(self.cfg.query_name)
            .option("checkpointLocation", self.layout.checkpoint)
            .foreachBatch(self.sink)
        )
        writer = (
            writer.trigger(availableNow=True)
            if once
            else writer.trigger(processingTime=self.cfg.trigger.interval)
        )
        query = writer.start()
        log.info("query %s started (%s)", self.cfg.query_name, "once" if once else "continuous")
        return query

    def run(self, *, once: bool, signals: bool = False) -> Stop | None:
        """Run until stopped (or, with ``once``, until everything present is processed).

        With ``signals`` (``cdc run``; the main thread only), SIGTERM or SIGINT stops the job
        cleanly (``runtime.stopping``): the running batch may finish within
        ``shutdown.grace_period``, then the query stops between batches, the outcome producer is
        let go, and ``run`` returns how it stopped (also logged, one line). A ``Stop`` that is
        not ``clean`` leaves a batch running: the caller must end the process at once
        (``end_now``). None: the query ended by itself (``once``).

        A lease lost meanwhile (``runtime.lease``) or credentials the broker refuses
        (``kafka.recheck_interval``) stop the job the same way — the sink stops before its next
        commit — and the ``Stop`` carries the error (``cdc run`` ends with its code, exit 2); a
        lease lost as the query ended by itself is raised. The lease is released when ``run``
        ends otherwise, unless a batch was left running or the lease was lost: then it expires,
        or the next runner on this machine sees this process gone."""
        shutdown = Shutdown(self.cfg.shutdown.grace_seconds)
        self.sink.gate = BatchGate()  # open, also after an earlier run that was stopped
        self.sink.failure = None
        query = self.start(once=once)
        watch = self._watch_credentials(shutdown)
        stop: Stop | None = None
        try:
            with shutdown.handling() if signals else contextlib.nullcontext(shutdown):
                while not _ended(query):
                    if self.lease is not None and self.lease.lost is not None:
                        shutdown.request(Code.LEASE_LOST)
                    if shutdown.requested:
                        stop = self._stop_on_signal(query, shutdown)
                        break
                else:
                    if shutdown.requested:  # a signal came as the query ended by itself
                        stop = Stop(
                            str(shutdown.signal),
                            self.sink.gate.running,
                            Ending.FINISHED,
                            time.monotonic() - shutdown.at,
                            shutdown.grace,
                        )
        finally:
            if watch is not None:
                watch.stop()
            self._stop_listening(query)
        refusal = watch.refused if watch is not None else None
        lost = self.lease.lost if self.lease is not None else None
        if stop is not None:
            log.info("%s", stop.describe())
            reason = lost or refusal
            if reason is not None:
                if stop.clean and lost is None and self.lease is not None:
                    self.lease.release()
                return replace(stop, error=reason)
            if not stop.clean:
                return stop
        if lost is not None:  # the query ended by itself meanwhile
            raise lost
        if self.lease is not None:
            self.lease.release()
        error = query.exception()
        if error is not None and not (stop is not None and StopRequested.__name__ in str(error)):
            raise self._failure(error)
        return stop

    def _watch_credentials(self, shutdown: Shutdown) -> CredentialWatch | None:
        """With Kafka, both clients' credentials checked again every ``kafka.recheck_interval``
        while the query runs; a refusal stops the job as a signal would
        (``connectors.kafka_check.CredentialWatch``)."""
        kafka = self.cfg.kafka
        if kafka is None or kafka.recheck_seconds <= 0:
            return None
        return CredentialWatch(
            self.spark,
            kafka,
            kafka.recheck_seconds,
            on_refused=lambda error: shutdown.request(error.code),
            on_topics=self.topics.seen if self.topics is not None else None,
        ).start()

    def _failure(self, error: BaseException) -> CdcError:
        """What a failed query ends ``run`` with: the coded error a batch raised (the sink kept
        it), the broker refusing Spark's Kafka source (``KAFKA_AUTH_FAILED``), a storage failure
        (``STORAGE_FULL``, ``STORAGE_NOT_WRITABLE``), else ``QUERY_FAILED``
        (``core.failures``)."""
        if self.sink.failure is not None:
            return self.sink.failure
        refusal = refusal_in(self.cfg.kafka, error) if self.cfg.kafka is not None else None
        if refusal is not None:
            return refusal
        return query_failure(java_text(error), self.storage)

    @property
    def storage(self) -> str:
        """Where the job writes, as its failures name it."""
        return storage_of(self.cfg)

    def _stop_on_signal(self, query: StreamingQuery, shutdown: Shutdown) -> Stop:
        """Close the sink's gate (no batch starts any more), wait for the running batch to
        finish and be committed by Spark — until the grace period ends or a second signal
        comes —, then, if no batch runs, stop the query."""
        gate = self.sink.gate
        batch = gate.running
        if batch is not None:
            log.info(
                "%s: waiting up to %s s for batch %s to finish (a second signal stops at once)",
                shutdown.signal,
                shutdown.grace,
                batch,
            )
        left = gate.close(shutdown.deadline, lambda: shutdown.hurried)

        def stop(ending: Ending, batch: int | None) -> Stop:
            seconds = time.monotonic() - shutdown.at
            return Stop(str(shutdown.signal), batch, ending, seconds, shutdown.grace)

        if left is None and not self._committed(query, gate.done, shutdown):
            left = gate.done
        if left is not None:
            return stop(Ending.SECOND_SIGNAL if shutdown.hurried else Ending.GRACE, left)
        # No batch runs and none can start: stop() interrupts the stream between batches. It
        # runs in a thread of its own, so a stop that hangs cannot hold the process.
        stopper = threading.Thread(target=query.stop, name="cdc-stop", daemon=True)
        stopper.start()
        until = time.monotonic() + STOP_SECONDS
        while stopper.is_alive() and time.monotonic() < until and not shutdown.hurried:
            stopper.join(POLL_SECONDS)
        if stopper.is_alive():  # between batches: a replay replays none of ours
            return stop(Ending.SECOND_SIGNAL if shutdown.hurried else Ending.STUCK, None)
        # The batch that ran finished, or it ended otherwise (it failed; it stopped at the fence of
        # a lost lease): then none was running when the query stopped.
        return stop(Ending.FINISHED, batch if batch is not None and gate.done == batch else None)

    @staticmethod
    def _committed(query: StreamingQuery, batch: int | None, shutdown: Shutdown) -> bool:
        """Wait until Spark has written ``batch``, which the sink ran to its end, to its commit
        log (it does so after the foreachBatch function returns, and reports the batch's
        progress after that); False at the end of the grace period or at a second signal.
        A stop before would have Spark run the batch again at the next start."""

        def written() -> bool:
            progress = query.lastProgress
            return batch is None or (progress is not None and int(progress["batchId"]) >= batch)

        while not written():
            if not query.isActive:  # failed meanwhile: ``run`` reports it
                return True
            if shutdown.hurried or time.monotonic() >= shutdown.deadline:
                return False
            time.sleep(POLL_SECONDS)
        return True

    def stop(self, query: StreamingQuery) -> None:
        """Stop a query ``start`` returned, detach its progress listener, release the lease."""
        try:
            query.stop()
        finally:
            self._stop_listening(query)
            if self.lease is not None:
                self.lease.release()

    def _stop_listening(self, query: StreamingQuery) -> None:
        """Detach the listener once it has seen the query end (so it logged every batch), and
        let the outcome producer go; stop renewing the lease; once the query has ended, release
        what a batch its stop interrupted left cached."""
        if self.lease is not None:
            self.lease.stop()
        if not query.isActive:
            self.sink.release()  # what a batch the stop interrupted left cached
            self.listener.terminated.wait(timeout=10)
        self.spark.streams.removeListener(self.listener)
        PY4J_LOG.removeFilter(QUIET_STOP)
        if isinstance(self.sink.publish, OutcomePublisher):
            self.sink.publish.close()


def _ended(query: StreamingQuery) -> bool:
    """Whether the query has ended, waiting up to ``POLL_SECONDS`` for it. A query that failed
    has ended too (``awaitTermination`` raises its error; ``run`` reads it from the query)."""
    try:
        return bool(query.awaitTermination(POLL_SECONDS))  # type: ignore[arg-type]
    except StreamingQueryException:
        return True


def end_now(spark: SparkSession, code: int = 0) -> NoReturn:
    """End the process at once, as a crash would: a stop (``Job.run``) left a batch running, and
    the replay at the next start finishes it. The driver JVM this process started is killed
    first (left alone it would notice its parent gone, fail the query and log it as an error);
    under spark-submit, where the JVM is the parent, only this process ends."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    # The batch's threads and PySpark's (its accumulator server) fail when the JVM goes, and
    # say so on stderr: not errors to report. The stop's line is out; nothing else is.
    logging.disable(logging.CRITICAL)
    sys.stderr.flush()
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())
    kill_driver_jvm(spark)
    os._exit(code)
