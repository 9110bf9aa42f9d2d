"""The transaction ledger ``_system/transactions``: committed transactions, keyed by id, forever.

It is what makes a re-sent transaction DUPLICATE (same content) or REJECTED with
TRANSACTION_ID_REUSED (different content), and it records the table versions each transaction's
batch produced — the consistent read point for readers of several tables.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streaming.core.batch import Committed
from streaming.outcomes import Outcome, Status
from streaming.tables import LEDGER_SCHEMA, BatchCommit, append, one_of, read_table


def committed(spark: SparkSession, path: str, ids: Iterable[str]) -> dict[str, Committed]:
    """Ledger entries of the given transaction ids."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    rows = (
        read_table(spark, path)
        .where(one_of(F.col("transaction_id"), wanted))
        .select("transaction_id", "content_hash", "outcome", "batch_id", "query")
        .collect()
    )
    return {
        r["transaction_id"]: Committed(
            r["content_hash"], r["outcome"], int(r["batch_id"]), r["query"]
        )
        for r in rows
    }


def record(
    spark: SparkSession,
    path: str,
    entries: Sequence[tuple[Outcome, str]],
    commit: BatchCommit,
) -> None:
    """Add COMMITTED transactions (outcome, content hash); idempotent for a replayed batch."""
    rows = [
        (
            o.transaction_id,
            o.dataset,
            digest,
            o.batch_id,
            o.source,
            o.committed_at,
            json.dumps(o.table_versions, sort_keys=True),
            o.to_json(),
            commit.query,
        )
        for o, digest in entries
        if o.status is Status.COMMITTED
    ]
    if not rows:
        return
    # An append, not a MERGE: triage never admits a transaction the ledger already holds (a
    # replayed batch's own entries aside, and ``append`` does not make a replayed commit again).
    append(spark.createDataFrame(rows, LEDGER_SCHEMA), path, commit)
