"""Deterministic (seeded) benchmark data: datasets, seeded tables, W1 transactions, W2 DMS files.

Everything is a function of the sizes and ``SEED``: two runs write the same bytes (file
modification times included), so every contender of a run, and every run, sees the same data.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

SEED = 20_240_601
EPOCH = 1_700_000_000
"""Modification time of the first landing file (later files: one minute apart)."""

W1_DATASET = "shop"
W1_SCHEMAS = ("shop.Customer", "shop.Order", "shop.Product")
W1_PREFIX = {"shop.Customer": "c", "shop.Order": "o", "shop.Product": "p"}
W1_YAML = "".join(
    f"{name}:\n"
    "  properties:\n"
    "    name: {type: string}\n"
    "    qty: {type: integer}\n"
    "    price: {type: number}\n"
    "    status: {type: string}\n"
    for name in W1_SCHEMAS
)
W1_PROPS = ("name", "qty", "price", "status")

W2_DATASET = "bank"
W2_SCHEMA = "bank.Account"
W2_PREFIX = "a"
W2_NEW_KEYS = 500_000_000
"""W2 inserts use key numbers from here: new in a table of any size the benchmark seeds, so the
scale runs apply exactly the same changes to every table size."""
W2_YAML = """\
bank.Account:
  properties:
    owner: {type: string}
    balance: {type: integer}
    status: {type: string}
    ts: {type: integer}
  watermark: [ts]
