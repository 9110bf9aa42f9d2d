"""The foreachBatch sink: parse → validate → plan → apply segment by segment → ledger → outcomes.

Every step decides per transaction. The batch is cut into segments and waves (``core.steps``)
so that reads see earlier writes; each wave writes each of its tables once (tables in path
order, each commit idempotent per batch, step and checkpoint). A failure while applying a
segment restores the tables it changed and isolates the failing transaction (FAILED); the
outcomes are still recorded, so the stream goes on.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import defaultdict, deque
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Literal, TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from connectors.sources import passed_over_dms_files, to_raw_requests
from streaming.apply import records
from streaming.apply.objects import TableResult, append_history, apply_to_object_table
from streaming.apply.scd2 import merge_scd2
from streaming.core.batch import (
    Admitted,
    RawRequest,
    RequestDecoder,
    Verdict,
    decode_json_request,
    transaction_ids,
    triage,
)
from streaming.core.catalog import Dataset, SchemaDef
from streaming.core.changefeed import Decode, Feed
from streaming.core.config import StorageRetryConfig
from streaming.core.errors import (
    CdcError,
    FailedError,
    LeaseLost,
    RejectedError,
    StorageUnavailable,
)
from streaming.core.failures import (
    cause,
    memory_failure,
    retry_delay,
    storage_retry_line,
    storage_unavailable,
    store_trouble,
)
from streaming.core.faults import crash_point
from streaming.core.feedevents import Ready
from streaming.core.fold import EFFECTS, Effect
from streaming.core.layout import Layout, ObjectTable
from streaming.core.outcomes import Outcome, Status
from streaming.core.plan import Load, PlannedTransaction, plan_transaction
from streaming.core.requests import Operation
from streaming.core.results import batch_outcomes, with_scd2_versions
from streaming.core.steps import segments, waves
from streaming.inputs.changefeeds import ChangeFeeds, FeedBatch
from streaming.inputs.loads import Loaded, changes_only, load_wave
from streaming.inputs.reader import Reader
from streaming.platform import hadoop
from streaming.platform.exceptions import java_text
from streaming.platform.spark import unpersist
from streaming.runtime.lease import Lease
from streaming.runtime.metering import Cost, Meter
from streaming.runtime.metrics import Metrics
from streaming.runtime.parallel import Sessions
from streaming.runtime.sourcecolumns import SourceColumns
from streaming.runtime.stopping import (
    BatchGate,
    BatchInterrupted,
    StopRequested,
    interruption,
    stop_interrupt,
)
from streaming.runtime.upkeep import Upkeep
from streaming.storage import ledger, system
from streaming.storage.commits import BatchCommit
from streaming.storage.tables import read_table
from streaming.storage.timeline import Timeline
from streaming.storage.tombstones import DeletedKeys

__all__ = ["Applied", "Publisher", "Sink"]

R = TypeVar("R")
log = logging.getLogger(__name__)

Publisher = Callable[[Sequence[Outcome]], None]


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Sink:
    spark: SparkSession
    datasets: Mapping[str, Dataset]
    layout: Layout
    base_dir: str
    allowed_locations: list[str]
    shuffle_partitions: int = 4
    dms_zone: str | None = None
    publish: Publisher | None = None
    decode: RequestDecoder = decode_json_request
    """Raw request → JSON-shaped value (Avro Kafka records with ``kafka.format: avro``)."""
    clock: Callable[[], datetime] = _now
    run_id: str | None = None
    """The streaming checkpoint's id (read from it at the first batch); None outside a query."""
    history: deque[dict[str, object]] = field(default_factory=lambda: deque(maxlen=100))
    """Progress of the last 100 batches (also logged)."""
    writers: int = 4
    """Tables written side by side (``streaming.runtime.parallel``)."""
    metrics: Metrics | None = None
    """Fed after every batch (``metrics.enabled``; ``streaming.runtime.metrics``)."""
    lease: Lease | None = None
    """The job's lease on its checkpoint, checked before every commit (``runtime.lease``);
    None: no fence (a sink outside a job)."""
    feeds: Sequence[Feed] = ()
    """The change feeds the query reads (``kafka.change_feeds``; ``core.changefeed``)."""
    decode_change: Decode | None = None
    """A change feed's key or value bytes → its value (JSON, or Avro with the registry)."""
    upkeep: Upkeep | None = None
    """Table upkeep after each batch (``upkeep:``; ``runtime.upkeep``); None: none."""
    storage_retry: StorageRetryConfig = field(default_factory=StorageRetryConfig)
    """How a batch failed by a store's trouble is retried (``storage_retry:``)."""
    changes: ChangeFeeds | None = field(default=None, init=False)
    """The change feeds' share of each batch (``inputs.changefeeds``); None without feeds."""
    sessions: Sessions = field(init=False)
    columns: SourceColumns = field(init=False)
    """The change feeds' new source columns (``schema_changes``; ``runtime.sourcecolumns``)."""
    gate: BatchGate = field(default_factory=BatchGate, init=False)
    """Whether a batch runs now; closed by a stopping job (``runtime.stopping``)."""
    deleted: DeletedKeys = field(default_factory=DeletedKeys, init=False)
    """Small tombstones tables held on the driver between batches (``storage.tombstones``)."""
    committed_ids: ledger.HeldIds = field(default_factory=ledger.HeldIds, init=False)
    """The ledger's ids held on the driver between batches (``ledger.HeldIds``)."""
    refusal: Callable[[BaseException], CdcError | None] | None = None
    """The coded error a failure of a batch stands for, if any (the job's Kafka clients refused:
    ``connectors.kafka_check.refusal_in``)."""
    failure: CdcError | None = field(default=None, init=False)
    """The coded error that failed the last failed batch (e.g. ``KAFKA_AUTH_FAILED`` while
    publishing its outcomes)."""
    _finished: int | None = field(default=None, init=False)
    """The last batch this sink ran to its end (``replay_possible``)."""
    _touched: set[str] = field(default_factory=set, init=False)
    """The tables the last batch may have written (upkeep looks at them)."""
    _feed_batch: FeedBatch | None = field(default=None, init=False)
    """The running batch's change feeds (their staged rows are read by its waves)."""
    _held: list[DataFrame] = field(default_factory=list, init=False)
    """The batch's cached frames — its change feeds' decoded and staged events
    (``inputs.changefeeds``), its change rows (``loads.load_wave``) — unpersisted when it ends:
    history is appended after every wave, and a first load's is computed from them."""

    def __post_init__(self) -> None:
        self.sessions = Sessions(self.spark, self.writers)
        self.columns = SourceColumns(self.spark, self.layout)
        if self.feeds:
            assert self.decode_change is not None
            self.changes = ChangeFeeds(self.spark, self.feeds, self.decode_change, self.layout)
        if self.upkeep is not None:
            self.upkeep.moved = self._upkept
            self.upkeep.reraise = lambda e: interruption(e) is not None

    # -- the foreachBatch entry point ------------------------------------------------------
    def __call__(self, df: DataFrame, batch_id: int) -> None:
        try:
            self.gate.enter(batch_id)
        except StopRequested as refused:
            log.info(
                "batch %s not started: the job is stopping (replayed at the next start)", batch_id
            )
            interrupted = stop_interrupt(self.spark)
            if interrupted is not None:
                refused.args = (f"{refused.args[0]}; interrupted by the stop: {interrupted}",)
            raise refused from None
        done = False
        started = time.monotonic()
        lost: LeaseLost | None = None
        try:
            if self.run_id is None:
                self.run_id = _checkpoint_id(self.spark, self.layout.checkpoint)
            raws, changes = self._run_retrying(df, batch_id)
            self._finished = batch_id
            done = True
            if self.metrics is not None:
                self.metrics.batch_finished(time.monotonic() - started)
            if self.upkeep is not None and (raws or changes):
                written, self._touched = self._touched, set()
                upkept = self.upkeep.after_batch(
                    written, fence=self._fence, stopping=lambda: self.gate.closed
                )
                if upkept and self.history and self.history[-1].get("batchId") == batch_id:
                    seconds = sum(task.seconds for task in upkept)
                    self.history[-1]["upkeepSeconds"] = round(seconds, 3)
        except LeaseLost as e:
            lost = e
        except CdcError as e:  # the query fails with it: ``Job.run`` ends with its code
            self.failure = e
            raise
        except Exception as e:
            interrupted = interruption(e)
            if interrupted is not None:  # the query's stop, not a failure: replayed at start
                log.info("batch %s: interrupted by the stop; replayed at the next start", batch_id)
                raise BatchInterrupted(batch_id, interrupted) from None
            coded = self.refusal(e) if self.refusal is not None else None
            if coded is None:
                raise
            self.failure = coded  # e.g. the broker refused Spark's Kafka source reading the batch
            raise coded from None
        finally:
            self.gate.leave(done=done)
        if lost is not None:
            # Out of the gate, the job's stop goes on: raised once it interrupts this thread, so
            # that Spark takes it for the stop (as a refused batch, above), not for a failure.
            log.info("batch %s stopped before its next commit: the lease was lost", batch_id)
            interrupted = stop_interrupt(self.spark)
            message = lost.message
            if interrupted is not None:
                message = f"{message}; interrupted by the stop: {interrupted}"
            raise LeaseLost(message) from None

    def _run_retrying(self, df: DataFrame, batch_id: int) -> tuple[list[RawRequest], bool]:
        """Read the batch's records and process them; a batch failed by a store's trouble
        (``core.failures.store_trouble``: not its data's fault) is run again from its records,
        as its replay after a restart would run it, after a wait that doubles each time
        (``storage_retry``), one line logged per retry. After the last attempt the batch fails
        with ``STORAGE_UNAVAILABLE``. Returns the batch's requests and whether it had change
        records."""
        policy = self.storage_retry
        first = time.monotonic()
        for attempt in range(1, policy.attempts + 1):
            try:
                return self._run(df, batch_id, replay=attempt > 1)
            except Exception as e:
                if isinstance(e, CdcError) and not isinstance(e, StorageUnavailable):
                    raise
                if interruption(e) is not None:
                    raise
                if self.refusal is not None and self.refusal(e) is not None:
                    raise  # the broker refused the job's credentials: KAFKA_AUTH_FAILED
                text = e.message if isinstance(e, StorageUnavailable) else java_text(e)
                what = store_trouble(text)
                if what is None:
                    raise
                if attempt == policy.attempts:
                    seconds = time.monotonic() - first
                    raise storage_unavailable(batch_id, attempt, seconds, text) from None
                delay = retry_delay(attempt, policy.first_delay_seconds, policy.max_delay_seconds)
                log.debug("batch %s: the store's error", batch_id, exc_info=True)
                log.warning(
                    "%s", storage_retry_line(batch_id, attempt, policy.attempts, cause(text), delay)
                )
                self._forget()
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _run(self, df: DataFrame, batch_id: int, *, replay: bool) -> tuple[list[RawRequest], bool]:
        """One attempt of the batch: its records read (``df``, again on a retry) and processed.
        Requests are collected; a change feed's records stay in Spark (``inputs.changefeeds``)."""
        kind = F.col("kind")
        rows = (df.where(kind != "changes") if self.feeds else df).collect()
        if self.dms_zone:  # a file of 0 bytes has no row: it gets one, and an outcome
            query = self.layout.query_name
            rows += passed_over_dms_files(self.spark, query, batch_id, rows, self.dms_zone)
        raws = to_raw_requests(rows, self.dms_zone)
        changes = df.where(kind == "changes") if self.feeds else None
        if changes is not None and changes.isEmpty():
            changes = None
        if raws or changes is not None:
            self.process(raws, batch_id, changes, replay=replay)
        return raws, changes is not None

    def _forget(self) -> None:
        """Drop what the sink holds on the driver between batches (the ledger's ids, the
        tombstones, the change feeds' waiting records) and the batch's cached rows: a failed
        attempt may have committed some of its writes, so the next attempt reads them all from
        the tables, as a new process replaying the batch would."""
        self._release()
        self.committed_ids = ledger.HeldIds(max_bytes=self.committed_ids.max_bytes)
        self.deleted = DeletedKeys(max_bytes=self.deleted.max_bytes)
        if self.changes is not None:
            self.changes.forget()

    def process(
        self,
        raws: Sequence[RawRequest],
        batch_id: int,
        changes: DataFrame | None = None,
        *,
        replay: bool = False,
    ) -> list[Outcome]:
        """Apply a batch's requests and change records (``kind, name, partition, offset,
        mtime, key, payload`` of the change feeds' topics); ``replay``: it may have run (in
        part) before in this process (a retried attempt), as it may after any restart."""
        started = time.monotonic()
        # Only a batch that follows the one this sink finished cannot have run before.
        replay_possible = replay or self._finished is None or batch_id != self._finished + 1
        clock = self.clock
        feeds: FeedBatch | None = None
        try:
            if self.changes is not None:
                # The batch's time first (a replay's is its first run's): a transaction given
                # up after ``max_wait`` is given up by the replay too.
                at = Timeline.open(
                    self.spark,
                    self.query_key,
                    batch_id,
                    [self.layout.pending, self.layout.ledger],
                    self.clock,
                    replay_possible=replay_possible,
                ).at
                clock = partial(_fixed, at)
                feeds = self._open_feeds(changes, batch_id, at, replay_possible=replay_possible)
                self._feed_batch = feeds
            return self._process(raws, batch_id, feeds, clock, started, replay_possible)
        finally:
            self._feed_batch = None
            if feeds is not None:
                feeds.release()

    def _process(
        self,
        raws: Sequence[RawRequest],
        batch_id: int,
        feeds: FeedBatch | None,
        clock: Callable[[], datetime],
        started: float,
        replay_possible: bool,
    ) -> list[Outcome]:
        verdicts = self._triage(raws, batch_id, feeds)
        admitted = [v for v in verdicts if isinstance(v, Admitted)]
        planned, rejected = self._plan(admitted, feeds)
        tables = {p for plan in planned for load in plan.loads for p in self._written(load)}
        timeline = Timeline.open(
            self.spark,
            self.query_key,
            batch_id,
            tables,
            clock,
            replay_possible=replay_possible,
        )
        written = [*tables, *self._histories(planned), *self._system]
        if feeds is not None:
            written.append(self.layout.pending)
        self._touched.update(written)
        meter = Meter.start(self.spark, written)
        applied = Applied()
        crash_point("before_first_commit")
        try:
            for segment in segments(planned):
                self._fence()
                self._apply_segment(segment, timeline, applied, rejected)
            crash_point("after_tables")
            self._fence()
            commit = timeline.commit()
            scd2, history = self._scd2(applied.history, commit)
            valid = [p for p in planned if p.request.transaction_id not in rejected]
            outcomes = batch_outcomes(
                verdicts, valid, rejected, applied.failed, applied.loads, commit.batch_id, commit.at
            )
            with_scd2_versions(outcomes, scd2)
            self._record(verdicts, outcomes, rejected, history, commit, feeds)
        finally:
            self._release()
        if feeds is not None:
            assert self.changes is not None
            self.changes.finished(feeds)
            self._snapshots_applied(feeds, batch_id)
            if self.metrics is not None:
                self.metrics.waiting(feeds.waiting())
        self._progress(batch_id, outcomes, applied, time.monotonic() - started, meter.stop())
        self._finished = batch_id
        return outcomes

    def _open_feeds(
        self, changes: DataFrame | None, batch_id: int, at: datetime, *, replay_possible: bool
    ) -> FeedBatch:
        """The change feeds' records (this batch's and those waiting) decoded and decided
        (``inputs.changefeeds``); the feeds' new source columns followed, by each feed's policy,
        before anything of the batch is applied."""
        assert self.changes is not None
        feeds = self.changes.open(
            changes,
            batch_id,
            at,
            query=self.query_key,
            replay_possible=replay_possible,
            committed=self._ledger_holds,
            cached=self._held,
        )
        for feed in self.feeds:
            shapes = feeds.shapes.get(feed.name, [])
            self.datasets = self.columns.follow(feed, self.datasets, shapes, batch_id)
        return feeds

    def _snapshots_applied(self, feeds: FeedBatch, batch_id: int) -> None:
        """Say (one line each) which feeds' initial snapshots this batch applied the end of, with
        the rows their tables hold now; set ``cdc_change_feed_snapshot_complete``."""
        before, after = feeds.snapshots
        for feed in self.feeds:
            if feed.name in after and feed.name not in before:
                tables = sorted(set(feed.tables.values()))
                rows = {
                    t: read_table(self.spark, self.layout.table(feed.dataset, t)).count()
                    for t in tables
                }
                log.info(
                    "feed %s: initial snapshot applied in batch %s (%s rows in tables %s)",
                    feed.name,
                    batch_id,
                    sum(rows.values()),
                    ", ".join(f"{t} {n}" for t, n in rows.items()),
                )
        if self.metrics is not None and after != before:
            self.metrics.snapshots(self.feeds, after)

    def _ledger_holds(self, ids: Sequence[str]) -> Collection[str]:
        """Which of ``ids`` the ledger holds (a source transaction a connector sent again)."""
        return ledger.committed(self.spark, self.layout.ledger, ids, self.committed_ids).keys()

    def _fence(self) -> None:
        """Before a commit: stop (``LeaseLost``) if another runner took the checkpoint."""
        if self.lease is not None:
            self.lease.check()

    @property
    def query_key(self) -> str:
        """Whose commits these are: the query name and the checkpoint's id. Batch ids start at 0
        again on a new checkpoint; the id keeps its commits apart from the old checkpoint's in
        Delta's idempotency keys (``txnAppId``) and in the commit metadata."""
        name = self.layout.query_name
        return f"{name}@{self.run_id}" if self.run_id else name

    # -- steps ----------------------------------------------------------------------------
    def _triage(
        self, raws: Sequence[RawRequest], batch_id: int, feeds: FeedBatch | None
    ) -> list[Verdict]:
        """The batch's requests parsed and sorted (``core.batch.triage``), then the change
        feeds' ready items (``FeedBatch.verdicts``): their ids looked up in the ledger at once."""
        ids = transaction_ids(raws, self.decode)
        items = [item.transaction_id for _, item in feeds.ready()] if feeds else []
        known = ledger.committed(self.spark, self.layout.ledger, [*ids, *items], self.committed_ids)
        verdicts = triage(raws, known, batch_id, self.decode, self.query_key)
        if feeds is not None:
            verdicts += feeds.verdicts(known, batch_id, self.query_key)
        return verdicts

    def _plan(
        self, admitted: Sequence[Admitted], feeds: FeedBatch | None = None
    ) -> tuple[list[PlannedTransaction], dict[str, RejectedError]]:
        """The admitted requests' loads, numbered in the batch's order; a change feed's items
        are planned from their staged counts (``FeedBatch.plan``), and their staged rows
        numbered by those loads (``FeedBatch.stage``)."""
        planned: list[PlannedTransaction] = []
        rejected: dict[str, RejectedError] = {}
        ordinal = 0
        exists = _path_kind(self.spark)
        items = feeds.ready_by_id() if feeds else {}
        staged: list[tuple[Ready, list[Load]]] = []
        for verdict in admitted:
            tid = verdict.request.transaction_id
            try:
                if verdict.raw.position.kind == "changes":
                    assert feeds is not None
                    item = items[tid]
                    loads = feeds.plan(item, ordinal, self.datasets, self.layout)
                    plan = PlannedTransaction(verdict.request, loads)
                    staged.append((item, loads))
                else:
                    plan = plan_transaction(
                        verdict.request,
                        first_ordinal=ordinal,
                        datasets=self.datasets,
                        layout=self.layout,
                        base_dir=self.base_dir,
                        allowed_locations=self.allowed_locations,
                        exists=exists,
                    )
            except RejectedError as e:
                rejected[tid] = e
                continue
            ordinal += len(plan.loads)
            planned.append(plan)
        if feeds is not None:
            feeds.stage(staged)
        return planned, rejected

    def _written(self, load: Load) -> list[str]:
        """Every table a load may write: an object's current and tombstone tables (its history
        is appended with the same commits), or the record / view table."""
        if load.schema.is_object:
            return list(self.layout.object_table(load.dataset, load.schema.name).restorable)
        return [load.writes]

    def _histories(self, planned: Sequence[PlannedTransaction]) -> set[str]:
        """The history (and SCD2) tables of the object tables the transactions write."""
        return {
            path
            for plan in planned
            for load in plan.loads
            if load.schema.is_object
            for path in self._object_table(load.dataset, load.schema).derived
        }

    def _object_table(self, dataset: str, schema: SchemaDef) -> ObjectTable:
        return self.layout.object_table(dataset, schema.name, scd2=schema.scd2 is not None)

    def _scd2(
        self,
        history: Sequence[tuple[TableResult, ObjectTable, BatchCommit]],
        commit: BatchCommit,
    ) -> tuple[dict[tuple[str, str], int], list[tuple[TableResult, ObjectTable, BatchCommit]]]:
        """One MERGE per SCD2 table of the batch's history rows (``apply.scd2``), before the
        ledger records its version: (dataset, schema) → the SCD2 table's version after it, and
        the history items still to append (``_record``).

        The MERGEs of SCD2 tables whose rows were all folded on the driver run side by side,
        each in a session of the pool (their sources are rows computed there), with the history
        appends (independent writes, once per batch each: none is left to ``_record``). The
        other MERGEs then one after the other, each through the session its rows come from (the
        MERGE's idempotency keys are that session's conf)."""
        parts: dict[str, list[TableResult]] = defaultdict(list)
        for result, paths, _ in history:
            if paths.scd2 is not None and result.history is not None:
                parts[paths.scd2].append(result)
        schemas = self._scd2_schemas
        on_driver = {p: all(r.on_driver for r in results) for p, results in parts.items()}

        def merge(spark: SparkSession, path: str) -> tuple[str, int]:
            rows = _union([r.history for r in parts[path] if r.history is not None])
            version = merge_scd2(
                spark if on_driver[path] else rows.sparkSession,
                rows,
                schemas[path][1],
                path,
                commit,
                on_driver=on_driver[path],
            )
            return path, version

        local = sorted(p for p, driver in on_driver.items() if driver)
        rest = list(history)
        done: list[tuple[str, int]] = []
        if local:
            tasks: list[Callable[[SparkSession], tuple[str, int] | None]] = [
                *(partial(_history, item=item) for item in rest),
                *(partial(merge, path=path) for path in local),
            ]
            done = [d for d in self.sessions.map(_call, tasks) if d is not None]
            rest = []
        done += [merge(self.spark, p) for p in sorted(set(parts) - set(local))]
        versions: dict[tuple[str, str], int] = {}
        for path, version in done:
            dataset, schema = schemas[path]
            versions[(dataset, schema.name)] = version
        return versions, rest

    @property
    def _scd2_schemas(self) -> dict[str, tuple[str, SchemaDef]]:
        """SCD2 table path → (dataset, schema)."""
        return {
            self.layout.scd2(name, schema.name): (name, schema)
            for name, dataset in self.datasets.items()
            for schema in dataset.object_schemas()
            if schema.scd2 is not None
        }

    @property
    def _system(self) -> tuple[str, ...]:
        return (self.layout.ledger, self.layout.outcomes, self.layout.quarantine)

    def _upkept(self, path: str, before: int, after: int) -> None:
        """Upkeep moved the table at ``path`` from ``before`` to ``after`` without changing a
        row: the copies held on the driver at ``before`` hold at ``after``."""
        if path == self.layout.ledger:
            self.committed_ids.moved(before, after)
        else:
            self.deleted.moved(path, before, after)

    def _reader(self, timeline: Timeline) -> Reader:
        return Reader(self.spark, self.layout, self.datasets, self.base_dir, timeline.version)

    def _load(
        self, loads: Sequence[Load], timeline: Timeline
    ) -> AbstractContextManager[tuple[list[Loaded], dict[str, RejectedError]]]:
        """Change rows of ``loads`` read at the timeline's versions, checked by one Spark job,
        cached until the batch ends (``_held``); the transactions whose data is wrong, with
        their error."""
        return load_wave(
            self.spark, loads, self._reader(timeline), held=self._held, staged=self._feed_batch
        )

    def _release(self, start: int = 0) -> None:
        """Unpersist the batch's cached frames from the ``start``-th on."""
        unpersist(self._held, start)

    def release(self) -> None:
        """Let go what a batch left cached: its release interrupted by the job's stop (called
        once the query has ended)."""
        self._release()

    def _apply_segment(
        self,
        segment: Sequence[PlannedTransaction],
        timeline: Timeline,
        applied: Applied,
        rejected: dict[str, RejectedError],
    ) -> None:
        """Apply one segment (``core.steps``) wave by wave, each table once per wave.

        Data that is wrong in the first wave rejects its transaction before anything is written.
        A transaction found wrong later (a later wave, a view's rows) is rejected after the
        segment's tables are restored, and the rest of the segment is applied again without it.
        Any other failure restores the segment and applies each of its transactions alone, so
        only the one that fails is FAILED. Steps keep counting up, so a retry never collides
        with the idempotency keys of what was restored, and a replay retries the same way."""
        live = [p for p in segment if p.request.transaction_id not in rejected]
        start: dict[str, int] = {}
        history: list[tuple[TableResult, ObjectTable, BatchCommit]] = []
        done: dict[int, tuple[dict[Effect, int], int]] = {}
        held = len(self._held)  # a failed attempt's cached rows: released before the retry
        try:
            for number, planned_wave in enumerate(waves([ld for p in live for ld in p.loads])):
                wave = [load for load in planned_wave if load.transaction_id not in rejected]
                with self._load(wave, timeline) as (loaded, bad):
                    if bad and number > 0:  # a later wave of a transaction that is alone
                        tid, error = next(iter(bad.items()))
                        raise _Rejected(tid, error)
                    rejected.update(bad)
                    wave = [load for load in wave if load.transaction_id not in bad]
                    for path in {p for load in wave for p in self._written(load)}:
                        start.setdefault(path, timeline.version(path))
                    self._apply_wave(wave, loaded, timeline, done, history)
        except _Rejected as e:
            log.warning("batch %s: %s rejected while applying: %s", timeline.batch_id, e.tid, e)
            self._release(held)
            timeline.restore(start)
            rejected[e.tid] = e.error
            rest = [p for p in live if p.request.transaction_id not in rejected]
            if rest:
                self._apply_segment(rest, timeline, applied, rejected)
            return
        except Exception as e:
            if interruption(e) is not None or _store_trouble(e):
                # The query is stopping, or a store failed (``core.failures.store_trouble``: not
                # the transactions' fault, the batch is retried): the batch ends here as a crash
                # would, its commits kept for the replay to find and go on from (a restore would
                # undo a commit whose idempotency key the replay then skips: its changes would be
                # lost).
                self._release(held)
                raise
            memory = memory_failure(java_text(e))
            if memory is not None:
                # A JVM out of memory: not the transactions' fault (isolating them one by one
                # would meet it again, each marked FAILED). The batch fails as a crash would,
                # its commits kept for the replay; the job stops with OUT_OF_MEMORY.
                self._release(held)
                raise memory from e
            log.exception("batch %s: a segment failed; restoring %s", timeline.batch_id, start)
            self._release(held)
            timeline.restore(start)
            if len(live) > 1:  # isolate the failing transaction
                for plan in live:
                    self._apply_segment([plan], timeline, applied, rejected)
                return
            failure = e if isinstance(e, CdcError) else FailedError(f"{type(e).__name__}: {e}")
            for plan in live:
                applied.failed[plan.request.transaction_id] = failure
            return
        # History is append-only, never restored: its rows are appended once the batch's tables
        # are all written (``_scd2``, ``_record``). A failure there fails the batch; its replay
        # appends them.
        applied.history.extend(history)
        applied.loads.update(done)

    def _apply_wave(
        self,
        wave: Sequence[Load],
        loaded: Sequence[Loaded],
        timeline: Timeline,
        done: dict[int, tuple[dict[Effect, int], int]],
        history: list[tuple[TableResult, ObjectTable, BatchCommit]],
    ) -> None:
        """Write each table of the wave once (in path order), one step each."""

        def rows(loads: Sequence[Load]) -> DataFrame:
            wanted = {load.ordinal for load in loads}
            return _union(
                [
                    changes_only(part.frame)
                    for part in loaded
                    if any(load.ordinal in wanted for load in part.loads)
                ]
            )

        known = next((part.counts for part in loaded if part.counts is not None), None)

        def count(loads: Sequence[Load]) -> int | None:
            if known is None or any(load.ordinal not in known for load in loads):
                return None
            return sum(known[load.ordinal].rows for load in loads)

        def unique(loads: Sequence[Load]) -> bool:
            """No key has two changes: one load, none of its ids repeated."""
            return len(loads) == 1 and known is not None and known[loads[0].ordinal].repeated == 0

        by_table: dict[str, list[Load]] = defaultdict(list)
        for load in wave:
            by_table[load.writes].append(load)
        # Object tables first, side by side: each its own step (numbered in path order, so a
        # replay numbers them alike), folded and written in a session of its own.
        objects = [
            _TableWrite(
                loads,
                paths := self._object_table(loads[0].dataset, loads[0].schema),
                {p: timeline.version(p) for p in paths.restorable},
                step := timeline.next_step(),
                step.inserts(),
                rows(loads),
                count(loads),
                unique(loads),
            )
            for _, loads in sorted(by_table.items())
            if loads[0].schema.is_object
        ]

        def apply(spark: SparkSession, write: _TableWrite) -> TableResult:
            return apply_to_object_table(
                spark,
                changes=write.changes,
                schema=write.loads[0].schema,
                paths=write.paths,
                before=write.before,
                commit=write.commit,
                inserts=write.inserts,
                partitions=self.shuffle_partitions,
                count=write.count,
                unique=write.unique,
                deleted=self.deleted,
            )

        for write, result in zip(objects, self.sessions.map(apply, objects), strict=True):
            timeline.wrote(write.paths.tombstones, write.commit)
            timeline.wrote(write.paths.current, write.commit)
            version = timeline.wrote(write.paths.current, write.inserts)
            history.append((result, write.paths, write.commit))
            _count(done, write.loads, result.counts, version)
        reader = self._reader(timeline)
        for path, loads in sorted(by_table.items()):
            if loads[0].schema.is_object:
                continue
            for load in loads:  # record and view tables: one commit per operation
                if load.operation is Operation.INSERT_RECORD:
                    continue
                commit = timeline.next_step()
                try:
                    if load.operation is Operation.DELETE_RECORD:
                        counts = records.delete_records(self.spark, load, reader, commit)
                    else:
                        counts = records.refresh_view(self.spark, load, reader, commit)
                except RejectedError as e:
                    raise _Rejected(load.transaction_id, e) from e
                _count(done, [load], counts, timeline.wrote(path, commit))
            inserts = [load for load in loads if load.operation is Operation.INSERT_RECORD]
            if inserts:
                commit = timeline.next_step()
                changes = rows(inserts)
                counts = records.insert_records(self.spark, changes, path, commit)
                _count(done, inserts, counts, timeline.wrote(path, commit))

    def _record(
        self,
        verdicts: Sequence[Verdict],
        outcomes: Sequence[Outcome],
        rejected: Mapping[str, RejectedError],
        history: Sequence[tuple[TableResult, ObjectTable, BatchCommit]],
        commit: BatchCommit,
        feeds: FeedBatch | None = None,
    ) -> None:
        """The batch's appends, side by side: history (what ``_scd2`` left), ledger and
        quarantine (a change feed's rejected items with their records,
        ``FeedBatch.quarantine``), the waiting change records; then the outcomes table, then the
        outcomes topic. Each is made once per batch (``tables.append``), so a batch that dies
        between them is finished by its replay."""
        hashes = [v.content_hash if isinstance(v, Admitted) else "" for v in verdicts]
        items = feeds.ready_by_id() if feeds else {}
        bad: list[tuple[RawRequest, str | None, CdcError]] = []
        bad_items: list[tuple[Ready, RawRequest, RejectedError]] = []
        for verdict, outcome in zip(verdicts, outcomes, strict=True):
            if outcome.status is Status.REJECTED and outcome.error is not None:
                error = RejectedError(outcome.error.message, code=outcome.error.code)
                raw = verdict.raw
                if raw.position.kind == "changes":  # kept with its records
                    bad_items.append((items[outcome.transaction_id or ""], raw, error))
                else:
                    bad.append((raw, outcome.transaction_id, error))
        kept = feeds.quarantine(bad_items, commit.batch_id) if feeds else None
        writes: list[Callable[[SparkSession], None]] = [
            *(partial(_history, item=item) for item in history),
            partial(
                ledger.record,
                path=self.layout.ledger,
                entries=list(zip(outcomes, hashes, strict=True)),
                commit=commit,
                held=self.committed_ids,
            ),
            partial(
                system.quarantine,
                path=self.layout.quarantine,
                items=bad,
                commit=commit,
                more=kept,
            ),
        ]
        if feeds is not None:
            writes.append(partial(_pending, feeds=feeds, path=self.layout.pending, commit=commit))
        self.sessions.map(_call, writes)
        crash_point("after_ledger")
        self._fence()
        system.write_outcomes(self.spark, self.layout.outcomes, outcomes, commit)
        crash_point("mid_outcomes")
        if self.publish is not None:
            self.publish(outcomes)

    def _progress(
        self,
        batch_id: int,
        outcomes: Sequence[Outcome],
        applied: Applied,
        seconds: float,
        cost: Cost,
    ) -> None:
        by_status: dict[str, int] = defaultdict(int)
        for o in outcomes:
            by_status[o.status.value] += 1
            if o.status is Status.REJECTED and o.error is not None:  # one line each, no trace
                log.warning(
                    "batch %s: %s from %s REJECTED [%s]: %s",
                    batch_id,
                    o.transaction_id or "a request",
                    o.source,
                    o.error.code,
                    o.error.message,
                )
        written = ("inserted", "updated", "deleted")
        rows = sum(
            n for counts, _ in applied.loads.values() for e, n in counts.items() if e in written
        )
        tables = len({v for o in outcomes for v in o.table_versions})
        entry: dict[str, object] = {
            "batchId": batch_id,
            "transactions": len(outcomes),
            **by_status,
            "rowsChanged": rows,
            "tables": tables,
            "deltaCommits": cost.commits,
            "sparkJobs": cost.jobs,
            "seconds": round(seconds, 3),
        }
        self.history.append(entry)
        if self.metrics is not None:
            self.metrics.batch(outcomes, spark_jobs=cost.jobs, delta_commits=cost.commits)
        log.info(
            "batch %s: %s transactions (%s), %s rows changed in %s tables, "
            "%s Delta commits, %s Spark jobs, %.2fs",
            batch_id,
            len(outcomes),
            ", ".join(f"{k} {v}" for k, v in sorted(by_status.items())),
            rows,
            tables,
            cost.commits,
            cost.jobs,
            seconds,
        )


