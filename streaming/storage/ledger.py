"""The transaction ledger ``_system/transactions``: committed transactions, keyed by id, forever.

It is what makes a re-sent transaction DUPLICATE (same content) or REJECTED with
TRANSACTION_ID_REUSED (different content), and it records the table versions each transaction's
batch produced — the consistent read point for readers of several tables.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streaming.core.batch import Committed
from streaming.core.outcomes import Outcome, Status
from streaming.storage.commits import BatchCommit, append
from streaming.storage.log import known_size, latest_version
from streaming.storage.schemas import LEDGER_SCHEMA
from streaming.storage.tables import one_of, read_table

__all__ = ["MAX_HELD_BYTES", "HeldIds", "committed", "record"]

MAX_HELD_BYTES = 64 * 1024 * 1024
"""A ledger up to this size (Parquet bytes, from Delta's checksum) has its ids held on the
driver (``HeldIds``): some hundred thousand transactions, a few tens of MB of driver memory."""


@dataclass
class HeldIds:
    """The ledger's transaction ids held on the driver as of one version, so that a batch of
    new transactions (the usual case) is triaged without a Spark job: looking them up in the
    table costs a job per batch that reads every ledger file (ids are random: Delta's
    statistics skip none), after rebuilding the state of the version the last batch made.

    The ids are used only at exactly the version they are of: the sink's own append moves them
    along (``appended``); any other commit (another query sharing the ledger, ``cdc
    maintain``, a RESTORE) moves the table to a version they are not of, and they are read
    again — or, once the ledger is larger than ``max_bytes``, not held at all (each batch then
    looks its ids up in the table)."""

    max_bytes: int = MAX_HELD_BYTES
    version: int | None = None
    ids: set[str] = field(default_factory=set)
    asked: bool = False
    """Whether a batch asked before: the first batch of a process (``cdc run --once``, often
    its only one) looks its ids up instead of reading every id."""

    def at(self, spark: SparkSession, path: str, version: int) -> set[str] | None:
        """The ids of the ledger at ``version``; None when it is too large to hold, or at the
        first batch — unless the ledger is empty (a new deployment's first batch, Delta's
        checksum says so): then there is nothing to look up, and the empty set is held from
        here on, the sink's appends adding to it."""
        if self.version == version:
            return self.ids
        size = known_size(spark, path, version)
        if size == 0:
            self.asked = True
            self.version, self.ids = version, set()
            return self.ids
        if not self.asked:
            self.asked = True
            return None
        if size is None or size > self.max_bytes:
            self.forget()
            return None
        rows = read_table(spark, path, version).select("transaction_id").collect()
        self.version, self.ids = version, {r["transaction_id"] for r in rows}
        return self.ids

    def appended(
        self, before: int | None, after: int, ids: Iterable[str], size: int | None
    ) -> None:
        """The sink appended ``ids`` as the commit that moved the ledger from ``before`` to
        ``after`` (``size`` bytes now): held ids of ``before`` take them in when that was the
        only commit, and the ledger is still small enough."""
        if (
            self.version is None
            or before != self.version
            or after != before + 1
            or size is None
            or size > self.max_bytes
        ):
            self.forget()
            return
        self.ids.update(ids)
        self.version = after

    def moved(self, before: int, after: int) -> None:
        """Commits that change no row (upkeep's OPTIMIZE, VACUUM) moved the ledger from
        ``before`` to ``after``: ids held at ``before`` hold at ``after``."""
        if self.version == before:
            self.version = after

    def forget(self) -> None:
        self.version, self.ids = None, set()


def committed(
    spark: SparkSession, path: str, ids: Iterable[str], held: HeldIds | None = None
) -> dict[str, Committed]:
    """Ledger entries of the given transaction ids. With ``held``: ids it does not hold are not
    in the ledger, and only the others (a re-sent transaction) are looked up."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    version = None
    if held is not None:
        version = latest_version(spark, path)
        known = held.at(spark, path, version)
        if known is not None:
            wanted = [i for i in wanted if i in known]
            if not wanted:
                return {}
    rows = (
        read_table(spark, path, version)
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
    held: HeldIds | None = None,
) -> None:
    """Add COMMITTED transactions (outcome, content hash); idempotent for a replayed batch.
    ``held``: the ids the sink holds, moved along with this append."""
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
    before = held.version if held is not None else None
    # An append, not a MERGE: triage never admits a transaction the ledger already holds (a
    # replayed batch's own entries aside, and ``append`` does not make a replayed commit again).
    made = append(spark.createDataFrame(rows, LEDGER_SCHEMA), path, commit)
    # Not made (a replay's commit was there already): the held ids stay as they are, and are
    # read again at the next batch if the ledger's version moved.
    if held is not None and made:
        after = latest_version(spark, path)
        ids = [str(r[0]) for r in rows]
        held.appended(before, after, ids, known_size(spark, path, after))
