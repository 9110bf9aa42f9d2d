"""The ``_system`` tables besides the ledger: every outcome, and quarantined raw input."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import SparkSession

from streaming.core.batch import RawRequest
from streaming.core.errors import CdcError
from streaming.core.outcomes import Outcome
from streaming.storage.commits import BatchCommit, append
from streaming.storage.schemas import OUTCOMES_SCHEMA, QUARANTINE_SCHEMA


def write_outcomes(
    spark: SparkSession, path: str, outcomes: Sequence[Outcome], commit: BatchCommit
) -> None:
    rows = [
        (
            o.transaction_id,
            o.dataset,
            o.status.value,
            o.error.code if o.error else None,
            o.batch_id,
            o.source,
            o.received_at,
            o.committed_at,
            o.to_json(),
        )
        for o in outcomes
    ]
    if rows:
        append(spark.createDataFrame(rows, OUTCOMES_SCHEMA), path, commit)


def quarantine(
    spark: SparkSession,
    path: str,
    items: Sequence[tuple[RawRequest, str | None, CdcError]],
    commit: BatchCommit,
) -> None:
    """Keep the raw bytes of rejected requests, with why and where they came from."""
    rows = [
        (
            tid,
            error.code,
            error.message,
            commit.batch_id,
            str(raw.position),
            raw.received_at,
            bytearray(raw.payload),
        )
        for raw, tid, error in items
    ]
    if rows:
        append(spark.createDataFrame(rows, QUARANTINE_SCHEMA), path, commit)
