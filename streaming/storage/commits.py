"""The exactly-once identity of a batch's commits, and how a replayed batch finds its own.

Every commit this job makes to a table carries ``userMetadata`` = ``{"cdc": query, "batchId": n,
"step": s, "at": commit time}``: a replayed batch finds its own earlier commits by it, so it can
read each table at the version *before* it and skip what it already wrote. MERGEs and DELETEs
also carry ``txnAppId`` = query name + table path and ``txnVersion`` = (batch id, step), so Delta
itself skips a DML commit a replayed batch already made (a RESTORE is made only when the table is
not at its version already: ``timeline.Timeline.restore``). Appends do not: Delta answers
a ``txnAppId`` from the table's snapshot state, a Spark job per append that nothing else in the
batch needs; an append looks for its commit in the table's latest commits instead, and only
when the batch may have run before (``BatchCommit.replay_possible``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession

from streaming.storage.log import recent_commits
from streaming.storage.retry import on_conflict_retry

__all__ = [
    "HISTORY_WINDOW",
    "INSERTS_STEP",
    "RECENT_COMMITS",
    "STEP_BITS",
    "BatchCommit",
    "append",
    "batch_commits",
    "idempotent",
    "overwrite",
    "scan_commits",
    "session_conf",
    "step_order",
]


@dataclass(frozen=True)
class BatchCommit:
    """Identity of this batch's commits: Delta's idempotency keys and our commit metadata."""

    query: str
    batch_id: int
    at: datetime
    step: int = 0
    """The step of the batch (``core.steps``): a batch writes a table at most once per step."""
    replay_possible: bool = True
    """Whether some commits of this batch may exist already: the first batch a sink runs (Spark
    replays the last unfinished batch at a restart) or a batch id it runs again. False only when
    the same sink ran the batch before it to its end: then no commit of this one can exist."""

    def app_id(self, path: str) -> str:
        """Delta ``txnAppId`` of this query's commits to the table at ``path``."""
        return f"{self.query}:{path}"

    def inserts(self) -> BatchCommit:
        """The commit that appends a table's new keys after this step's MERGE of it
        (``apply._write_current``): step ``step | INSERTS_STEP``. A number of its own rather
        than the timeline's next step, so the steps of everything else keep the numbers they
        had when new keys were part of the MERGE — a batch that a job of that version left
        unfinished is replayed with the same steps."""
        return replace(self, step=self.step | INSERTS_STEP)

    @property
    def txn_version(self) -> int:
        """Delta ``txnVersion``: grows with (batch id, step), so Delta skips a replayed commit."""
        return (self.batch_id << STEP_BITS) | self.step

    def metadata(self) -> str:
        return json.dumps(
            {
                "cdc": self.query,
                "batchId": self.batch_id,
                "step": self.step,
                "at": self.at.isoformat(),
            }
        )


STEP_BITS = 20
"""Up to 2**20 steps per batch."""
INSERTS_STEP = 1 << (STEP_BITS - 1)
"""Marks the step of a table's new-key append (``BatchCommit.inserts``); the timeline's own
steps stay below it."""


def step_order(step: int) -> tuple[int, bool]:
    """Where a step falls in its batch: a new-key append right after the MERGE it belongs to."""
    return step & (INSERTS_STEP - 1), bool(step & INSERTS_STEP)


@contextmanager
def session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """``settings`` in the session's conf within the block; afterwards each key as it was
    before (unset if it was not set)."""
    saved = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


@contextmanager
def idempotent(spark: SparkSession, path: str, commit: BatchCommit) -> Iterator[None]:
    """Within the block, Delta DML on ``path`` (MERGE, UPDATE, ...) is idempotent per batch id."""
    conf = {
        "spark.databricks.delta.write.txnAppId": commit.app_id(path),
        "spark.databricks.delta.write.txnVersion": str(commit.txn_version),
        "spark.databricks.delta.commitInfo.userMetadata": commit.metadata(),
    }
    with session_conf(spark, conf):
        yield


HISTORY_WINDOW = 200
"""The most commits ``batch_commits`` reads back from a table's latest version."""
RECENT_COMMITS = 10
"""What it reads first: usually enough to see the query's previous batch, which ends the search."""


def batch_commits(
    spark: SparkSession, path: str, query: str, batch_id: int
) -> dict[int, tuple[int, datetime]]:
    """step → (version, commit time) of this query's commits of ``batch_id`` to the table at
    ``path``: present when the batch is being replayed after a crash. Reads the latest
    ``RECENT_COMMITS`` commits, and up to ``HISTORY_WINDOW`` only when those do not settle it
    (each commit is a file to read: on object storage a request per commit per table per
    batch). The files are read on the driver through Delta's log store: no Spark job."""
    found: dict[int, tuple[int, datetime]] = {}
    for limit in (RECENT_COMMITS, HISTORY_WINDOW):
        commits = recent_commits(spark, path, limit)
        found, settled = scan_commits(commits, query, batch_id)
        if settled or len(commits) < limit:  # or the whole log is read
            break
    return found


def scan_commits(
    commits: Iterable[tuple[int, str | None]], query: str, batch_id: int
) -> tuple[dict[int, tuple[int, datetime]], bool]:
    """Of (version, userMetadata) pairs of the latest commits of a table: step → (version,
    commit time) of ``query``'s commits of ``batch_id``, and whether that is all of them — true
    once a commit of an earlier batch of the query is among them (batches commit in order, so
    every commit of this batch is newer than it, hence among the latest ones read)."""
    found: dict[int, tuple[int, datetime]] = {}
    settled = False
    for version, text in commits:
        if text is None:  # a commit without user metadata: not the job's
            continue
        try:
            meta = json.loads(text)
        except (TypeError, ValueError):
            continue
        if not isinstance(meta, dict) or meta.get("cdc") != query:
            continue
        seen = meta.get("batchId")
        if seen == batch_id:
            step = int(meta.get("step", 0))
            found[step] = (version, datetime.fromisoformat(meta["at"]))
        elif isinstance(seen, int) and seen < batch_id:
            settled = True
    return found, settled


def overwrite(df: DataFrame, path: str, commit: BatchCommit) -> bool:
    """Overwrite the Delta table at ``path`` with ``df`` once per (query, batch, step), as
    ``append`` appends. Whether it made the commit."""
    return _write(df, path, commit, "overwrite")


def append(df: DataFrame, path: str, commit: BatchCommit) -> bool:
    """Append ``df`` to the Delta table at ``path`` once per (query, batch, step): when the batch
    may be a replay, a commit already in the table's latest commits (``batch_commits``) is not
    made again. One Spark job (the write): an append with ``txnAppId`` would add one that
    rebuilds the table's snapshot state to look the id up. Whether it made the commit."""
    return _write(df, path, commit, "append")


def _write(df: DataFrame, path: str, commit: BatchCommit, mode: str) -> bool:
    if commit.replay_possible and commit.step in batch_commits(
        df.sparkSession, path, commit.query, commit.batch_id
    ):
        return False
    on_conflict_retry(
        lambda: (
            df.write.format("delta").mode(mode).option("userMetadata", commit.metadata()).save(path)
        ),
        what=path,
    )
    return True
