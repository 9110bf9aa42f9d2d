"""Our path: a workspace (config, dataset, seeded tables, landing files) and one timed run of
the job (``Job.create(spark, cfg).run(once=True)``), profiled, with its outcomes counted."""

from __future__ import annotations

import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import deltalake
from pyspark.sql import SparkSession

from bench.profile import Profiler
from streaming.core.config import AppConfig, parse_config
from streaming.runtime.job import Job
from streaming.storage.tables import read_table

TABLES: dict[str, Any] = {}
"""The ``tables`` section of every workspace's config (``bench.run.run`` sets it from the
sizes: ``--deletion-vectors``)."""
UPKEEP: dict[str, Any] = {"enabled": False}
"""The ``upkeep`` section of a workspace's config unless its workload sets one: the workloads
compare a batch's cost with plain Spark's, which does no upkeep; the job's upkeep is measured
by Soak and ScaleRandom (and reported apart: ``OurRun.upkeep_seconds``)."""


@dataclass
class Workspace:
    """A folder under /tmp holding one contender's config, dataset, tables and landing files."""

    root: Path
    dataset: str
    yaml_text: str

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / f"{self.dataset}.yaml").write_text(self.yaml_text)

    @property
    def landing(self) -> Path:
        return self.root / "landing" / "transactions"

    @property
    def dms(self) -> Path:
        return self.root / "landing" / "dms"

    def config(self, **overrides: Any) -> AppConfig:
        data: dict[str, Any] = {
            "warehouse": "./warehouse",
            "checkpoints": "./checkpoints",
            "datasets": {self.dataset: f"{self.dataset}.yaml"},
            "allowed_locations": ["./data"],
            "tables": dict(TABLES),
            "upkeep": dict(UPKEEP),
            **overrides,
        }
        return parse_config(data, base=self.root, environ={})

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class OurRun:
    seconds: float
    statuses: dict[str, int]
    counts: dict[str, int]
    """Action counts over the committed outcomes: inserted, updated, deleted, stale, ..."""
    batches: list[tuple[int, int, float]]
    profile: list[dict[str, Any]]
    files: dict[str, dict[str, float]]
    """Each Delta table of the warehouse after the run (path relative to it): live data files
    and their sizes, read with delta-rs."""
    upkeep_seconds: float = 0.0
    """Of ``seconds``: the job's upkeep after its batches (``upkeep:``; off unless the workload
    turns it on)."""

    @property
    def batch_seconds(self) -> float:
        """``seconds`` without the upkeep after the batches."""
        return self.seconds - self.upkeep_seconds

    def as_json(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3),
            "upkeep_seconds": round(self.upkeep_seconds, 3),
            "statuses": self.statuses,
            "counts": self.counts,
            "batches": [
                {"batchId": b, "transactions": n, "seconds": s} for b, n, s in self.batches
            ],
            "profile": self.profile,
            "files": self.files,
        }


def table_files(warehouse: str) -> dict[str, dict[str, float]]:
    """Live files per Delta table under ``warehouse``: count, mean and largest size in MiB."""
    out: dict[str, dict[str, float]] = {}
    for log in sorted(Path(warehouse).rglob("_delta_log")):
        sizes = (
            deltalake.DeltaTable(str(log.parent))
            .get_add_actions(flatten=True)
            .column("size_bytes")
            .to_pylist()
        )
        mib = [size / 2**20 for size in sizes]
        out[str(log.parent.relative_to(warehouse))] = {
            "files": len(mib),
            "mean_mib": round(sum(mib) / len(mib), 3) if mib else 0.0,
            "max_mib": round(max(mib), 3) if mib else 0.0,
        }
    return out


def run_job(spark: SparkSession, job: Job, *, count_jobs: bool = True) -> OurRun:
    """Run ``job`` once over everything present (files dropped before: first request in is the
    start), profiled; then read its outcomes (not timed)."""
    with Profiler(spark, count_jobs=count_jobs) as profiler:
        before = {id(entry) for entry in job.sink.history}
        started = time.perf_counter()
        job.run(once=True)
        seconds = time.perf_counter() - started
    upkeep = sum(
        float(str(entry.get("upkeepSeconds", 0.0)))
        for entry in job.sink.history
        if id(entry) not in before
    )
    outcomes = read_table(spark, job.layout.outcomes)
    statuses = {r["status"]: int(r["count"]) for r in outcomes.groupBy("status").count().collect()}
    counts: Counter[str] = Counter()
    from streaming.core.outcomes import Outcome

    for row in outcomes.where("status = 'COMMITTED'").select("outcome").collect():
        for action in Outcome.from_json(row["outcome"]).actions:
            for effect in ("inserted", "updated", "deleted", "unchanged", "skipped", "stale"):
                counts[effect] += int(getattr(action, effect))
    return OurRun(
        seconds,
        statuses,
        dict(counts),
        profiler.batches(),
        profiler.report(),
        table_files(job.layout.warehouse),
        upkeep,
    )
