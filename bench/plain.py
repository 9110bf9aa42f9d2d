"""The **plain** baseline: the pattern a user writes to apply the same requests with Spark and
Delta, one MERGE per target table per micro-batch (docs/performance.md: the floor to compare with).

Its ``foreachBatch`` function, for each micro-batch of requests (landing files or Kafka records):

1. parses the requests on the driver, in source order (landing: file modification time and
   name, then line; Kafka: offset), and numbers their actions (``seq``);
2. per target table, reads the data files of all its actions in **one** read with the known
   schema (no inference), and tags each row with its action's ``seq`` and operation (a broadcast
   join on the file's folder) and its position in the read (``monotonically_increasing_id``:
   increasing in row order within a file);
3. de-duplicates by key: **the last change of a key wins** (largest ``seq``, then the last row
   of its file); earlier changes of the key in the same batch are dropped, not folded;
4. runs **one** Delta MERGE per target table: UPSERT rows update every property, bump
   ``version``, set ``updated`` and recompute ``hash`` (as the naive baseline does), or insert
   with version 1; DELETE rows delete; PATCH rows update only their columns (``qty``,
   ``status``: W1's PATCH columns), bump ``version`` and recompute ``hash``, and never insert.
   With ``threads`` the tables' MERGEs run from one thread each (Spark runs their jobs
   concurrently), else one after the other in table order.

Simplifications a user would accept and ours does not make: no history, tombstones, ledger,
outcomes, watermarks, validation or unchanged-row checks (every matched UPSERT/PATCH bumps the
version). "Last change wins" is not the same as applying the batch's transactions one at a time
when a key gets several changes in one batch: its version is bumped once, and only its last
change counts (an UPSERT then a PATCH applies the PATCH alone to the stored row; a DELETE then a
PATCH keeps the row).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from bench.baselines import W1_ROW, _data_path, _files_stream, _hash, _in_order, _run_stream
from bench.data import W1_PROPS

PATCH_COLUMNS = ("qty", "status")
"""The columns W1's PATCH files carry (besides ``id``)."""
CATALOG_SCHEMA = "__folder string, __seq long, __op string, __tx string"


@dataclass(frozen=True)
class Change:
    """One action of the batch: its place in source order, operation and data folder."""

    seq: int
    op: str
    target: str
    folder: str
    transaction_id: str


@dataclass
class PlainBatch:
    batch_id: int
    transaction_ids: list[str]
    started: float
    """``time.time()`` when the foreachBatch function was called."""
    finished: float
    """``time.time()`` when the batch's last MERGE returned."""


def landing_payloads(df: DataFrame) -> list[bytes]:
    """A landing micro-batch's request files, in (modification time, name) order."""
    return [bytes(row["content"]) for row in _in_order(df, content=True)]


def kafka_payloads(df: DataFrame) -> list[bytes]:
    """A Kafka micro-batch's record values, in (partition, offset) order."""
    rows = df.select("partition", "offset", "value").collect()
    return [bytes(r["value"]) for r in sorted(rows, key=lambda r: (r["partition"], r["offset"]))]


def _changes(root: Path, payloads: Sequence[bytes]) -> list[Change]:
    out: list[Change] = []
    for payload in payloads:
        for line in payload.decode("utf-8").splitlines():
            if not line.strip():
                continue
            request = json.loads(line)
            for action in request["actions"]:
                folder = os.path.abspath(_data_path(root, action))
                tid = str(request["transactionId"])
                out.append(Change(len(out), action["operation"], action["target"], folder, tid))
    return out


def _folder_of_file() -> Column:
    """The folder of the row's file, as a local path (``_metadata.file_path`` is a URI)."""
    path = F.regexp_replace(F.col("_metadata.file_path"), r"^file:(//)?", "")
    return F.regexp_extract(path, r"^(.*)/[^/]*$", 1)


def latest_per_key(spark: SparkSession, changes: Sequence[Change]) -> DataFrame:
    """One read of the changes' data files; per key the last change (see the module doc)."""
    catalog = spark.createDataFrame(
        [(c.folder, c.seq, c.op, c.transaction_id) for c in changes], CATALOG_SCHEMA
    )
    folders = sorted({c.folder for c in changes})
    rows = (
        spark.read.schema(W1_ROW)
        .json(folders)
        .select(
            "*", F.monotonically_increasing_id().alias("__row"), _folder_of_file().alias("__folder")
        )
        .join(F.broadcast(catalog), "__folder")
    )
    last = Window.partitionBy("id").orderBy(F.col("__seq").desc(), F.col("__row").desc())
    return rows.withColumn("__rank", F.row_number().over(last)).where("__rank = 1")


