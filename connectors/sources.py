"""Streaming sources of transaction requests, as one stream of raw records.

Both sources are projected onto ``RAW_COLUMNS`` so they can be unioned into one query (one
checkpoint, one sink, one writer per table):

  kind       'kafka' | 'landing'
  name       topic | file path
  partition  Kafka partition (0 for files)
  offset     Kafka offset (0 for files: lines are numbered when the file is split)
  mtime      Kafka record timestamp | file modification time
  payload    message value | whole file content
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streaming.config import KafkaConfig, LandingConfig
from streaming.core.batch import RawRequest, SourcePosition, split_landing_file

BINARY_FILE_SCHEMA = StructType(
    [
        StructField("path", StringType()),
        StructField("modificationTime", TimestampType()),
        StructField("length", LongType()),
        StructField("content", BinaryType()),
    ]
)
RAW_COLUMNS = ["kind", "name", "partition", "offset", "mtime", "payload"]


def kafka_requests(spark: SparkSession, cfg: KafkaConfig) -> DataFrame:
    """The transactions topic, read from the configured starting offsets."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", cfg.bootstrap)
        .option("subscribe", cfg.transactions_topic)
        .option("startingOffsets", cfg.starting_offsets)
        .option("failOnDataLoss", "true")
    )
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", cfg.max_offsets_per_trigger)
    for key, value in cfg.options.items():
        reader = reader.option(f"kafka.{key}", value)
    return reader.load().select(
        F.lit("kafka").alias("kind"),
        F.col("topic").alias("name"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        F.col("timestamp").alias("mtime"),
        F.col("value").alias("payload"),
    )


def landing_requests(spark: SparkSession, cfg: LandingConfig, folder: str) -> DataFrame:
    """Request files (JSON lines) dropped into the landing folder, each file read whole."""
    reader = (
        spark.readStream.format("binaryFile")
        .schema(BINARY_FILE_SCHEMA)
        .option("recursiveFileLookup", "true")
    )
    if cfg.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", cfg.max_files_per_trigger)
    return (
        reader.option("pathGlobFilter", "*.json*")
        .load(folder)
        .select(
            F.lit("landing").alias("kind"),
            F.col("path").alias("name"),
            F.lit(0).alias("partition"),
            F.lit(0).cast("long").alias("offset"),
            F.col("modificationTime").alias("mtime"),
            F.col("content").alias("payload"),
        )
    )


def _utc(value: datetime | None) -> datetime:
    if value is None:
        return datetime.fromtimestamp(0, UTC)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def to_raw_requests(rows: Iterable[Row]) -> list[RawRequest]:
    """Collected raw rows → one ``RawRequest`` per Kafka record or landing-file line."""
    raws: list[RawRequest] = []
    for row in rows:
        mtime = _utc(row["mtime"])
        payload = bytes(row["payload"] or b"")
        if row["kind"] == "landing":
            raws.extend(split_landing_file(row["name"], mtime, payload, mtime))
        else:
            position = SourcePosition("kafka", row["name"], row["partition"], row["offset"])
            raws.append(RawRequest(position, payload, mtime))
    return raws
