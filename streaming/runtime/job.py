"""Wiring of the streaming job: datasets, tables, sources, the sink, the query."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from connectors.avro import AvroRequestDecoder, codec_for
from connectors.kafka_check import check_kafka
from connectors.kafka_io import OutcomePublisher, outcome_publisher
from connectors.sources import RAW_COLUMNS, dms_files, kafka_requests, landing_requests
from streaming.core.batch import decode_json_request
from streaming.core.catalog import Dataset, load_dataset
from streaming.core.config import AppConfig
from streaming.core.errors import ConfigError
from streaming.core.layout import Layout
from streaming.runtime.observe import ProgressListener
from streaming.runtime.sink import Sink
from streaming.storage.evolution import evolve
from streaming.storage.schemas import LEDGER_SCHEMA, OUTCOMES_SCHEMA, QUARANTINE_SCHEMA
from streaming.storage.tables import add_missing_columns, ensure_table

log = logging.getLogger(__name__)


def load_datasets(cfg: AppConfig) -> dict[str, Dataset]:
    return {name: load_dataset(name, path) for name, path in cfg.datasets.items()}


def prepare_tables(
    spark: SparkSession,
    datasets: Mapping[str, Dataset],
    layout: Layout,
    *,
    deletion_vectors: bool = False,
) -> None:
    """Create every table the job writes (empty), so readers find them from the start, and bring
    the tables of changed dataset definitions up to date (``storage.evolution``) — or refuse
    to start, before the query consumes anything, when a change is not additive.
    ``deletion_vectors``: the current tables have them on (``tables.deletion_vectors``)."""
    ensure_table(spark, layout.ledger, LEDGER_SCHEMA)
    add_missing_columns(spark, layout.ledger, LEDGER_SCHEMA)  # ledgers of older versions
    ensure_table(spark, layout.outcomes, OUTCOMES_SCHEMA)
    ensure_table(spark, layout.quarantine, QUARANTINE_SCHEMA)
    evolve(spark, datasets, layout, deletion_vectors=deletion_vectors)


def _ensure_dir(spark: SparkSession, path: str) -> str:
    """Create a landing folder that is not there yet: Spark's file source refuses to start on a
    path that does not exist (PATH_NOT_FOUND). On object storage (s3a://) a folder without
    objects does not exist until Hadoop's ``mkdirs`` writes its marker."""
    if "://" not in path:
        os.makedirs(path, exist_ok=True)
        return path
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(hpath):
        fs.mkdirs(hpath)
    return path


def request_stream(spark: SparkSession, cfg: AppConfig) -> DataFrame:
    """All request sources of the config, unioned into one stream of raw records."""
    streams: list[DataFrame] = []
    if cfg.landing.transactions:
        folder = _ensure_dir(spark, cfg.landing.transactions)
        streams.append(landing_requests(spark, cfg.landing, folder))
    if cfg.landing.dms:
        streams.append(dms_files(spark, cfg.landing, _ensure_dir(spark, cfg.landing.dms)))
    if cfg.kafka is not None:
        streams.append(kafka_requests(spark, cfg.kafka))
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
    listener: ProgressListener = field(init=False)
    """Logs Spark's progress of the query (rates, duration, Kafka lag); its last entries."""

    def __post_init__(self) -> None:
        self.listener = ProgressListener(self.cfg.query_name)

    @classmethod
    def create(cls, spark: SparkSession, cfg: AppConfig) -> Job:
        datasets = load_datasets(cfg)
        layout = Layout(cfg.warehouse, cfg.checkpoints, cfg.query_name)
        # Before anything else connects: a definition its tables cannot follow stops here.
        prepare_tables(spark, datasets, layout, deletion_vectors=cfg.tables.deletion_vectors)
        kafka = cfg.kafka
        if kafka is not None:  # credentials the broker refuses stop the job here
            check_kafka(spark, kafka)
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
        )
        return cls(spark, cfg, datasets, layout, sink)

    def start(self, *, once: bool) -> StreamingQuery:
        """Start the query; ``run`` waits for it, else end it with ``stop`` (which detaches the
        progress listener: a listener left behind would log the next query of the same name)."""
        self.spark.streams.addListener(self.listener)
        writer = (
            request_stream(self.spark, self.cfg)
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

    def run(self, *, once: bool) -> None:
        """Run until stopped (or, with ``once``, until everything present is processed)."""
        query = self.start(once=once)
        try:
            query.awaitTermination()
        finally:
            self._stop_listening(query)
        error = query.exception()
        if error is not None:
            raise RuntimeError(f"streaming query failed: {error}")

    def stop(self, query: StreamingQuery) -> None:
        """Stop a query ``start`` returned, and detach its progress listener."""
        try:
            query.stop()
        finally:
            self._stop_listening(query)

    def _stop_listening(self, query: StreamingQuery) -> None:
        """Detach the listener once it has seen the query end (so it logged every batch), and
        let the outcome producer go."""
        if not query.isActive:
            self.listener.terminated.wait(timeout=10)
        self.spark.streams.removeListener(self.listener)
        if isinstance(self.sink.publish, OutcomePublisher):
            self.sink.publish.close()
