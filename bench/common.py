"""Helpers shared by the runner (``bench.run``) and the Kafka workloads (``bench.kafka``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import deltalake
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bench import data
from bench.sizes import Sizes
from streaming.runtime.job import Job
from streaming.storage.log import table_state

SHUFFLE_PARTITIONS = 4
"""The config's default ``spark.shuffle_partitions``; the session uses the same."""


def column_of(table: str, name: str = "id") -> pa.ChunkedArray:
    """One column of a Delta table's live rows, read with delta-rs after the timed part —
    through DataFusion (``QueryBuilder``), which applies deletion vectors
    (``to_pyarrow_table`` refuses a table that has them: ``--deletion-vectors``)."""
    query = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(table))
    return pa.table(query.execute(f"SELECT `{name}` FROM t").read_all()).column(name)


def say(message: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)


def seed_tables(
    spark: SparkSession,
    job: Job,
    dataset: str,
    schemas: Sequence[str],
    rows: int,
    sizes: Sizes,
    *,
    shuffled: bool = False,
    w2_props: Sequence[data.Prop] = data.W2_PROPERTIES,
) -> dict[str, str]:
    """Seed each schema's current table (``shuffled``: rows in random id order across the
    files, see ``data.write_seed``; W2's table with the properties ``w2_props``); returns
    schema → table path. With 0 rows the tables stay as ``Job.create`` made them: empty."""
    paths = {}
    for schema in schemas:
        path = job.layout.table(dataset, schema)
        if rows > 0:
            data.write_seed(
                spark,
                path,
                schema,
                rows,
                sizes.rows_per_file,
                shuffled=shuffled,
                w2_props=w2_props,
            )
        paths[schema] = path
        scd2 = job.layout.scd2(dataset, schema)
        if rows > 0 and table_state(spark, scd2) is not None:
            seed_intervals(spark, path, scd2)
    return paths


def seed_intervals(spark: SparkSession, current: str, scd2: str) -> None:
    """An SCD2 table of a seeded current table: one open interval per row, as the job would
    hold after inserting them."""
    rows = spark.read.format("delta").load(current)
    props = [c for c in rows.columns if c not in ("id", "version", "created", "updated", "hash")]
    rows.select(
        "id",
        *props,
        F.col("updated").alias("__start_at"),
        F.lit(None).cast("timestamp").alias("__end_at"),
        F.lit(True).alias("__is_current"),
        F.lit(False).alias("__deleted"),
        F.lit("seed").alias("__transaction_id"),
        F.col("version").alias("__version"),
    ).write.format("delta").mode("append").save(scd2)


def rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0