def _fixed(at: datetime) -> datetime:
    return at


class _Rejected(Exception):
    """A transaction found wrong while its segment was being applied."""

    def __init__(self, tid: str, error: RejectedError) -> None:
        super().__init__(error.message)
        self.tid, self.error = tid, error


@dataclass(frozen=True)
class _TableWrite:
    """One object table's share of a wave: its loads, tables, versions before, steps, rows."""

    loads: list[Load]
    paths: ObjectTable
    before: dict[str, int]
    commit: BatchCommit
    """The step of its MERGE, its tombstones and (later) its history."""
    inserts: BatchCommit
    """The step of the append of its new keys to the current table (``apply``)."""
    changes: DataFrame
    count: int | None
    """Its number of change rows (the check job's count), None if unknown."""
    unique: bool
    """No key has two changes (the check job's count of repeated ids)."""


@dataclass
class Applied:
    """What a batch's segments did: per load ordinal its counts and the table version after it;
    the transactions that failed, with the error."""

    loads: dict[int, tuple[dict[Effect, int], int]] = field(default_factory=dict)
    failed: dict[str, CdcError] = field(default_factory=dict)
    history: list[tuple[TableResult, ObjectTable, BatchCommit]] = field(default_factory=list)
    """The history rows of the segments applied, appended with the SCD2 MERGEs or the ledger
    (``Sink._scd2``, ``Sink._record``)."""


