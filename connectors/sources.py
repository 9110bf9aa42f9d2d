"""Streaming sources of transaction requests, as one stream of raw records.

Both sources are projected onto ``RAW_COLUMNS`` so they can be unioned into one query (one
checkpoint, one sink, one writer per table):

  kind       'kafka' | 'landing' | 'dms' | 'changes'
  name       topic | file path
  partition  Kafka partition (0 for files)
  offset     Kafka offset (0 for files: lines are numbered when the file is split)
  mtime      Kafka record timestamp | file modification time
  key        message key ('changes': a change feed's record; NULL for the others)
  payload    message value | whole file content (empty for DMS files: Spark reads them later)

A DMS change file ``<landing.dms>/<dataset>/<schema path>/<file>.parquet`` becomes the request
``{"transactionId": "dms:<path in the zone>", "dataset": …, "actions": [{"operation": "UPSERT",
"format": "DMS", "locationUri": <file>, "target": <schema>}]}``: one transaction per file, so a
file dropped again under the same name is DUPLICATE. Every file a micro-batch lists becomes one
request, a file of 0 bytes too (``passed_over_dms_files``): its load rejects it (EMPTY_FILE).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import PurePosixPath
from urllib.parse import unquote, urlparse, urlsplit

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from connectors.kafka_check import exact_names, kafka_source_options
from streaming.core.batch import RawRequest, SourcePosition, split_landing_file
from streaming.core.changefeed import Received
from streaming.core.config import KafkaConfig, LandingConfig
from streaming.platform import hadoop
from streaming.platform.spark import batch_root_paths, input_files

__all__ = [
    "BINARY_FILE_SCHEMA",
    "FEED_RECORDS_PER_TASK",
    "FETCH_OFFSET_RETRIES",
    "FETCH_OFFSET_RETRY_MS",
    "LANDING_GLOBS",
    "RAW_COLUMNS",
    "change_feed_records",
    "change_records",
    "dms_files",
    "dms_request",
    "kafka_requests",
    "landing_requests",
    "passed_over_dms_files",
    "source_log_files",
    "source_log_paths",
    "to_raw_requests",
    "unread_landing_files",
]

log = logging.getLogger(__name__)

BINARY_FILE_SCHEMA = StructType(
    [
        StructField("path", StringType()),
        StructField("modificationTime", TimestampType()),
        StructField("length", LongType()),
        StructField("content", BinaryType()),
    ]
)
RAW_COLUMNS = ["kind", "name", "partition", "offset", "mtime", "key", "payload"]

FETCH_OFFSET_RETRIES = 30
FETCH_OFFSET_RETRY_MS = 2000
"""How often, and how far apart, Spark's Kafka source asks again for a topic's offsets that it
could not get (``fetchOffset.numRetries``, ``fetchOffset.retryIntervalMs``): a broker outage of
a minute or so is ridden out; after that the query fails."""


def kafka_requests(spark: SparkSession, cfg: KafkaConfig) -> DataFrame:
    """The transactions topic, from the configured starting offsets where a new checkpoint
    finds it, else from its first message when it is created (``kafka_check.exact_names``)."""
    subscription = ("subscribePattern", exact_names([cfg.transactions_topic]))
    return _kafka(spark, cfg, subscription, "kafka", cfg.starting_offsets)


FEED_RECORDS_PER_TASK = 100_000
"""A change feed's records a Spark task reads at most (Kafka's ``maxRecordsPerPartition``): a
snapshot of millions of rows in one topic partition is decoded and cached by many tasks, side by
side, each block of a size the executors hold (one task of a 1M-record partition ran a 1 GB
heap out of memory caching it)."""


def change_feed_records(spark: SparkSession, cfg: KafkaConfig, topics: Sequence[str]) -> DataFrame:
    """The change feeds' topics (``kafka.change_feeds``), every record from the earliest offset
    a new checkpoint finds: a database's history is not to be skipped. Subscribed by a pattern
    of exactly those names: a connector creates a table's topic at its first change, and a
    topic that is not there yet is read from when it comes (``subscribe`` would fail). A topic
    partition's records of a batch are read by tasks of ``FEED_RECORDS_PER_TASK`` at most."""
    subscription = ("subscribePattern", exact_names(topics))
    split = {"maxRecordsPerPartition": str(FEED_RECORDS_PER_TASK)}
    return _kafka(spark, cfg, subscription, "changes", "earliest", split)


