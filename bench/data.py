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

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml
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
Prop = tuple[str, str, pa.DataType]
"""A W2 property: (name, its type in the dataset YAML, the Arrow type of its DMS column)."""
W2_PROPERTIES: tuple[Prop, ...] = (
    ("owner", "string", pa.string()),
    ("balance", "integer", pa.int64()),
    ("status", "string", pa.string()),
    ("ts", "integer", pa.int64()),
)
"""W2's schema as it is by default; ``w2_properties`` widens it."""
W2_PROPS = tuple(name for name, _, _ in W2_PROPERTIES)
EXTRA_TYPES: tuple[tuple[str, pa.DataType], ...] = (
    ("string", pa.string()),
    ("integer", pa.int64()),
)
"""The extra properties' types, in turn: ``p01`` string, ``p02`` integer, ``p03`` string, ..."""
EXTRA_NULLS = 10
"""One extra value in this many is NULL (in the seeded rows and in the changes)."""
EXTRA_VALUES = 1_000_000
"""Extra values: ``v-<0..999999>`` (string) or 0..999999 (integer)."""


def w2_properties(extra: int = 0) -> tuple[Prop, ...]:
    """W2's properties plus ``extra`` ones named ``p01``, ``p02``, ... (zero-padded to at least
    two digits), of the types ``EXTRA_TYPES`` in turn (``--w2-extra-props``)."""
    if extra < 0:
        raise ValueError(f"extra properties: expected 0 or more, not {extra}")
    width = max(2, len(str(extra)))
    return W2_PROPERTIES + tuple(
        (f"p{i:0{width}d}", *EXTRA_TYPES[(i - 1) % len(EXTRA_TYPES)]) for i in range(1, extra + 1)
    )


def w2_yaml(props: Sequence[Prop] = W2_PROPERTIES) -> str:
    """The dataset YAML of W2's schema with ``props`` (``W2_YAML`` for the default ones)."""
    lines = "".join(f"    {name}: {{type: {kind}}}\n" for name, kind, _ in props)
    return f"{W2_SCHEMA}:\n  properties:\n{lines}  watermark: [ts]\n"


def dms_types(props: Sequence[Prop] = W2_PROPERTIES) -> dict[str, pa.DataType]:
    """The columns of W2's DMS files: ``ID``, the properties upper-cased, ``Op``."""
    return {
        "ID": pa.string(),
        **{name.upper(): arrow for name, _, arrow in props},
        "Op": pa.string(),
    }


W2_YAML = w2_yaml()


def with_scd2(yaml_text: str) -> str:
    """A dataset's YAML with ``scd2: true`` on every object schema (``--scd2``)."""
    mapping = yaml.safe_load(yaml_text)
    for body in mapping.values():
        if body.get("type", "object") == "object":
            body["scd2"] = True
    return str(yaml.safe_dump(mapping, sort_keys=False))


DMS_TYPES = dms_types()
STATUSES = ("new", "active", "paused", "closed", "review")


def key(prefix: str, number: int) -> str:
    return f"{prefix}{number:09d}"


# -- seeded tables ---------------------------------------------------------------------------
def seed_rows(
    spark: SparkSession,
    schema: str,
    rows: int,
    files: int,
    w2_props: Sequence[Prop] = W2_PROPERTIES,
) -> DataFrame:
    """``rows`` rows of an object table (meta columns included, version 1), as our job writes
    them: ``hash`` = sha2 of the JSON of the properties, like ``apply.objects``. W2's table
    has the properties ``w2_props``: the default four, then extra ones (``w2_properties``)."""
    n = F.col("n")

    def pick(salt: int, modulo: int) -> Any:
        return F.pmod(F.xxhash64(n, F.lit(salt)), F.lit(modulo))

    prefix = W2_PREFIX if schema == W2_SCHEMA else W1_PREFIX[schema]
    statuses = F.array(*[F.lit(s) for s in STATUSES])
    status = F.element_at(statuses, (pick(3, len(STATUSES)) + 1).cast("int"))
    if schema == W2_SCHEMA:
        default = {
            "owner": F.concat(F.lit("owner-"), pick(1, 50_000).cast("string")),
            "balance": pick(2, 1_000_000),
            "status": status,
            "ts": pick(4, 1_000),
        }
        props = [
            (default[name] if name in default else _extra_seed(pick, number, kind)).alias(name)
            for number, (name, kind, _) in enumerate(w2_props)
        ]
        names = tuple(name for name, _, _ in w2_props)
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


