"""Test builders: request lines and a workspace of config, datasets, data and landing files."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import deltalake
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from streaming.core.config import AppConfig, parse_config
from streaming.runtime.job import Job


@contextlib.contextmanager
def streaming_job(spark: SparkSession, cfg: AppConfig) -> Iterator[tuple[Job, StreamingQuery]]:
    """The job of ``cfg`` running as a stream (its own trigger) for the block, stopped when the
    block ends, however it ends. Inside a ``with connect:`` block (``DebeziumConnect``), the
    job stops first and the connector then, even when stopping the job fails."""
    job = Job.create(spark, cfg)
    query = job.start(once=False)
    try:
        yield job, query
    finally:
        job.stop(query)


def request(tid: str, *actions: dict[str, Any], dataset: str = "petstore") -> str:
    return json.dumps({"transactionId": tid, "dataset": dataset, "actions": list(actions)})


def upsert(location: str, **extra: Any) -> dict[str, Any]:
    return {"operation": "UPSERT", "locationUri": location, "format": "JSON", **extra}


def stored_outcomes(warehouse: Path) -> list[dict[str, Any]]:
    """Every outcome in ``<warehouse>/_system/outcomes`` as its JSON, read by delta-rs; none
    before the table exists."""
    path = warehouse / "_system" / "outcomes"
    if not path.exists():
        return []
    table = deltalake.DeltaTable(str(path))
    return [json.loads(r["outcome"]) for r in table.to_pyarrow_table().to_pylist()]


class Workspace:
    """A tmp folder holding a config, datasets, data files and landing request files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.landing = root / "landing" / "transactions"
        self.landing.mkdir(parents=True)
        self._files = 0

    def dataset(self, name: str, yaml_text: str) -> Path:
        path = self.root / f"{name}.yaml"
        path.write_text(yaml_text)
        return path

    def data(self, relative: str, *rows: dict[str, Any] | str) -> Path:
        """A JSON-lines data file under ``data/`` (rows as dicts, or raw lines as strings)."""
        path = self.root / "data" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
        return path

    def requests(self, *lines: str) -> Path:
        """A landing file of request lines; later files get later modification times."""
        self._files += 1
        path = self.landing / f"{self._files:04d}.jsonl"
        path.write_text("".join(line + "\n" for line in lines))
        stamp = 1_700_000_000 + 60 * self._files
        os.utime(path, (stamp, stamp))
        return path

    def config(self, **overrides: Any) -> AppConfig:
        data: dict[str, Any] = {
            "warehouse": "./warehouse",
            "checkpoints": "./checkpoints",
            "datasets": {p.stem: p.name for p in self.root.glob("*.yaml")},
            "landing": {"transactions": "./landing/transactions"},
            "allowed_locations": ["./data"],
            "spark": {"shuffle_partitions": 2},
            **overrides,
        }
        return parse_config(data, base=self.root, environ={})

    def feed_config(
        self, broker: Any, prefix: str, feed: Mapping[str, Any], **overrides: Any
    ) -> AppConfig:
        """A config whose input is Kafka alone (no landing folder): the requests and outcomes
        topics ``<prefix>.requests`` and ``<prefix>.outcomes``, created here on ``broker`` (a
        change feed's own topics come with their first record), and the change feed ``feed``
        (``kafka.change_feeds``' entry); ``overrides``: more top-level settings."""
        broker.create_topics([f"{prefix}.requests", f"{prefix}.outcomes"])
        return self.config(
            landing={},
            kafka={
                "bootstrap": broker.bootstrap,
                "transactions_topic": f"{prefix}.requests",
                "outcomes_topic": f"{prefix}.outcomes",
                "change_feeds": [dict(feed)],
            },
            **overrides,
        )

    def run_once(self, spark: SparkSession, cfg: AppConfig | None = None) -> Job:
        job = Job.create(spark, cfg or self.config())
        job.run(once=True)
        return job
