"""Delta tables: their schemas, creation, and idempotent per-batch commits.

Every commit this job makes to a table carries ``userMetadata`` = ``{"cdc": query, "batchId": n,
"step": s, "at": commit time}``: a replayed batch finds its own earlier commits by it, so it can
read each table at the version *before* it and skip what it already wrote. MERGEs, DELETEs and
RESTOREs also carry ``txnAppId`` = query name + table path and ``txnVersion`` = (batch id, step),
so Delta itself skips a DML commit a replayed batch already made. Appends do not: Delta answers
a ``txnAppId`` from the table's snapshot state, a Spark job per append that nothing else in the
batch needs; an append looks for its commit in the table's latest commits instead, and only
when the batch may have run before (``BatchCommit.replay_possible``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from delta.tables import DeltaTable
from py4j.protocol import Py4JJavaError
from pyspark import SparkContext
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.classic.column import Column as JvmColumn
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streaming.catalog import SchemaDef
from streaming.retry import on_conflict_retry

META_FIELDS = [
    StructField("id", StringType(), nullable=False),
    StructField("version", LongType(), nullable=False),
    StructField("created", TimestampType(), nullable=False),
    StructField("updated", TimestampType(), nullable=False),
    StructField("hash", StringType(), nullable=False),
]
HISTORY_FIELDS = [
    StructField("__deleted", BooleanType(), nullable=False),
    StructField("__op", StringType(), nullable=False),
    StructField("__transaction_id", StringType(), nullable=False),
]

TOMBSTONES_SCHEMA = StructType(
    [
        StructField("id", StringType(), nullable=False),
        StructField("version", LongType(), nullable=False),
        StructField("deleted", TimestampType(), nullable=False),
    ]
)
"""Deleted keys remembered: a re-insert continues at version + 1, so (id, version) stays unique."""

LEDGER_SCHEMA = StructType(
    [
        StructField("transaction_id", StringType(), nullable=False),
        StructField("dataset", StringType()),
        StructField("content_hash", StringType(), nullable=False),
        StructField("batch_id", LongType(), nullable=False),
        StructField("source", StringType()),
        StructField("committed_at", TimestampType()),
        StructField("table_versions", StringType()),
        StructField("outcome", StringType(), nullable=False),
        StructField("query", StringType()),  # query name @ checkpoint id of the committing batch
    ]
)
OUTCOMES_SCHEMA = StructType(
    [
        StructField("transaction_id", StringType()),
        StructField("dataset", StringType()),
        StructField("status", StringType(), nullable=False),
        StructField("error_code", StringType()),
        StructField("batch_id", LongType(), nullable=False),
        StructField("source", StringType()),
        StructField("received_at", TimestampType()),
        StructField("committed_at", TimestampType()),
        StructField("outcome", StringType(), nullable=False),
    ]
)
QUARANTINE_SCHEMA = StructType(
    [
        StructField("transaction_id", StringType()),
        StructField("error_code", StringType(), nullable=False),
        StructField("error_message", StringType()),
        StructField("batch_id", LongType(), nullable=False),
        StructField("source", StringType(), nullable=False),
        StructField("received_at", TimestampType()),
        StructField("payload", BinaryType()),
    ]
)


def current_schema(schema: SchemaDef) -> StructType:
    """Columns of a schema's current-state table: meta columns (objects only), then properties."""
    data = schema.spark_schema().fields
    return StructType([*META_FIELDS, *data] if schema.is_object else list(data))


def tombstones_schema(schema: SchemaDef) -> StructType:
    """Deleted keys: id, tombstone version, deletion time, and the delete's watermark."""
    if not schema.watermark:
        return TOMBSTONES_SCHEMA
    data = schema.spark_schema()
    mark = StructType([data[c] for c in schema.watermark])
    return StructType([*TOMBSTONES_SCHEMA.fields, StructField("watermark", mark)])


def history_schema(schema: SchemaDef) -> StructType:
    return StructType([*current_schema(schema).fields, *HISTORY_FIELDS])


def ensure_table(
    spark: SparkSession, path: str, schema: StructType, properties: dict[str, str] | None = None
) -> None:
    """Create an empty Delta table at ``path`` unless one exists."""
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
    for key, value in (properties or {}).items():
        builder = builder.property(key, value)
    builder.execute()