def _kafka(
    spark: SparkSession,
    cfg: KafkaConfig,
    subscription: tuple[str, str],
    kind: str,
    starting: str,
    options: dict[str, str] | None = None,
) -> DataFrame:
    reader = (
        spark.readStream.format("kafka")
        .options(**kafka_source_options(cfg))  # bootstrap + the Java client's settings
        .option(*subscription)
        .option("startingOffsets", starting)
        .option("failOnDataLoss", "true")
        .option("fetchOffset.numRetries", str(FETCH_OFFSET_RETRIES))
        .option("fetchOffset.retryIntervalMs", str(FETCH_OFFSET_RETRY_MS))
        .options(**(options or {}))
    )
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", cfg.max_offsets_per_trigger)
    return reader.load().select(
        F.lit(kind).alias("kind"),
        F.col("topic").alias("name"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        F.col("timestamp").alias("mtime"),
        (F.col("key") if kind == "changes" else F.lit(None).cast("binary")).alias("key"),
        F.col("value").alias("payload"),
    )


LANDING_GLOBS = {"transactions": "*.json*", "dms": "*.parquet"}
"""The files each landing folder's source reads (``landing.transactions``, ``landing.dms``)."""


def _files(
    spark: SparkSession, cfg: LandingConfig, folder: str, glob: str, kind: str, payload: Column
) -> DataFrame:
    """New files under ``folder`` matching ``glob``, as raw records of ``kind``."""
    reader = (
        spark.readStream.format("binaryFile")
        .schema(BINARY_FILE_SCHEMA)
        .options(**_file_options(glob))
    )
    if cfg.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", cfg.max_files_per_trigger)
    return reader.load(folder).select(
        F.lit(kind).alias("kind"),
        F.col("path").alias("name"),
        F.lit(0).alias("partition"),
        F.lit(0).cast("long").alias("offset"),
        F.col("modificationTime").alias("mtime"),
        F.lit(None).cast("binary").alias("key"),
        payload.alias("payload"),
    )


def _file_options(glob: str) -> dict[str, str]:
    """The options that choose a landing source's files: every file under the folder, its
    subfolders included, whose name matches ``glob`` (Spark leaves out names starting with
    ``_`` or ``.``)."""
    return {"recursiveFileLookup": "true", "pathGlobFilter": glob}


def landing_requests(spark: SparkSession, cfg: LandingConfig, folder: str) -> DataFrame:
    """Request files (JSON lines) dropped into the landing folder, each file read whole."""
    glob = LANDING_GLOBS["transactions"]
    return _files(spark, cfg, folder, glob, "landing", F.col("content"))


def dms_files(spark: SparkSession, cfg: LandingConfig, folder: str) -> DataFrame:
    """DMS Parquet change files dropped into the landing zone (listed only; read when applied:
    Spark does not read the content of a binary file whose ``content`` is not selected)."""
    glob = LANDING_GLOBS["dms"]
    return _files(spark, cfg, folder, glob, "dms", F.lit(b"").cast("binary"))


# -- what the file sources have not read yet -------------------------------------------------


def unread_landing_files(
    spark: SparkSession, cfg: LandingConfig, checkpoint: str
) -> dict[str, int]:
    """Per landing folder of ``cfg`` (``transactions``, ``dms``): how many of its files the
    query whose checkpoint is ``checkpoint`` has not taken into a micro-batch yet.

    The folder is listed as its stream lists it (Spark's file index with the same options: the
    same files, written the same way), without a Spark job; then the file sources' logs in the
    checkpoint (``sources/<n>/``: every file a batch took, written when the batch is planned)
    are read. Listed first, read second: a file taken in between counts as taken. A folder
    that is not there has none."""
    listed: dict[str, set[str]] = {}
    for name, folder in (("transactions", cfg.transactions), ("dms", cfg.dms)):
        if folder:
            listed[name] = {_comparable(p) for p in _listed_files(spark, folder, name)}
    if not listed:
        return {}
    taken = {_comparable(p) for p in _taken_files(spark, checkpoint)}
    return {name: len(paths - taken) for name, paths in listed.items()}


def _listed_files(spark: SparkSession, folder: str, name: str) -> list[str]:
    if not hadoop.exists(spark, folder):
        return []
    frame = (
        spark.read.format("binaryFile")
        .schema(BINARY_FILE_SCHEMA)
        .options(**_file_options(LANDING_GLOBS[name]))
        .load(folder)
    )
    return input_files(frame)


def _taken_files(spark: SparkSession, checkpoint: str) -> list[str]:
    """Every file the checkpoint's file sources logged (Kafka sources log none)."""
    root = f"{checkpoint.rstrip('/')}/sources"
    files: list[str] = []
    for texts in hadoop.subfolder_texts(spark, root, source_log_files):
        files += source_log_paths(texts)
    return files


def source_log_files(names: Iterable[str]) -> list[str]:
    """The files of a file source's log (Spark's ``FileStreamSourceLog``) that together hold
    every entry: the latest ``<n>.compact`` (all entries up to batch n) and the batches after
    it. Temporary and other files are left out."""
    batches: dict[int, str] = {}
    for name in names:
        number = name.removesuffix(".compact")
        if number.isdigit():
            batches[int(number)] = name
    compact = max((n for n, name in batches.items() if name.endswith(".compact")), default=-1)
    return [batches[n] for n in sorted(batches) if n >= compact]


def source_log_paths(texts: Mapping[str, str]) -> list[str]:
    """The ``path`` of every entry of a file source's log files (a version line, ``v1``, then one
    JSON object per line); a source whose log holds other entries (Kafka's first offsets) has
    none."""
    paths: list[str] = []
    for text in texts.values():
        for line in text.splitlines()[1:]:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                paths.append(entry["path"])
    return paths


def _comparable(path: str) -> str:
    """A file's path as one string whatever way a URI spells it (``file:/a``, ``file:///a``)."""
    parts = urlsplit(path)
    return f"{parts.scheme or 'file'}://{parts.netloc}{unquote(parts.path)}"


def dms_request(path: str, zone: str) -> bytes:
    """The transaction request standing for one DMS file (see the module docstring)."""
    local, root = _local(path), _local(zone)
    relative = (
        PurePosixPath(local).relative_to(root) if local.startswith(root) else PurePosixPath(local)
    )
    parts = relative.parts
    action = {
        "operation": "UPSERT",
        "format": "DMS",
        "locationUri": path,
        "target": ".".join(parts[1:-1]) or "<schema folder missing>",
    }
    request = {"transactionId": f"dms:{relative}", "dataset": parts[0], "actions": [action]}
    return json.dumps(request).encode("utf-8")


def _local(path: str) -> str:
    return urlparse(path).path if path.startswith("file:") else path


def passed_over_dms_files(
    spark: SparkSession, query: str, batch_id: int, rows: Sequence[Row], zone: str
) -> list[Row]:
    """Raw rows (as ``dms_files`` makes them) for the DMS files that micro-batch ``batch_id`` of
    the query named ``query`` listed but read no row of, with their modification time (None:
    gone since). Spark's scans pass over files of 0 bytes (``PartitioningAwareFileIndex.
    listFiles``), yet the file source has recorded them as seen: without a row here such a file
    would get no outcome, ever, even if a copy that was still being written fills it later.
    ``rows``: the batch's collected rows."""
    read = {row["name"] for row in rows if row["kind"] == "dms"}
    root = _local(zone).rstrip("/") + "/"
    listed = sorted(
        path
        for path in _batch_files(spark, query, batch_id)
        if path.endswith(".parquet") and _local(path).startswith(root) and path not in read
    )
    if not listed:
        return []
    found: list[Row] = []
    for path in listed:
        millis = hadoop.modified_ms(spark, path)
        mtime = None if millis is None else datetime.fromtimestamp(millis / 1000, UTC)
        found.append(
            Row(kind="dms", name=path, partition=0, offset=0, mtime=mtime, key=None, payload=b"")
        )
    return found


def _batch_files(spark: SparkSession, query: str, batch_id: int) -> list[str]:
    """The files that the running micro-batch ``batch_id`` of the query ``query`` lists from its
    file sources, as Hadoop writes a path (``file:/a/5 b.parquet``, like the scan's ``path``):
    the root paths of the file relations of the batch's plan (the query's ``lastExecution``,
    set before the sink is called). The DataFrame ``foreachBatch`` gets is built over the
    batch's rows (a ``LogicalRDD``): its ``inputFiles()`` is empty. Spark's internals: if they
    are not as expected, a warning, and the batch goes on (a file of 0 bytes then gets no
    outcome, as before; ``tests/integration/test_dms_broken_files.py`` fails)."""
    active = next((q for q in spark.streams.active if q.name == query), None)
    if active is None:
        return []
    try:
        return batch_root_paths(active, batch_id)
    except Exception as e:  # a method Spark no longer has
        log.warning(
            "batch %s: the files it listed are unknown (%s): an empty file gets no outcome",
            batch_id,
            str(e).splitlines()[0],
        )
        return []


def _utc(value: datetime | None) -> datetime:
    if value is None:
        return datetime.fromtimestamp(0, UTC)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def change_records(rows: Iterable[Row], received_at: datetime) -> list[Received]:
    """The change feeds' records among collected raw rows."""
    return [
        Received(
            row["name"],
            row["partition"],
            row["offset"],
            None if row["key"] is None else bytes(row["key"]),
            None if row["payload"] is None else bytes(row["payload"]),
            _utc(row["mtime"]),
            received_at,
        )
        for row in rows
        if row["kind"] == "changes"
    ]


def to_raw_requests(rows: Iterable[Row], dms_zone: str | None = None) -> list[RawRequest]:
    """Collected raw rows → one ``RawRequest`` per Kafka record, landing-file line or DMS file
    (a change feed's records are not requests of their own: ``change_records``)."""
    raws: list[RawRequest] = []
    for row in rows:
        if row["kind"] == "changes":
            continue
        mtime = _utc(row["mtime"])
        payload = bytes(row["payload"] or b"")
        if row["kind"] == "landing":
            raws.extend(split_landing_file(row["name"], mtime, payload, mtime))
        elif row["kind"] == "dms":
            position = SourcePosition("dms", row["name"], mtime=mtime)
            raws.append(RawRequest(position, dms_request(row["name"], dms_zone or ""), mtime))
        else:
            position = SourcePosition("kafka", row["name"], row["partition"], row["offset"])
            raws.append(RawRequest(position, payload, mtime))
    return raws