def _count(
    done: dict[int, tuple[dict[Effect, int], int]],
    loads: Sequence[Load],
    counts: Mapping[tuple[int, Effect], int],
    version: int,
) -> None:
    for load in loads:
        done[load.ordinal] = ({e: counts.get((load.ordinal, e), 0) for e in EFFECTS}, version)


def _call(spark: SparkSession, write: Callable[[SparkSession], R]) -> R:
    return write(spark)


def _pending(_: SparkSession, feeds: FeedBatch, path: str, commit: BatchCommit) -> None:
    feeds.write_pending(path, commit)


def _history(_: SparkSession, item: tuple[TableResult, ObjectTable, BatchCommit]) -> None:
    append_history(*item)


def _union(frames: Sequence[DataFrame]) -> DataFrame:
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out


def _store_trouble(error: BaseException) -> bool:
    """Whether ``error`` says a store did not answer or refused a request (its Java causes
    included): the batch fails and is retried (``Sink._run_retrying``)."""
    if isinstance(error, StorageUnavailable):
        return True
    if isinstance(error, CdcError):
        return False
    return store_trouble(java_text(error)) is not None


def _checkpoint_id(spark: SparkSession, checkpoint: str) -> str:
    """The id Spark gave the query's checkpoint (``<checkpoint>/metadata``): new for a new
    checkpoint, the same across restarts. Read on the driver (Hadoop's file system: local paths
    and s3a:// alike), not with a Spark job."""
    line = hadoop.first_line(spark, f"{checkpoint.rstrip('/')}/metadata")
    assert line, f"no metadata in the checkpoint {checkpoint}"
    return str(json.loads(str(line))["id"])


def _path_kind(spark: SparkSession) -> Callable[[str], Literal["dir", "file"] | None]:
    """Whether a path is a directory, a file or absent: local paths and Hadoop URIs (s3a://)."""

    def kind(path: str) -> Literal["dir", "file"] | None:
        if "://" not in path:
            if os.path.isdir(path):
                return "dir"
            return "file" if os.path.isfile(path) else None
        return hadoop.kind(spark, path)

    return kind