def add_missing_columns(spark: SparkSession, path: str, schema: StructType) -> None:
    """Add the (nullable) columns of ``schema`` a table made by an older version lacks."""
    have = {f.name for f in read_table(spark, path).schema.fields}
    missing = [f for f in schema.fields if f.name not in have]
    if missing:
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({columns})")


CURRENT_TABLE_PROPERTIES = {"delta.enableChangeDataFeed": "true"}
HISTORY_TABLE_PROPERTIES = {"delta.appendOnly": "true"}


@dataclass(frozen=True)
class BatchCommit:
    """Identity of this batch's commits: Delta's idempotency keys and our commit metadata."""

    query: str
    batch_id: int
    at: datetime
    step: int = 0
    """The step of the batch (``core.steps``): a batch writes a table at most once per step."""
    replay_possible: bool = True
    """Whether some commits of this batch may exist already: the first batch a sink runs (Spark
    replays the last unfinished batch at a restart) or a batch id it runs again. False only when
    the same sink ran the batch before it to its end: then no commit of this one can exist."""

    def app_id(self, path: str) -> str:
        """Delta ``txnAppId`` of this query's commits to the table at ``path``."""
        return f"{self.query}:{path}"

    def inserts(self) -> BatchCommit:
        """The commit that appends a table's new keys after this step's MERGE of it
        (``apply._write_current``): step ``step | INSERTS_STEP``. A number of its own rather
        than the timeline's next step, so the steps of everything else keep the numbers they
        had when new keys were part of the MERGE — a batch that a job of that version left
        unfinished is replayed with the same steps."""
        return replace(self, step=self.step | INSERTS_STEP)

    @property
    def txn_version(self) -> int:
        """Delta ``txnVersion``: grows with (batch id, step), so Delta skips a replayed commit."""
        return (self.batch_id << STEP_BITS) | self.step

    def metadata(self) -> str:
        return json.dumps(
            {
                "cdc": self.query,
                "batchId": self.batch_id,
                "step": self.step,
                "at": self.at.isoformat(),
            }
        )


STEP_BITS = 20
"""Up to 2**20 steps per batch."""
INSERTS_STEP = 1 << (STEP_BITS - 1)
"""Marks the step of a table's new-key append (``BatchCommit.inserts``); the timeline's own
steps stay below it."""


def step_order(step: int) -> tuple[int, bool]:
    """Where a step falls in its batch: a new-key append right after the MERGE it belongs to."""
    return step & (INSERTS_STEP - 1), bool(step & INSERTS_STEP)


@contextmanager
def session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """``settings`` in the session's conf within the block; afterwards each key as it was
    before (unset if it was not set)."""
    saved = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


@contextmanager
def idempotent(spark: SparkSession, path: str, commit: BatchCommit) -> Iterator[None]:
    """Within the block, Delta DML on ``path`` (MERGE, UPDATE, ...) is idempotent per batch id."""
    conf = {
        "spark.databricks.delta.write.txnAppId": commit.app_id(path),
        "spark.databricks.delta.write.txnVersion": str(commit.txn_version),
        "spark.databricks.delta.commitInfo.userMetadata": commit.metadata(),
    }
    with session_conf(spark, conf):
        yield


HISTORY_WINDOW = 200
"""The most commits ``batch_commits`` reads back from a table's latest version."""
RECENT_COMMITS = 10
"""What it reads first: usually enough to see the query's previous batch, which ends the search."""


def batch_commits(
    spark: SparkSession, path: str, query: str, batch_id: int
) -> dict[int, tuple[int, datetime]]:
    """step → (version, commit time) of this query's commits of ``batch_id`` to the table at
    ``path``: present when the batch is being replayed after a crash. Reads the latest
    ``RECENT_COMMITS`` commits, and up to ``HISTORY_WINDOW`` only when those do not settle it
    (each commit is a file to read: on object storage a request per commit per table per
    batch). The files are read on the driver through Delta's log store: no Spark job."""
    found: dict[int, tuple[int, datetime]] = {}
    for limit in (RECENT_COMMITS, HISTORY_WINDOW):
        commits = recent_commits(spark, path, limit)
        found, settled = scan_commits(commits, query, batch_id)
        if settled or len(commits) < limit:  # or the whole log is read
            break
    return found


