"""``cdc status``: what the job has done, from ``_system/outcomes`` and ``_system/transactions``.

- the last micro-batches: batch id, commit time (from the outcomes table's commit metadata),
  transactions and their statuses;
- every outcome counted by status;
- the ledger: committed transactions, and per table the latest version a batch committed;
- upkeep (``runtime.upkeep``): per table the job writes, its live and small files (Delta's
  checksum) and when it was last compacted (OPTIMIZE) and VACUUMed (within its last
  ``UPKEEP_WINDOW`` commits).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streaming.cli.display import format_table
from streaming.core.layout import Layout
from streaming.core.outcomes import Status
from streaming.storage.log import held_files, last_operations, table_state
from streaming.storage.tables import read_table

__all__ = ["STATUSES", "UPKEEP_WINDOW", "collect_status", "format_status", "table_upkeep"]

STATUSES = [s.value for s in Status]
UPKEEP_WINDOW = 500
"""The commits ``cdc status`` reads back per table for its last OPTIMIZE and VACUUM."""


def _batch_times(spark: SparkSession, path: str, query: str) -> dict[int, datetime]:
    """batch id → commit time, from the ``userMetadata`` of this query's appends to ``path``
    (under any of its checkpoints)."""
    times: dict[int, datetime] = {}
    rows = (
        DeltaTable.forPath(spark, path)
        .history()
        .where(F.col("userMetadata").isNotNull())
        .select("userMetadata")
        .collect()
    )
    for row in rows:
        try:
            meta = json.loads(row["userMetadata"])
        except (TypeError, ValueError):
            continue
        if isinstance(meta, dict) and _ours(meta.get("cdc"), query) and "batchId" in meta:
            times.setdefault(int(meta["batchId"]), datetime.fromisoformat(meta["at"]))
    return times


def _ours(committer: object, query: str) -> bool:
    """Whether a commit's ``cdc`` metadata names ``query``: ``<query>@<checkpoint id>`` (the
    newest history first, so a newer checkpoint's batch wins a repeated batch id)."""
    return isinstance(committer, str) and (committer == query or committer.startswith(f"{query}@"))


def table_upkeep(
    spark: SparkSession, layout: Layout, paths: Iterable[str], small_file_mib: int
) -> list[dict[str, Any]]:
    """Per table among ``paths`` that exists: live files, small files, and the version and time
    of its last OPTIMIZE and VACUUM (None: not within its last ``UPKEEP_WINDOW`` commits)."""
    root = layout.warehouse.rstrip("/") + "/"
    rows = []
    for path in paths:
        if table_state(spark, path) is None:
            continue
        held = held_files(spark, path, small_file_mib * 2**20)
        last = last_operations(spark, path, ("OPTIMIZE", "VACUUM END"), UPKEEP_WINDOW)
        rows.append(
            {
                "table": path[len(root) :] if path.startswith(root) else path,
                "files": held[1] if held else None,
                "smallFiles": held[2] if held else None,
                "lastOptimize": _when(last.get("OPTIMIZE")),
                "lastVacuum": _when(last.get("VACUUM END")),
            }
        )
    return rows


def _when(operation: tuple[int, int] | None) -> str | None:
    """The time of a commit (its ``(version, timestamp ms)``), ISO 8601 in UTC; None: none."""
    if operation is None:
        return None
    return datetime.fromtimestamp(operation[1] / 1000, UTC).isoformat(timespec="seconds")


def collect_status(
    spark: SparkSession,
    layout: Layout,
    batches: int = 10,
    tables: Iterable[str] = (),
    small_file_mib: int = 16,
) -> dict[str, Any]:
    """The status as a JSON-ready dict (``cdc status --json`` prints it); ``tables``: the
    tables the job writes, for their upkeep."""
    outcomes = read_table(spark, layout.outcomes)
    by_status = {s: 0 for s in STATUSES}
    for row in outcomes.groupBy("status").count().collect():
        by_status[row["status"]] = int(row["count"])

    counts = [F.sum((F.col("status") == s).cast("long")).alias(s) for s in STATUSES]
    last = (
        outcomes.groupBy("batch_id")
        .agg(F.count(F.lit(1)).alias("transactions"), *counts)
        .orderBy(F.col("batch_id").desc())
        .limit(batches)
        .collect()
    )
    times = _batch_times(spark, layout.outcomes, layout.query_name)
    recent = [
        {
            "batchId": int(r["batch_id"]),
            "at": times[int(r["batch_id"])].isoformat() if int(r["batch_id"]) in times else None,
            "transactions": int(r["transactions"]),
            **{s: int(r[s]) for s in STATUSES},
        }
        for r in last
    ]

    ledger = read_table(spark, layout.ledger)
    versions = (
        ledger.select(
            "dataset",
            "batch_id",
            "committed_at",
            F.explode(F.from_json("table_versions", "map<string,bigint>")).alias(
                "table", "version"
            ),
        )
        .groupBy("dataset", "table")
        .agg(
            F.max("version").alias("version"),
            F.max("batch_id").alias("batch_id"),
            F.max("committed_at").alias("committed_at"),
        )
        .orderBy("dataset", "table")
        .collect()
    )
    versions_by_table = [
        {
            "dataset": r["dataset"],
            "table": r["table"],
            "version": int(r["version"]),
            "batchId": int(r["batch_id"]),
            "committedAt": r["committed_at"].isoformat() if r["committed_at"] else None,
        }
        for r in versions
    ]
    return {
        "outcomes": by_status,
        "batches": recent,
        "transactions": ledger.count(),
        "tables": versions_by_table,
        "upkeep": table_upkeep(spark, layout, tables, small_file_mib),
    }


def format_status(status: dict[str, Any]) -> str:
    """The status as plain-text tables."""
    batches = [
        [b["batchId"], b["at"], b["transactions"], *(b[s] for s in STATUSES)]
        for b in status["batches"]
    ]
    tables = [
        [t["dataset"], t["table"], t["version"], t["batchId"], t["committedAt"]]
        for t in status["tables"]
    ]
    upkeep = [
        [u["table"], u["files"], u["smallFiles"], u["lastOptimize"], u["lastVacuum"]]
        for u in status.get("upkeep", [])
    ]
    return "\n\n".join(
        [
            "outcomes by status\n"
            + format_table(STATUSES, [[status["outcomes"][s] for s in STATUSES]]),
            "last batches\n" + format_table(["batch", "at", "transactions", *STATUSES], batches),
            f"ledger: {status['transactions']} committed transaction(s); latest table versions\n"
            + format_table(["dataset", "table", "version", "batch", "committed at"], tables),
            "upkeep: live files, small files, last compaction and VACUUM (blank: not in the "
            f"last {UPKEEP_WINDOW} commits)\n"
            + format_table(["table", "files", "small", "last OPTIMIZE", "last VACUUM"], upkeep),
        ]
    )