def merge_into(spark: SparkSession, table: str, source: DataFrame) -> None:
    """The table's one MERGE (clauses by the winning change's operation)."""
    now = F.current_timestamp()
    props = list(W1_PROPS)
    digest = _hash(*[f"s.{p}" for p in props])
    patched = ["s." + p if p in PATCH_COLUMNS else "t." + p for p in props]
    (
        DeltaTable.forPath(spark, table)
        .alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedDelete(condition="s.__op = 'DELETE'")
        .whenMatchedUpdate(
            condition="s.__op = 'PATCH'",
            set={
                **{p: F.col(f"s.{p}") for p in PATCH_COLUMNS},
                "version": F.expr("t.version + 1"),
                "updated": now,
                "hash": _hash(*patched),
            },
        )
        .whenMatchedUpdate(
            condition="s.__op = 'UPSERT'",
            set={
                **{p: F.col(f"s.{p}") for p in props},
                "version": F.expr("t.version + 1"),
                "updated": now,
                "hash": digest,
            },
        )
        .whenNotMatchedInsert(
            condition="s.__op = 'UPSERT'",
            values={
                "id": F.col("s.id"),
                **{p: F.col(f"s.{p}") for p in props},
                "version": F.lit(1).cast("long"),
                "created": now,
                "updated": now,
                "hash": digest,
            },
        )
        .execute()
    )


@dataclass
class PlainSink:
    """The plain foreachBatch function (see the module docstring)."""

    spark: SparkSession
    root: Path
    """Where ``locationUri``s resolve (the workspace)."""
    tables: Mapping[str, str]
    """Target schema → Delta table path."""
    threads: bool = False
    payloads: Callable[[DataFrame], list[bytes]] = landing_payloads
    batches: list[PlainBatch] = field(default_factory=list)
    closed: threading.Event = field(default_factory=threading.Event)
    """Once set, batches that start are skipped (their offsets still commit)."""
    idle: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.idle.set()

    def close(self) -> None:
        """Skip the batches that start from now on; once this returns, ``idle`` is clear while
        a batch that started before runs."""
        with self._lock:
            self.closed.set()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self._lock:
            if self.closed.is_set():
                return
            self.idle.clear()
        started = time.time()
        try:
            changes = _changes(self.root, self.payloads(df))
            by_table: dict[str, list[Change]] = {}
            for change in changes:
                by_table.setdefault(self.tables[change.target], []).append(change)
            work = [
                (lambda t=t, c=c: merge_into(self.spark, t, latest_per_key(self.spark, c)))
                for t, c in sorted(by_table.items())
            ]
            self._run(work)
            done = list(dict.fromkeys(c.transaction_id for c in changes))
            self.batches.append(PlainBatch(batch_id, done, started, time.time()))
        finally:
            self.idle.set()

    def _run(self, work: Sequence[Callable[[], None]]) -> None:
        if not self.threads or len(work) < 2:
            for task in work:
                task()
            return
        with ThreadPoolExecutor(max_workers=len(work), thread_name_prefix="plain-merge") as pool:
            for future in [pool.submit(task) for task in work]:
                future.result()


def plain_landing(
    spark: SparkSession,
    root: Path,
    landing: Path,
    tables: Mapping[str, str],
    per_trigger: int,
    *,
    threads: bool,
    name: str,
) -> tuple[float, PlainSink]:
    """Plain over the landing files (``availableNow``); returns the query's seconds and sink."""
    sink = PlainSink(spark, root, tables, threads=threads)
    stream = _files_stream(spark, landing, "*.jsonl", per_trigger)
    seconds = _run_stream(stream, root / "checkpoints" / name, sink)
    return seconds, sink


def kafka_stream(spark: SparkSession, bootstrap: str, topic: str, per_trigger: int) -> DataFrame:
    """The transactions topic from its beginning, ``per_trigger`` records per batch at most."""
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
    )