def scan_commits(
    commits: Iterable[tuple[int, str | None]], query: str, batch_id: int
) -> tuple[dict[int, tuple[int, datetime]], bool]:
    """Of (version, userMetadata) pairs of the latest commits of a table: step → (version,
    commit time) of ``query``'s commits of ``batch_id``, and whether that is all of them — true
    once a commit of an earlier batch of the query is among them (batches commit in order, so
    every commit of this batch is newer than it, hence among the latest ones read)."""
    found: dict[int, tuple[int, datetime]] = {}
    settled = False
    for version, text in commits:
        if text is None:  # a commit without user metadata: not the job's
            continue
        try:
            meta = json.loads(text)
        except (TypeError, ValueError):
            continue
        if not isinstance(meta, dict) or meta.get("cdc") != query:
            continue
        seen = meta.get("batchId")
        if seen == batch_id:
            step = int(meta.get("step", 0))
            found[step] = (version, datetime.fromisoformat(meta["at"]))
        elif isinstance(seen, int) and seen < batch_id:
            settled = True
    return found, settled


def _delta_log(spark: SparkSession, path: str) -> Any:
    """Delta's ``DeltaLog`` of the table at ``path`` (cached by Delta per path, in the JVM)."""
    jvm = spark._jvm
    assert jvm is not None
    return jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)


def latest_version(spark: SparkSession, path: str) -> int:
    """The table's latest version, from its log on the driver (no Spark job, unlike
    ``DeltaTable.history``): Delta lists the log from its last checkpoint."""
    jvm = spark._jvm
    assert jvm is not None
    empty = jvm.scala.Option.empty()
    return int(_delta_log(spark, path).update(False, empty, empty).version())


def known_version(spark: SparkSession, path: str) -> int:
    """The latest version this process has seen of the table (its own commits included),
    without reading the log: for metrics, never for deciding what to read."""
    return int(_delta_log(spark, path).unsafeVolatileSnapshot().version())


def _held_snapshot(spark: SparkSession, path: str, version: int) -> Any:
    """Delta's snapshot of the table that this process holds, if it is the one at ``version``
    (as after its own last commit), else None: read without a Spark job or a log listing."""
    snapshot = _delta_log(spark, path).unsafeVolatileSnapshot()
    return snapshot if int(snapshot.version()) == version else None


def known_size(spark: SparkSession, path: str, version: int) -> int | None:
    """The table's size in bytes at ``version`` if Delta knows it without a Spark job — from the
    checksum of the snapshot this process holds, when that is the one at ``version`` — else
    None."""
    snapshot = _held_snapshot(spark, path, version)
    if snapshot is None:
        return None
    checksum = snapshot.checksumOpt()
    return int(checksum.get().tableSizeBytes()) if checksum.isDefined() else None


STATS_PREFIX = 32
"""Delta keeps string statistics of up to this many characters (``dataSkippingStringPrefixLength``):
longer ones are cut, the maximum then followed by a marker; such bounds are not used here."""


def id_ranges(spark: SparkSession, path: str, version: int) -> list[tuple[str, str]] | None:
    """Each data file's ``[min, max]`` of ``id`` at ``version``, from Delta's statistics — when
    this process holds the snapshot at that version (as after its own last commit), it has two
    files or more, every file has statistics and none is cut short; else None. One Spark job
    over the snapshot's file list (which Delta caches, and the MERGE that follows reuses), none
    when the checksum says there are fewer than two files."""
    snapshot = _held_snapshot(spark, path, version)
    if snapshot is None:
        return None
    checksum = snapshot.checksumOpt()
    if checksum.isDefined() and int(checksum.get().numFiles()) < 2:
        return None  # no file to tell from another: no job
    files = DataFrame(snapshot.allFiles().toDF(), spark)
    stats = F.from_json("stats", "minValues struct<id: string>, maxValues struct<id: string>")
    bounds = [
        (r["low"], r["high"])
        for r in files.select(stats.alias("s"))
        .select(F.col("s.minValues.id").alias("low"), F.col("s.maxValues.id").alias("high"))
        .collect()
    ]
    usable = all(
        low is not None and high is not None and len(high) < STATS_PREFIX for low, high in bounds
    )
    return bounds if usable else None


def holds_no_rows(spark: SparkSession, path: str, version: int) -> bool:
    """Whether the table has no data files at ``version``: from Delta's checksum when this
    process holds that snapshot (no job), else by looking for one row (one job)."""
    size = known_size(spark, path, version)
    if size is not None:
        return size == 0
    return read_table(spark, path, version).isEmpty()


