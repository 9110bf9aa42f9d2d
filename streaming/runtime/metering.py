"""What a micro-batch costs on Spark and Delta: the Spark jobs it started and the Delta commits it
made. They, far more than rows, are what a batch's time is made of (docs/performance.md, "What a
batch costs"), so every batch reports them (the progress line and ``Sink.history``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pyspark.sql import SparkSession

from streaming.platform import spark as platform_spark
from streaming.storage.log import known_version

__all__ = ["Cost", "Meter", "next_job_id"]


@dataclass(frozen=True)
class Cost:
    jobs: int
    """Spark jobs started while the batch ran (the scheduler's job counter: jobs that other
    queries of the same application started meanwhile count too)."""
    commits: int
    """Delta commits added to the tables the batch may write (their versions as this process
    knows them: its own commits included, without reading the logs again)."""


@dataclass
class Meter:
    spark: SparkSession
    versions: dict[str, int]
    first_job: int

    @classmethod
    def start(cls, spark: SparkSession, tables: Iterable[str]) -> Meter:
        versions = {path: known_version(spark, path) for path in sorted(set(tables))}
        return cls(spark, versions, next_job_id(spark))

    def stop(self) -> Cost:
        commits = sum(
            known_version(self.spark, path) - version for path, version in self.versions.items()
        )
        return Cost(next_job_id(self.spark) - self.first_job, commits)


def next_job_id(spark: SparkSession) -> int:
    """The id Spark's scheduler gives its next job: job ids count up from 0 per application."""
    return platform_spark.next_job_id(spark)
