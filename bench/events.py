"""The change-feed workloads (issue 35, item 5: "the numbers"):

- **Events** — ``Sizes.events_changes`` Debezium change events (the Postgres connector's JSON
  envelope, **without** the JSON converter's schema wrapper: ``value.converter.schemas.enable
  =false``; a delete is followed by its Kafka tombstone, as the connector's default
  ``tombstones.on.delete`` writes it) over two tables sized like W2's (``Sizes.w2_table_rows``
  each), grouped in source transactions of 1-5 events over both tables (``event_transactions``:
  mostly updates, some inserts and deletes, keys repeating across transactions), with the
  transaction metadata (BEGIN/END on ``<prefix>.transaction``). All of it is in the broker
  before either contender starts; each contender has its own copy of the same seeded tables.

  *Ours*: a job whose only source is a change feed over those topics, ``run(once=True)``
  (available-now; ``Sizes.events_max_per_batch`` = ``kafka.max_offsets_per_trigger``, 0 = no
  bound: every event in as few micro-batches as Spark takes, which is what a catch-up run
  does). *Plain*: per table, its data topic read with Spark's Kafka **batch** source, parsed
  with ``from_json``, the last event per key by source position (the LSN; a window), and one
  Delta MERGE (update or insert the latest non-delete, delete the keys whose latest is a
  delete): no transactions, no history, no outcomes. Measured: events/s and the time ratio
  ours / plain; after the timed part both tables are compared (ids and values), and ours is
  compared with the state the generator expects.

- **EventsLatency** (``bench.events_latency``) — PostgreSQL → Debezium (Kafka Connect) → the
  job running continuously: commit time → outcome event.

Nothing here changes ``streaming/`` or ``connectors/``.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from bench import data
from bench.common import SHUFFLE_PARTITIONS, rate, say
from bench.ours import OurRun, Workspace, run_job
from bench.sizes import Sizes
from streaming.core.changefeed import Received
from streaming.runtime.job import Job
from tests.support.debezium import Topics, send
from tests.support.kafka_broker import LocalKafkaBroker

DATASET = "ledger"
SCHEMAS: dict[str, str] = {"ledger.Account": "public.accounts", "ledger.Payment": "public.payments"}
"""Schema → source table (Debezium's data collection)."""
PROPS = ("owner", "balance", "status")
POSITION = "sourcePosition"
YAML = "".join(
    f"{schema}:\n"
    "  properties:\n"
    "    owner: {type: string}\n"
    "    balance: {type: integer}\n"
    "    status: {type: string}\n"
    f"    {POSITION}: {{type: string}}\n"
    f"  watermark: [{POSITION}]\n"
    for schema in SCHEMAS
)
FEED = "bench"
SEEDED_POSITION = "0" * 20
"""The seeded rows' ``sourcePosition``: before every event's (an LSN as 20 digits)."""
EVENTS_PER_TX = (1, 5)
"""Events per source transaction (inclusive range)."""
OPS = ("u", "c", "d")
OP_WEIGHTS = (0.75, 0.15, 0.10)
REINSERT = 0.25
"""An insert takes a deleted key again this often (when there is one), else a new key."""
WARM_UP = (2_000, 20_000)
"""Events and table rows of the untimed warm-up of both contenders."""


# -- the events (pure) ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Change:
    table: str
    """The source table (``public.accounts``)."""
    op: str
    """Debezium's ``c``, ``u`` or ``d``."""
    row: dict[str, Any]
    """``after`` (c, u); for d the ``before`` of the default replica identity: the key only."""


@dataclass(frozen=True)
class EventTx:
    txid: str
    """Debezium's Postgres id ``<txId>:<lsn>`` (BEGIN, events and END share it here)."""
    changes: tuple[Change, ...]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.changes:
            out[c.table] = out.get(c.table, 0) + 1
        return out


def event_transactions(
    count: int,
    table_rows: int,
    seed: int = data.SEED,
    *,
    per_tx: tuple[int, int] = EVENTS_PER_TX,
) -> list[EventTx]:
    """``count`` change events in source transactions of ``per_tx`` events (an inclusive range;
    default ``EVENTS_PER_TX``; the last transaction takes what is left), each event on
    one of the two tables: 75% updates, 15% inserts, 10% deletes (``OP_WEIGHTS``). Updates and
    deletes take keys of a hot pool (a quarter of the events' count, of the seeded keys
    ``0..table_rows-1``) or keys inserted earlier, so keys repeat across transactions; inserts
    take new keys (from ``data.W2_NEW_KEYS``) or, one time in four, a key deleted earlier. A key
    appears at most once per transaction; every event is valid against the state before it (no
    update of a deleted key, no insert of a live one)."""
    rng = random.Random(seed + 35)
    tables = tuple(SCHEMAS.values())
    hot_size = min(table_rows, max(1, count // 4))
    pools = {t: rng.sample(range(table_rows), hot_size) if table_rows else [] for t in tables}
    deleted: dict[str, list[int]] = {t: [] for t in tables}
    gone: dict[str, set[int]] = {t: set() for t in tables}
    fresh = dict.fromkeys(tables, data.W2_NEW_KEYS)
    out: list[EventTx] = []
    made = 0
    while made < count:
        size = min(rng.randint(*per_tx), count - made)
        used: set[tuple[str, int]] = set()
        changes: list[Change] = []
        for _ in range(size):
            table = rng.choice(tables)
            op = rng.choices(OPS, OP_WEIGHTS)[0]
            number = None
            if op != "c":
                number = _live_key(rng, pools[table], gone[table], used, table)
                if number is None:
                    op = "c"
            if op == "c":
                again = [n for n in deleted[table] if (table, n) not in used]
                if again and rng.random() < REINSERT:
                    number = again[rng.randrange(len(again))]
                    deleted[table].remove(number)
                    gone[table].discard(number)
                else:
                    number = fresh[table]
                    fresh[table] += 1
                    pools[table].append(number)
            assert number is not None
            used.add((table, number))
            ident = data.key(data.W2_PREFIX, number)
            if op == "d":
                deleted[table].append(number)
                gone[table].add(number)
                row: dict[str, Any] = {"id": ident, **dict.fromkeys(PROPS)}
            else:
                row = {
                    "id": ident,
                    "owner": f"owner-{rng.randrange(50_000)}",
                    "balance": rng.randrange(1_000_000),
                    "status": rng.choice(data.STATUSES),
                }
            changes.append(Change(table, op, row))
        out.append(EventTx(f"{100_000 + len(out)}:{len(out)}", tuple(changes)))
        made += size
    return out


def _live_key(
    rng: random.Random, pool: list[int], gone: set[int], used: set[tuple[str, int]], table: str
) -> int | None:
    """A key of ``pool`` neither deleted nor in this transaction yet; None after 20 tries."""
    for _ in range(20):
        if not pool:
            return None
        number = pool[rng.randrange(len(pool))]
        if number not in gone and (table, number) not in used:
            return number
    return None


def final_state(txs: Sequence[EventTx]) -> dict[str, dict[str, tuple[Any, ...] | None]]:
    """Source table → id → its values (``PROPS``) after the events, None if deleted; only the
    keys the events touch."""
    out: dict[str, dict[str, tuple[Any, ...] | None]] = {t: {} for t in SCHEMAS.values()}
    for tx in txs:
        for c in tx.changes:
            out[c.table][c.row["id"]] = None if c.op == "d" else tuple(c.row[p] for p in PROPS)
    return out


def event_records(txs: Sequence[EventTx], prefix: str) -> list[Received]:
    """The records the connector writes for ``txs``: per transaction BEGIN, its events (each
    delete followed by its tombstone) and END on ``<prefix>.transaction``, LSNs increasing."""
    topics = Topics(prefix=prefix)
    for tx in txs:
        topics.begin(tx.txid)
        per_table: dict[str, int] = {}
        for order, c in enumerate(tx.changes, start=1):
            per_table[c.table] = per_table.get(c.table, 0) + 1
            topics.event(
                c.table, c.op, c.row, tx=tx.txid, order=order, table_order=per_table[c.table]
            )
            if c.op == "d":
                topics.tombstone(c.table, c.row["id"])
        topics.end(tx.txid, tx.counts())
    return topics.records


def transaction_id(txid: str) -> str:
    """The transaction id of a source transaction's outcome: ``debezium:<feed>:<END's id>``."""
    return f"debezium:{FEED}:{txid}"


# -- seeded tables -------------------------------------------------------------------------------
def _seed(spark: SparkSession, path: str, rows: int, sizes: Sizes) -> None:
    """W2's seeded rows (``data.seed_rows``, W2's three first properties) with the position of
    the seeding (older than every event's), hashed over the properties as stored."""
    if rows <= 0:
        return
    files = max(1, -(-rows // sizes.rows_per_file))
    props = [p for p in data.W2_PROPERTIES if p[0] in PROPS]
    seeded = data.seed_rows(spark, data.W2_SCHEMA, rows, files, props).withColumn(
        POSITION, F.lit(SEEDED_POSITION)
    )
    seeded = seeded.withColumn("hash", F.sha2(F.to_json(F.struct(*PROPS, POSITION)), 256))
    columns = spark.read.format("delta").load(path).columns
    seeded.select(*columns).write.format("delta").mode("append").save(path)


@dataclass
class EventsSetup:
    ws: Workspace
    job: Job
    tables: dict[str, str]
    """Schema → ours' current table."""
    copies: dict[str, str]
    """Schema → plain's copy of the same seeded table."""
    prefix: str


def _setup(
    spark: SparkSession,
    sizes: Sizes,
    root: Path,
    broker: LocalKafkaBroker,
    prefix: str,
    txs: Sequence[EventTx],
    rows: int,
) -> EventsSetup:
    ws = Workspace(root / "ours", DATASET, YAML)
    topics = {"transactions_topic": f"{prefix}.requests", "outcomes_topic": f"{prefix}.outcomes"}
    broker.create_topics(topics.values())
    kafka: dict[str, Any] = {
        "bootstrap": broker.bootstrap,
        **topics,
        "change_feeds": [
            {"name": FEED, "dataset": DATASET, "topic_prefix": prefix, "tables": SCHEMAS}
        ],
    }
    if sizes.events_max_per_batch:
        kafka["max_offsets_per_trigger"] = sizes.events_max_per_batch
    cfg = ws.config(landing={}, kafka=kafka, spark={"shuffle_partitions": SHUFFLE_PARTITIONS})
    job = Job.create(spark, cfg)
    tables = {s: job.layout.table(DATASET, s) for s in SCHEMAS}
    for path in tables.values():
        _seed(spark, path, rows, sizes)
    copies = {}
    for schema, path in tables.items():
        copies[schema] = str(root / "plain" / schema)
        shutil.copytree(path, copies[schema])
    started = time.perf_counter()
    send(broker.bootstrap, event_records(txs, prefix))
    say(f"Events: produced to {prefix}.* in {time.perf_counter() - started:.1f}s (not timed)")
    return EventsSetup(ws, job, tables, copies, prefix)


# -- plain ---------------------------------------------------------------------------------------
ROW = StructType(
    [
        StructField("id", StringType()),
        StructField("owner", StringType()),
        StructField("balance", LongType()),
        StructField("status", StringType()),
    ]
)
ENVELOPE = StructType(
    [
        StructField("before", ROW),
        StructField("after", ROW),
        StructField("source", StructType([StructField("lsn", LongType())])),
        StructField("op", StringType()),
    ]
)
"""The part of Debezium's envelope plain reads (``from_json``; no schema wrapper)."""


def latest_events(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    """A table's data topic, all of it (the Kafka batch source), parsed; per key its last event
    by LSN, with ``op``, the row's values and its position."""
    raw = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .where(F.col("value").isNotNull())  # tombstones
    )
    e = F.from_json(F.col("value").cast("string"), ENVELOPE).alias("e")
    parsed = raw.select(e).select(
        F.coalesce("e.after.id", "e.before.id").alias("id"),
        F.col("e.op").alias("op"),
        F.col("e.source.lsn").alias("lsn"),
        *[F.col(f"e.after.{p}").alias(p) for p in PROPS],
    )
    last = Window.partitionBy("id").orderBy(F.col("lsn").desc())
    return parsed.withColumn("__rank", F.row_number().over(last)).where("__rank = 1")


def merge_events(spark: SparkSession, table: str, source: DataFrame) -> None:
    """One MERGE: the latest non-delete updates (version + 1) or inserts; a delete deletes."""
    now = F.current_timestamp()
    position = F.lpad(F.col("s.lsn").cast("string"), 20, "0")
    digest = F.sha2(F.to_json(F.struct(*[F.col(f"s.{p}").alias(p) for p in PROPS], position)), 256)
    values = {p: F.col(f"s.{p}") for p in PROPS}
    (
        DeltaTable.forPath(spark, table)
        .alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedDelete(condition="s.op = 'd'")
        .whenMatchedUpdate(
            set={
                **values,
                POSITION: position,
                "version": F.expr("t.version + 1"),
                "updated": now,
                "hash": digest,
            }
        )
        .whenNotMatchedInsert(
            condition="s.op <> 'd'",
            values={
                "id": F.col("s.id"),
                **values,
                POSITION: position,
                "version": F.lit(1).cast("long"),
                "created": now,
                "updated": now,
                "hash": digest,
            },
        )
        .execute()
    )


def plain_events(
    spark: SparkSession, bootstrap: str, prefix: str, copies: Mapping[str, str]
) -> tuple[float, dict[str, float]]:
    """Plain: per table its topic read, de-duplicated, one MERGE; (seconds, seconds per table)."""
    per_table: dict[str, float] = {}
    started = time.perf_counter()
    for schema, path in sorted(copies.items()):
        at = time.perf_counter()
        merge_events(spark, path, latest_events(spark, bootstrap, f"{prefix}.{SCHEMAS[schema]}"))
        per_table[schema] = round(time.perf_counter() - at, 3)
    return time.perf_counter() - started, per_table


# -- checks (after the timed part) ---------------------------------------------------------------
def current_rows(path: str) -> pa.Table:
    """id and ``PROPS`` of a table's live rows, in id order (delta-rs, deletion vectors applied)."""
    query = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(path))
    cols = ", ".join(f"`{c}`" for c in ("id", *PROPS))
    return pa.table(query.execute(f"SELECT {cols} FROM t ORDER BY id").read_all())


def expected_mismatches(table: pa.Table, expected: Mapping[str, tuple[Any, ...] | None]) -> int:
    """Touched keys whose row in ``table`` is not what the events leave (present, absent)."""
    have = {r["id"]: tuple(r[p] for p in PROPS) for r in table.to_pylist() if r["id"] in expected}
    return sum(1 for k, v in expected.items() if have.get(k) != v)


def _check(setup: EventsSetup, txs: Sequence[EventTx]) -> dict[str, Any]:
    expected = final_state(txs)
    out: dict[str, Any] = {"rows": {}, "same_rows": True, "ours_vs_expected": {}}
    for schema in SCHEMAS:
        ours, plain = current_rows(setup.tables[schema]), current_rows(setup.copies[schema])
        out["rows"][schema] = {"ours": ours.num_rows, "plain": plain.num_rows}
        out["same_rows"] = out["same_rows"] and ours.equals(plain)
        out["ours_vs_expected"][schema] = expected_mismatches(ours, expected[SCHEMAS[schema]])
    return out


# -- the workload --------------------------------------------------------------------------------
def _one(
    spark: SparkSession,
    sizes: Sizes,
    root: Path,
    broker: LocalKafkaBroker,
    prefix: str,
    txs: Sequence[EventTx],
    rows: int,
) -> tuple[OurRun, float, dict[str, float], EventsSetup]:
    setup = _setup(spark, sizes, root, broker, prefix, txs, rows)
    try:
        ours = run_job(spark, setup.job)
    finally:
        setup.job.close()
    plain, per_table = plain_events(spark, broker.bootstrap, prefix, setup.copies)
    return ours, plain, per_table, setup


def events(
    spark: SparkSession, sizes: Sizes, base: Path, broker: LocalKafkaBroker
) -> dict[str, Any]:
    """Events: see the module docstring. After an untimed warm-up of both (``WARM_UP``), ours
    then plain on their own copies of the same seeded tables, the same topics."""
    root = base / "events"
    n_warm, rows_warm = WARM_UP
    say(f"Events: warm-up, untimed ({n_warm:,} events into 2 x {rows_warm:,} rows)")
    warm = event_transactions(n_warm, rows_warm)
    _one(spark, sizes, root / "warm-up", broker, "evwarm", warm, rows_warm)
    shutil.rmtree(root / "warm-up", ignore_errors=True)

    rows = sizes.w2_table_rows
    txs = event_transactions(sizes.events_changes, rows)
    n = sum(len(tx.changes) for tx in txs)
    bound = sizes.events_max_per_batch
    say(
        f"Events: {n:,} Debezium events in {len(txs):,} source transactions into 2 x {rows:,} "
        f"seeded rows; ours {'<= ' + format(bound, ',') if bound else 'unbounded'} per batch"
    )
    ours, plain, per_table, setup = _one(spark, sizes, root / "run", broker, "events", txs, rows)
    say(f"Events: ours {ours.seconds:.1f}s {ours.statuses}; plain {plain:.1f}s {per_table}")
    check = _check(setup, txs)
    say(f"Events: check {check}")
    ours_rate, plain_rate = rate(n, ours.seconds), rate(n, plain)
    result = {
        "events": n,
        "transactions": len(txs),
        "table_rows": rows,
        "tables": len(SCHEMAS),
        "per_batch": bound,
        "check": check,
        "ours": {
            **ours.as_json(),
            "changes_per_s": round(ours_rate, 1),
            "transactions_per_s": round(rate(len(txs), ours.seconds), 2),
        },
        "plain": {
            "seconds": round(plain, 3),
            "per_table": per_table,
            "changes_per_s": round(plain_rate, 1),
            "transactions_per_s": round(rate(len(txs), plain), 2),
        },
        "ratios": {
            "ours_vs_plain": round(rate(ours_rate, plain_rate), 3),
            "ours_time_vs_plain": round(rate(ours.seconds, plain), 3),
        },
    }
    setup.ws.remove()
    shutil.rmtree(root, ignore_errors=True)
    return result


# -- EventsLatency -------------------------------------------------------------------------------
LATENCY_ROWS = 10_000
"""EventsLatency: rows of each Postgres table before the connector starts (its snapshot)."""
LATENCY_DRAIN = 300.0
"""EventsLatency: seconds after the last commit to wait for the outcomes."""
PG_TABLES = {t: t.split(".")[1] for t in SCHEMAS.values()}
"""Source table → Postgres table name."""


def missing_prerequisites() -> str | None:
    """Why EventsLatency cannot run here (no Connect/Debezium jars, no PostgreSQL 15, no java),
    or None."""
    from tests.support.kafka_connect import DEFAULT_JARS_DIR
    from tests.support.postgres import PG_BIN

    if not any(DEFAULT_JARS_DIR.glob("connect-runtime-*.jar")) or not any(
        DEFAULT_JARS_DIR.glob("debezium-connector-postgres-*.jar")
    ):
        return f"no Kafka Connect + Debezium jars in {DEFAULT_JARS_DIR} (make jars-connect)"
    if not all((PG_BIN / tool).exists() for tool in ("initdb", "pg_ctl", "postgres")):
        return f"no PostgreSQL 15 in {PG_BIN} (make postgres, or PG_BIN=<dir>)"
    if shutil.which("java") is None:
        return "no java on PATH (Kafka Connect needs Java 17+)"
    return None


def sql_of(tx: EventTx) -> list[tuple[str, tuple[Any, ...]]]:
    """A generated transaction as SQL statements (with parameters) on ``PG_TABLES``."""
    out: list[tuple[str, tuple[Any, ...]]] = []
    for c in tx.changes:
        table, row = PG_TABLES[c.table], c.row
        if c.op == "c":
            out.append(
                (
                    f"INSERT INTO {table} (id, owner, balance, status) VALUES (%s, %s, %s, %s)",
                    (row["id"], row["owner"], row["balance"], row["status"]),
                )
            )
        elif c.op == "u":
            out.append(
                (
                    f"UPDATE {table} SET owner = %s, balance = %s, status = %s WHERE id = %s",
                    (row["owner"], row["balance"], row["status"], row["id"]),
                )
            )
        else:
            out.append((f"DELETE FROM {table} WHERE id = %s", (row["id"],)))
    return out


def source_txid(transaction_id: str) -> str | None:
    """The Postgres ``txId`` of a feed transaction's outcome id (``debezium:<feed>:<txId>:<lsn>``);
    None for a snapshot chunk or another source."""
    from streaming.core.changefeed import POSTGRES_TX

    head = f"debezium:{FEED}:"
    if not transaction_id.startswith(head):
        return None
    found = POSTGRES_TX.fullmatch(transaction_id.removeprefix(head))
    return found.group(1) if found else None


def events_latency(
    spark: SparkSession, sizes: Sizes, base: Path, broker: LocalKafkaBroker
) -> dict[str, Any]:
    """EventsLatency: PostgreSQL 15 → Debezium's Postgres connector in Kafka Connect (JSON with
    the converter's schema wrapper, transaction metadata) → the broker → our job, running with
    a 1 s processing-time trigger. Two tables of ``LATENCY_ROWS`` rows reach it as the
    connector's snapshot; one warm-up transaction, then ``events_latency_transactions``
    transactions (``event_transactions``' first ones, as SQL) committed at
    ``events_latency_rate`` per second. Per transaction: ``clock_timestamp()`` of its last
    statement, just before COMMIT → the Kafka timestamp of its outcome event (matched by the
    ``txId`` in ``debezium:<feed>:<txId>:<lsn>``). Skipped, with the reason, without the jars
    or PostgreSQL."""
    why = missing_prerequisites()
    if why is not None:
        say(f"EventsLatency: skipped: {why}")
        return {"skipped": why}
    from bench.kafka import OutcomeEvents, latency_stats
    from tests.support.kafka_connect import DebeziumPostgresConnect, wait_for_slot
    from tests.support.postgres import PostgresCluster

    root = base / "events-latency"
    prefix = "evlat"
    count = sizes.events_latency_transactions
    txs = event_transactions(6 * (count + 1), LATENCY_ROWS)[: count + 1]
    warm, measured = txs[0], txs[1:]
    pg = PostgresCluster(root / "postgres")
    connect: DebeziumPostgresConnect | None = None
    job: Job | None = None
    query = None
    events: OutcomeEvents | None = None
    committed: dict[str, float] = {}
    try:
        pg.start()
        for table in PG_TABLES.values():
            pg.execute(
                f"CREATE TABLE {table} (id text PRIMARY KEY, owner text, balance bigint, "
                "status text)"
            )
            pg.execute(
                f"INSERT INTO {table} SELECT 'a' || lpad(n::text, 9, '0'), 'owner-' || n, n, "
                f"'active' FROM generate_series(0, {LATENCY_ROWS - 1}) n"
            )
        connect = DebeziumPostgresConnect(
            root / "connect",
            broker.bootstrap,
            pg,
            topic_prefix=prefix,
            tables=list(SCHEMAS.values()),
        )
        started = time.perf_counter()
        connect.start()
        wait_for_slot(pg, connect.slot_name)
        say(f"EventsLatency: Postgres and Kafka Connect up in {time.perf_counter() - started:.1f}s")
        ws = Workspace(root / "ours", DATASET, YAML)
        topics = {
            "transactions_topic": f"{prefix}.requests",
            "outcomes_topic": f"{prefix}.outcomes",
        }
        broker.create_topics(topics.values())
        cfg = ws.config(
            landing={},
            trigger={"interval": "1 second"},
            spark={"shuffle_partitions": SHUFFLE_PARTITIONS},
            kafka={
                "bootstrap": broker.bootstrap,
                **topics,
                "change_feeds": [
                    {"name": FEED, "dataset": DATASET, "topic_prefix": prefix, "tables": SCHEMAS}
                ],
            },
        )
        job = Job.create(spark, cfg)
        events = OutcomeEvents(broker.bootstrap, topics["outcomes_topic"])
        query = job.start(once=False)

        def commit(tx: EventTx) -> str:
            with pg.transaction() as cur:
                for statement, params in sql_of(tx):
                    cur.execute(statement.encode(), params)
                cur.execute(b"SELECT txid_current(), extract(epoch FROM clock_timestamp())")
                got = cur.fetchone()
            assert got is not None
            txid, at = got
            committed[str(txid)] = float(at)
            return str(txid)

        def by_txid() -> dict[str, float]:
            assert events is not None
            out = {}
            for tid, at in events.times.items():
                found = source_txid(tid)
                if found is not None:
                    out[found] = at
            return out

        def wait(wanted: set[str], deadline: float) -> bool:
            assert events is not None and query is not None
            while not wanted <= by_txid().keys():
                if time.time() > deadline or not query.isActive:
                    return False
                events.read_until({"-"}, min(deadline, time.time() + 1))
            return True

        warm_id = commit(warm)
        if not wait({warm_id}, time.time() + 600):
            raise RuntimeError(f"EventsLatency: no outcome for the warm-up transaction {warm_id}")
        warm_seconds = by_txid()[warm_id] - committed[warm_id]
        say(
            f"EventsLatency: snapshot and warm-up applied ({warm_seconds:.1f}s "
            f"for the warm-up); committing {count} transactions at {sizes.events_latency_rate:g}/s"
        )
        first = time.time() + 0.1
        ids = []
        for i, tx in enumerate(measured):
            while (pause := first + i / sizes.events_latency_rate - time.time()) > 0:
                time.sleep(pause)
            ids.append(commit(tx))
        last_commit = time.time()
        wanted = set(ids)
        wait(wanted, last_commit + LATENCY_DRAIN)
        stopped_at = time.time()
        outcomes = by_txid()
    finally:
        if job is not None and query is not None:
            job.stop(query)
        if events is not None:
            events.close()
        if connect is not None:
            connect.stop()
        pg.stop()
    exact = [outcomes[t] - committed[t] for t in ids if t in outcomes]
    censored = [stopped_at - committed[t] for t in ids if t not in outcomes]
    stats = latency_stats(exact, censored)
    statuses: dict[str, int] = {}
    for tid, status in events.statuses.items():
        if source_txid(tid) in wanted:
            statuses[status] = statuses.get(status, 0) + 1
    span = max(committed[t] for t in ids) - min(committed[t] for t in ids)
    say(
        f"EventsLatency: {len(exact)} of {len(ids)} measured; p50 {stats['p50']['seconds']:.1f}s, "
        f"p99 {stats['p99']['seconds']:.1f}s, max {stats['max']['seconds']:.1f}s {statuses}"
    )
    shutil.rmtree(root, ignore_errors=True)
    return {
        "transactions": len(ids),
        "events": sum(len(tx.changes) for tx in measured),
        "rate": sizes.events_latency_rate,
        "achieved_rate": round(rate(len(ids) - 1, span), 2),
        "table_rows": LATENCY_ROWS,
        "trigger": "1 second",
        "measured": len(exact),
        "censored": len(censored),
        "statuses": statuses,
        "latency": stats,
    }


def latency_lines(r: dict[str, Any]) -> list[str]:
    """EventsLatency's lines of the results table."""
    if "skipped" in r:
        return [f"EventsLatency: skipped: {r['skipped']}"]
    lat = r["latency"]

    def fmt(entry: dict[str, Any]) -> str:
        return f"{'' if entry['exact'] else '>= '}{entry['seconds']:.1f}s"

    return [
        f"EventsLatency: {r['transactions']:,} Postgres transactions ({r['events']:,} changes over "
        f"2 tables of {r['table_rows']:,} rows) committed at {r['rate']:g}/s (achieved "
        f"{r['achieved_rate']:.1f}/s) → Debezium → ours, trigger {r['trigger']}",
        f"EventsLatency  commit → outcome event: p50 {fmt(lat['p50'])}, p99 {fmt(lat['p99'])}, "
        f"max {fmt(lat['max'])}; {r['measured']:,} of {r['transactions']:,} measured "
        f"{r['statuses']}",
    ]
