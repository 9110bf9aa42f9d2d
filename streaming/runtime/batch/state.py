"""What the sink keeps between batches (``SinkState``): the ids and tombstones held on the
driver, the change feeds' state, the datasets as their source columns grow, the last batches'
progress, the batch's cached frames, the last failure."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from pyspark.sql import DataFrame, SparkSession

from streaming.core.catalog import Dataset
from streaming.core.changefeed import Decode, Feed
from streaming.core.errors import CdcError
from streaming.core.layout import Layout
from streaming.inputs.changefeeds import ChangeFeeds
from streaming.platform import hadoop
from streaming.platform.spark import unpersist
from streaming.runtime.sourcecolumns import SourceColumns
from streaming.runtime.stopping import interruption
from streaming.runtime.upkeep import Upkeep
from streaming.storage import ledger
from streaming.storage.tombstones import DeletedKeys

__all__ = ["SinkState", "checkpoint_id"]


@dataclass
class SinkState:
    """The sink's long-lived state, which the batch's steps read and change."""

    datasets: Mapping[str, Dataset]
    """The datasets, with the change feeds' new source columns (``columns``) once followed."""
    columns: SourceColumns
    """The change feeds' new source columns (``schema_changes``; ``runtime.sourcecolumns``)."""
    changes: ChangeFeeds | None
    """The change feeds' share of each batch (``inputs.changefeeds``); None without feeds."""
    upkeep: Upkeep | None
    """Table upkeep after each batch (``upkeep:``; ``runtime.upkeep``); None: none."""
    history: deque[dict[str, object]]
    """Progress of the last 100 batches (also logged)."""
    run_id: str | None = None
    """The streaming checkpoint's id (read from it at the first batch); None outside a query."""
    committed_ids: ledger.HeldIds = field(default_factory=ledger.HeldIds)
    """The ledger's ids held on the driver between batches (``ledger.HeldIds``)."""
    deleted: DeletedKeys = field(default_factory=DeletedKeys)
    """Small tombstones tables held on the driver between batches (``storage.tombstones``)."""
    finished: int | None = None
    """The last batch this sink ran to its end (``replay_possible``)."""
    touched: set[str] = field(default_factory=set)
    """The tables the last batch may have written (upkeep looks at them)."""
    failure: CdcError | None = None
    """The coded error that failed the last failed batch (e.g. ``KAFKA_AUTH_FAILED`` while
    publishing its outcomes)."""
    held: list[DataFrame] = field(default_factory=list)
    """The batch's cached frames — its change feeds' decoded and staged events
    (``inputs.changefeeds``), its change rows (``loads.load_wave``) — unpersisted when it ends:
    history is appended after every wave, and a first load's is computed from them. One list
    for the sink's life: what a batch the job's stop interrupted left is released after the
    query has ended (``Sink.release``)."""

    @classmethod
    def start(
        cls,
        spark: SparkSession,
        layout: Layout,
        datasets: Mapping[str, Dataset],
        feeds: Sequence[Feed],
        decode_change: Decode | None,
        upkeep: Upkeep | None,
        history: deque[dict[str, object]] | None,
        run_id: str | None,
    ) -> SinkState:
        """A new sink's state: its change feeds' (``decode_change`` decodes their records); the
        upkeep told how to move the copies held on the driver along, and to let the job's stop
        through."""
        columns = SourceColumns(spark, layout)
        changes = None
        if feeds:
            assert decode_change is not None
            changes = ChangeFeeds(spark, feeds, decode_change, layout)
        history = deque(maxlen=100) if history is None else history
        state = cls(datasets, columns, changes, upkeep, history, run_id)
        if upkeep is not None:
            upkeep.moved = partial(state.upkept, layout.ledger)
            upkeep.reraise = lambda e: interruption(e) is not None
        return state

    def upkept(self, ledger_path: str, path: str, before: int, after: int) -> None:
        """Upkeep moved the table at ``path`` from ``before`` to ``after`` without changing a
        row: the copies held on the driver at ``before`` hold at ``after``."""
        if path == ledger_path:
            self.committed_ids.moved(before, after)
        else:
            self.deleted.moved(path, before, after)

    def release(self, start: int = 0) -> None:
        """Unpersist the batch's cached frames from the ``start``-th on."""
        unpersist(self.held, start)

    def forget(self) -> None:
        """Drop what the sink holds on the driver between batches (the ledger's ids, the
        tombstones, the change feeds' waiting records) and the batch's cached rows: a failed
        attempt may have committed some of its writes, so the next attempt reads them all from
        the tables, as a new process replaying the batch would."""
        self.release()
        self.committed_ids = ledger.HeldIds(max_bytes=self.committed_ids.max_bytes)
        self.deleted = DeletedKeys(max_bytes=self.deleted.max_bytes)
        if self.changes is not None:
            self.changes.forget()


def checkpoint_id(spark: SparkSession, checkpoint: str) -> str:
    """The id Spark gave the query's checkpoint (``<checkpoint>/metadata``): new for a new
    checkpoint, the same across restarts. Read on the driver (Hadoop's file system: local paths
    and s3a:// alike), not with a Spark job."""
    line = hadoop.first_line(spark, f"{checkpoint.rstrip('/')}/metadata")
    assert line, f"no metadata in the checkpoint {checkpoint}"
    return str(json.loads(str(line))["id"])