"""
W2_PROPS = ("owner", "balance", "status", "ts")
DMS_TYPES = {
    "ID": pa.string(),
    "OWNER": pa.string(),
    "BALANCE": pa.int64(),
    "STATUS": pa.string(),
    "TS": pa.int64(),
    "Op": pa.string(),
}
STATUSES = ("new", "active", "paused", "closed", "review")


def key(prefix: str, number: int) -> str:
    return f"{prefix}{number:09d}"


# -- seeded tables ---------------------------------------------------------------------------
def seed_rows(spark: SparkSession, schema: str, rows: int, files: int) -> DataFrame:
    """``rows`` rows of an object table (meta columns included, version 1), as our job writes
    them: ``hash`` = sha2 of the JSON of the properties, like ``streaming.apply``."""
    n = F.col("n")

    def pick(salt: int, modulo: int) -> Any:
        return F.pmod(F.xxhash64(n, F.lit(salt)), F.lit(modulo))

    prefix = W2_PREFIX if schema == W2_SCHEMA else W1_PREFIX[schema]
    statuses = F.array(*[F.lit(s) for s in STATUSES])
    status = F.element_at(statuses, (pick(3, len(STATUSES)) + 1).cast("int"))
    if schema == W2_SCHEMA:
        props = [
            F.concat(F.lit("owner-"), pick(1, 50_000).cast("string")).alias("owner"),
            pick(2, 1_000_000).alias("balance"),
            status.alias("status"),
            pick(4, 1_000).alias("ts"),
        ]
        names = W2_PROPS
    else:
        props = [
            F.concat(F.lit("name-"), pick(1, 100_000).cast("string")).alias("name"),
            pick(2, 100).alias("qty"),
            (pick(4, 100_000) / F.lit(100.0)).alias("price"),
            status.alias("status"),
        ]
        names = W1_PROPS
    at = F.lit("2024-01-01 00:00:00").cast("timestamp")
    base = (
        spark.range(rows, numPartitions=files)
        .withColumnRenamed("id", "n")
        .select(F.concat(F.lit(prefix), F.lpad(n.cast("string"), 9, "0")).alias("id"), *props)
    )
    return base.select(
        "id",
        F.lit(1).cast("long").alias("version"),
        at.alias("created"),
        at.alias("updated"),
        F.sha2(F.to_json(F.struct(*names)), 256).alias("hash"),
        *names,
    )


def write_seed(
    spark: SparkSession,
    path: str,
    schema: str,
    rows: int,
    rows_per_file: int,
    *,
    shuffled: bool = False,
) -> int:
    """Append the seed rows to the (empty) current table at ``path``; returns the file count.

    The files hold about ``rows_per_file`` rows each: in id order (each file a narrow id range,
    as a first full load writes them, so Delta's data skipping finds a key's file), or with
    ``shuffled`` in a random id order fixed by ``SEED`` (each row's file and place in it by a
    hash of its id: every file spans the whole id range and no file can be skipped)."""
    files = max(1, -(-rows // rows_per_file))
    rows_df = seed_rows(spark, schema, rows, files)
    if shuffled:
        spot = F.xxhash64(F.col("id"), F.lit(SEED))
        rows_df = rows_df.repartitionByRange(files, spot).sortWithinPartitions(spot)
    rows_df.write.format("delta").mode("append").save(path)
    return files


# -- W1: many small transactions -------------------------------------------------------------
@dataclass(frozen=True)
class SmallTx:
    transaction_id: str
    operation: str
    schema: str
    rows: list[dict[str, Any]]
    location: str
    """Relative to the workspace root (``./data/...``)."""

    def request(self) -> str:
        action = {
            "operation": self.operation,
            "locationUri": self.location,
            "format": "JSON",
            "target": self.schema,
        }
        body = {"transactionId": self.transaction_id, "dataset": W1_DATASET, "actions": [action]}
        return json.dumps(body)


W1_OPERATIONS = ("UPSERT", "PATCH", "DELETE")
W1_WEIGHTS = (0.6, 0.25, 0.15)


def w1_transactions(count: int, table_rows: int, seed: int = SEED) -> list[SmallTx]:
    """``count`` transactions of 1-5 rows: 60% UPSERT (a fifth of the keys new), 25% PATCH
    (qty and status), 15% DELETE, each on one of the three tables; keys repeat across
    transactions (never within one)."""
    rng = random.Random(seed)
    fresh = dict.fromkeys(W1_SCHEMAS, table_rows)
    out: list[SmallTx] = []
    for i in range(count):
        op = rng.choices(W1_OPERATIONS, W1_WEIGHTS)[0]
        schema = rng.choice(W1_SCHEMAS)
        size = rng.randint(1, 5)
        numbers: set[int] = set()
        while len(numbers) < size:
            if op == "UPSERT" and rng.random() < 0.2:
                numbers.add(fresh[schema])
                fresh[schema] += 1
            else:
                numbers.add(rng.randrange(table_rows))
        rows: list[dict[str, Any]] = []
        for number in sorted(numbers):
            row: dict[str, Any] = {"id": key(W1_PREFIX[schema], number)}
            if op == "UPSERT":
                row |= {
                    "name": f"name-{rng.randrange(100_000)}",
                    "qty": rng.randrange(100),
                    "price": rng.randrange(100_000) / 100,
                    "status": rng.choice(STATUSES),
                }
            elif op == "PATCH":
                row |= {"qty": rng.randrange(100), "status": rng.choice(STATUSES)}
            rows.append(row)
        tid = f"w1-{i:06d}"
        out.append(SmallTx(tid, op, schema, rows, f"./data/w1/{tid}"))
    return out


def write_w1_data(root: Path, txs: Sequence[SmallTx]) -> None:
    """Each transaction's rows as ``<location>/<schema path>/part-0.json``."""
    for tx in txs:
        folder = root / tx.location / Path(*tx.schema.split("."))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "part-0.json").write_text("".join(json.dumps(r) + "\n" for r in tx.rows))


def write_requests(folder: Path, txs: Sequence[SmallTx], per_file: int) -> list[Path]:
    """Landing files of ``per_file`` request lines; later files get later modification times."""
    folder.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for number, start in enumerate(range(0, len(txs), per_file)):
        path = folder / f"{number:05d}.jsonl"
        path.write_text("".join(tx.request() + "\n" for tx in txs[start : start + per_file]))
        stamp = EPOCH + 60 * number
        os.utime(path, (stamp, stamp))
        paths.append(path)
    return paths


