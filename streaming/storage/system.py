"""The ``_system`` tables besides the ledger: every outcome, and quarantined raw input."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession

from streaming.core.batch import RawRequest
from streaming.core.errors import CdcError
from streaming.core.outcomes import Outcome
from streaming.storage.commits import BatchCommit, append
from streaming.storage.schemas import OUTCOMES_SCHEMA, QUARANTINE_SCHEMA

__all__ = ["quarantine", "write_outcomes"]


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
    more: DataFrame | None = None,
) -> None:
    """Keep the raw bytes of rejected requests, with why and where they came from; ``more``:
    rows of ``QUARANTINE_SCHEMA`` built by Spark (a change feed's, ``inputs.changefeeds``)."""
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
    session = more.sparkSession if more is not None else spark
    frame = session.createDataFrame(rows, QUARANTINE_SCHEMA) if rows else None
    if more is not None:
        frame = more if frame is None else frame.unionByName(more)
    if frame is not None:
        append(frame, path, commit)
