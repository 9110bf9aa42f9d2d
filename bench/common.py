"""Helpers shared by the runner (``bench.run``) and the Kafka workloads (``bench.kafka``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import deltalake
import pyarrow as pa
from pyspark.sql import SparkSession

from bench import data
from bench.sizes import Sizes
from streaming.runtime.job import Job

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
    return paths


def rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0