# -- W2: bulk DMS ----------------------------------------------------------------------------
def w2_changes(changes: int, table_rows: int, seed: int = SEED) -> list[dict[str, Any]]:
    """``changes`` DMS change rows: 20% inserts of new keys, 10% deletes (3/4 of existing keys),
    70% updates of a hot quarter of keys; per key a chain of increasing ``TS`` (all newer than
    the seeded rows' 0..999), then shuffled: the rows arrive out of order, within and across
    files, so some are stale."""
    rng = random.Random(seed + 2)
    inserts = changes * 20 // 100
    deletes = changes * 10 // 100
    updates = changes - inserts - deletes
    new_keys = list(range(W2_NEW_KEYS, W2_NEW_KEYS + inserts))
    hot = rng.sample(range(table_rows), min(table_rows, max(1, updates // 4)))
    pool = hot + new_keys
    chain: dict[int, list[str]] = {n: ["I"] for n in new_keys}
    for _ in range(updates):
        chain.setdefault(rng.choice(pool), []).append("U")
    existing_deletes = rng.sample(range(table_rows), min(table_rows, deletes * 3 // 4))
    deleted = existing_deletes + rng.sample(new_keys, deletes - len(existing_deletes))
    for n in deleted:
        chain.setdefault(n, []).append("D")
    rows: list[dict[str, Any]] = []
    for n in sorted(chain):
        ts = 1_000 + rng.randrange(1_000)
        for op in chain[n]:
            ts += 1 + rng.randrange(1_000)
            rows.append(
                {
                    "ID": key(W2_PREFIX, n),
                    "OWNER": f"owner-{rng.randrange(50_000)}",
                    "BALANCE": rng.randrange(1_000_000),
                    "STATUS": rng.choice(STATUSES),
                    "TS": ts,
                    "Op": op,
                }
            )
    rng.shuffle(rows)
    return rows


def write_dms_files(folder: Path, rows: Sequence[dict[str, Any]], files: int) -> list[Path]:
    """The change rows as ``files`` DMS Parquet files (``<folder>/<n>.parquet``), in order."""
    folder.mkdir(parents=True, exist_ok=True)
    schema = pa.schema(DMS_TYPES)
    per_file = -(-len(rows) // files)
    paths: list[Path] = []
    for number, start in enumerate(range(0, len(rows), per_file)):
        chunk = rows[start : start + per_file]
        table = pa.table({c: [r[c] for r in chunk] for c in DMS_TYPES}, schema=schema)
        path = folder / f"{20240101_000000 + number}.parquet"
        pq.write_table(table, path)
        stamp = EPOCH + 60 * number
        os.utime(path, (stamp, stamp))
        paths.append(path)
    return paths


# -- FullLoad: the initial load --------------------------------------------------------------
FULL_LOAD_FILE = "LOAD00000001.parquet"
"""The name AWS DMS gives a table's first full-load file."""


def write_full_load(folder: Path, rows: int, seed: int = SEED) -> Path:
    """One DMS full-load Parquet file of ``rows`` rows of W2's columns: unique ids
    ``a000000000``, ``a000000001``, ... in order, ``Op`` = 'I' on every row, ``TS`` 0..999."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed + 3)
    columns: dict[str, list[Any]] = {
        "ID": [key(W2_PREFIX, n) for n in range(rows)],
        "OWNER": [f"owner-{rng.randrange(50_000)}" for _ in range(rows)],
        "BALANCE": [rng.randrange(1_000_000) for _ in range(rows)],
        "STATUS": [STATUSES[rng.randrange(len(STATUSES))] for _ in range(rows)],
        "TS": [rng.randrange(1_000) for _ in range(rows)],
        "Op": ["I"] * rows,
    }
    path = folder / FULL_LOAD_FILE
    pq.write_table(pa.table(columns, schema=pa.schema(DMS_TYPES)), path)
    os.utime(path, (EPOCH, EPOCH))
    return path