def table_state(spark: SparkSession, path: str) -> tuple[StructType, dict[str, str]] | None:
    """The schema and table properties of the Delta table at ``path`` from its log on the
    driver (``DeltaTable.detail`` would run a Spark job per table); None if there is none."""
    jvm = spark._jvm
    assert jvm is not None
    empty = jvm.scala.Option.empty()
    snapshot = _delta_log(spark, path).update(False, empty, empty)
    if int(snapshot.version()) < 0:
        return None
    schema = StructType.fromJson(json.loads(str(snapshot.schema().json())))
    configuration = jvm.scala.jdk.javaapi.CollectionConverters.asJava(
        snapshot.metadata().configuration()
    )
    return schema, {str(k): str(v) for k, v in configuration.items()}


def recent_commits(spark: SparkSession, path: str, count: int) -> list[tuple[int, str | None]]:
    """(version, userMetadata) of the table's latest ``count`` commits, newest first, read
    from the commit files on the driver (no Spark job). Stops early at a commit file that is
    gone (log clean-up removes old ones)."""
    jvm = spark._jvm
    assert jvm is not None
    log = _delta_log(spark, path)
    latest = latest_version(spark, path)
    store, conf = log.store(), log.newDeltaHadoopConf()
    out: list[tuple[int, str | None]] = []
    for version in range(latest, max(latest - count, -1), -1):
        file = jvm.org.apache.hadoop.fs.Path(log.logPath(), f"{version:020d}.json")
        try:
            text = str(store.read(file, conf).mkString("\n"))
        except Py4JJavaError:
            break
        out.append((version, _user_metadata(text)))
    return out


def _user_metadata(commit: str) -> str | None:
    """The ``userMetadata`` of a commit file's ``commitInfo`` action (None: there is none)."""
    for line in commit.splitlines():
        if '"commitInfo"' not in line:
            continue
        info = json.loads(line).get("commitInfo")
        if isinstance(info, dict):
            meta = info.get("userMetadata")
            return meta if isinstance(meta, str) else None
    return None


_SEPARATOR = "\x00"


def one_of(column: Column, values: Sequence[str]) -> Column:
    """``column IN (values)``, a predicate Delta skips files with, like ``Column.isin`` — which
    makes a py4j call per value: 500 keys cost ~250 ms of driver time, per table and again in
    its MERGE condition, and more when the tables of a wave do it at once. Here the values
    cross as one string, split in the JVM. Values holding the separator, or empty ones (the
    split drops a trailing empty value), take ``isin``."""
    if len(values) < 8 or any(not v or _SEPARATOR in v for v in values):
        return column.isin(list(values))
    context = SparkContext._active_spark_context
    assert context is not None and context._jvm is not None
    jvm = context._jvm
    pattern = jvm.java.util.regex.Pattern
    listed = (
        pattern.compile(pattern.quote(_SEPARATOR))
        .splitAsStream(_SEPARATOR.join(values))
        .collect(jvm.java.util.stream.Collectors.toList())
    )
    return JvmColumn(column._jc.isInCollection(listed))  # type: ignore[operator]  # typed abstract


def memory_bytes(materialised: DataFrame) -> int | None:
    """The bytes a frame materialised by ``localCheckpoint`` holds in Spark's block manager
    (memory and disk), from Spark's storage info: no job. None when the frame is not one or
    Spark does not say."""
    plan = materialised._jdf.queryExecution().analyzed()
    if plan.getClass().getSimpleName() != "LogicalRDD":
        return None
    rdd = plan.rdd().id()
    for info in materialised.sparkSession.sparkContext._jsc.sc().getRDDStorageInfo():
        if info.id() == rdd:
            return int(info.memSize()) + int(info.diskSize())
    return None


def read_table(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(path)


def append(df: DataFrame, path: str, commit: BatchCommit) -> bool:
    """Append ``df`` to the Delta table at ``path`` once per (query, batch, step): when the batch
    may be a replay, a commit already in the table's latest commits (``batch_commits``) is not
    made again. One Spark job (the write): an append with ``txnAppId`` would add one that
    rebuilds the table's snapshot state to look the id up. Whether it made the commit."""
    if commit.replay_possible and commit.step in batch_commits(
        df.sparkSession, path, commit.query, commit.batch_id
    ):
        return False
    on_conflict_retry(
        lambda: (
            df.write.format("delta")
            .mode("append")
            .option("userMetadata", commit.metadata())
            .save(path)
        ),
        what=path,
    )
    return True