def _extra_seed(pick: Any, number: int, kind: str) -> Any:
    """An extra property's seeded value: a hash of the row number and the property's place
    (``number``), NULL one time in ``EXTRA_NULLS``."""
    value = pick(1_000 + 2 * number, EXTRA_VALUES)
    if kind == "string":
        value = F.concat(F.lit("v-"), value.cast("string"))
    return F.when(pick(1_001 + 2 * number, EXTRA_NULLS) == 0, F.lit(None)).otherwise(value)


def write_seed(
    spark: SparkSession,
    path: str,
    schema: str,
    rows: int,
    rows_per_file: int,
    *,
    shuffled: bool = False,
    w2_props: Sequence[Prop] = W2_PROPERTIES,
) -> int:
    """Append the seed rows to the (empty) current table at ``path``; returns the file count.

    The files hold about ``rows_per_file`` rows each: in id order (each file a narrow id range,
    as a first full load writes them, so Delta's data skipping finds a key's file), or with
    ``shuffled`` in a random id order fixed by ``SEED`` (each row's file and place in it by a
    hash of its id: every file spans the whole id range and no file can be skipped)."""
    files = max(1, -(-rows // rows_per_file))
    rows_df = seed_rows(spark, schema, rows, files, w2_props)
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


def write_dms_files(
    folder: Path,
    rows: Sequence[dict[str, Any]],
    files: int,
    props: Sequence[Prop] = W2_PROPERTIES,
) -> list[Path]:
    """The change rows as ``files`` DMS Parquet files (``<folder>/<n>.parquet``), in order.
    Columns of ``props`` that the rows do not hold (the extra properties) get values that are
    a hash of the change's key and ``TS`` (``_extra_changes``)."""
    folder.mkdir(parents=True, exist_ok=True)
    types = dms_types(props)
    schema = pa.schema(types)
    given = [c for c in types if c in DMS_TYPES]
    extra = [(number, c) for number, c in enumerate(types) if c not in DMS_TYPES]
    per_file = -(-len(rows) // files)
    paths: list[Path] = []
    for number, start in enumerate(range(0, len(rows), per_file)):
        chunk = rows[start : start + per_file]
        columns: dict[str, Any] = {c: [r[c] for r in chunk] for c in given}
        if extra:
            keys = np.array([int(r["ID"][len(W2_PREFIX) :]) for r in chunk], dtype=np.uint64)
            ts = np.array([r["TS"] for r in chunk], dtype=np.uint64)
            for place, c in extra:
                columns[c] = _extra_changes(keys, ts, place, types[c])
        table = pa.table({c: columns[c] for c in types}, schema=schema)
        path = folder / f"{20240101_000000 + number}.parquet"
        pq.write_table(table, path)
        stamp = EPOCH + 60 * number
        os.utime(path, (stamp, stamp))
        paths.append(path)
    return paths


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's finaliser: a well-spread 64-bit hash of each value (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _extra_changes(
    keys: npt.NDArray[np.uint64], ts: npt.NDArray[np.uint64], place: int, arrow: pa.DataType
) -> pa.Array:
    """An extra property's values in changes: a hash of ``SEED``, the key number, the change's
    ``TS`` and the column's place, NULL one time in ``EXTRA_NULLS``; ``v-<n>`` for strings."""
    with np.errstate(over="ignore"):
        salt = _mix(np.array([SEED * 1_000 + place], dtype=np.uint64))
        h = _mix(_mix(keys ^ salt) ^ ts)
    values = (h >> np.uint64(8)) % np.uint64(EXTRA_VALUES)
    nulls = h % np.uint64(EXTRA_NULLS) == 0
    numbers = pa.array(values.astype(np.int64), pa.int64(), mask=nulls)
    if arrow == pa.int64():
        return numbers
    return pc.binary_join_element_wise("v-", pc.cast(numbers, pa.string()), "")


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
