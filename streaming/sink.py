"""The foreachBatch sink: parse → validate → load & check → apply → ledger → outcomes.

Every step but ``apply`` and the records decides per transaction; ``apply`` writes each target
table once for the whole batch (tables in a fixed order, each commit idempotent per batch id).
A failure while applying restores the tables this batch changed and marks its transactions
FAILED; the outcomes are still recorded, so the stream goes on.
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from connectors.sources import to_raw_requests
from streaming import ledger, system
from streaming.apply import TableResult, append_history, apply_to_object_table
from streaming.catalog import Dataset, SchemaDef
from streaming.core.batch import Admitted, RawRequest, Refused, Repeated, Verdict, triage
from streaming.core.fold import EFFECTS
from streaming.errors import CdcError, FailedError, RejectedError
from streaming.layout import Layout, ObjectTable
from streaming.loads import changes_only, check_loads, load_changes
from streaming.outcomes import ActionOutcome, ErrorInfo, Outcome, Status
from streaming.plan import Load, PlannedTransaction, plan_transaction
from streaming.requests import salvage_transaction_id
from streaming.tables import BatchCommit, find_batch_commit, latest_version

log = logging.getLogger(__name__)

Publisher = Callable[[Sequence[Outcome]], None]


@dataclass
class Target:
    """One object schema's tables and the batch's changes to them."""

    paths: ObjectTable
    schema: SchemaDef
    changes: list[DataFrame] = field(default_factory=list)


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
    clock: Callable[[], datetime] = _now
    history: deque[dict[str, object]] = field(default_factory=lambda: deque(maxlen=100))
    """Progress of the last 100 batches (also logged)."""

    # -- the foreachBatch entry point ------------------------------------------------------
    def __call__(self, df: DataFrame, batch_id: int) -> None:
        raws = to_raw_requests(df.collect(), self.dms_zone)
        if raws:
            self.process(raws, batch_id)

    def process(self, raws: Sequence[RawRequest], batch_id: int) -> list[Outcome]:
        started = time.monotonic()
        verdicts = self._triage(raws, batch_id)
        admitted = [v for v in verdicts if isinstance(v, Admitted)]
        planned, rejected = self._plan(admitted)
        loaded, load_rejected = self._load(planned)
        rejected.update(load_rejected)
        valid = [p for p in planned if p.request.transaction_id not in rejected]
        targets = self._targets(valid, loaded)
        before, commit = self._resume(targets, batch_id)
        results, failure = self._apply(targets, before, commit)
        outcomes = self._outcomes(verdicts, valid, rejected, results, failure, commit)
        self._record(verdicts, outcomes, rejected, commit)
        self._progress(batch_id, outcomes, results, time.monotonic() - started)
        return outcomes

    # -- steps ----------------------------------------------------------------------------
    def _triage(self, raws: Sequence[RawRequest], batch_id: int) -> list[Verdict]:
        ids = {tid for raw in raws if (tid := salvage_transaction_id(raw.payload))}
        known = ledger.committed(self.spark, self.layout.ledger, ids)
        return triage(raws, known, batch_id)

    def _plan(
        self, admitted: Sequence[Admitted]
    ) -> tuple[list[PlannedTransaction], dict[str, RejectedError]]:
        planned: list[PlannedTransaction] = []
        rejected: dict[str, RejectedError] = {}
        ordinal = 0
        exists = _path_kind(self.spark)
        for item in admitted:
            try:
                plan = plan_transaction(
                    item.request,
                    first_ordinal=ordinal,
                    datasets=self.datasets,
                    base_dir=self.base_dir,
                    allowed_locations=self.allowed_locations,
                    exists=exists,
                )
            except RejectedError as e:
                rejected[item.request.transaction_id] = e
                continue
            ordinal += len(plan.loads)
            planned.append(plan)
        return planned, rejected

    def _load(
        self, planned: Sequence[PlannedTransaction]
    ) -> tuple[list[tuple[Load, DataFrame]], dict[str, RejectedError]]:
        loaded: list[tuple[Load, DataFrame]] = []
        rejected: dict[str, RejectedError] = {}
        for plan in planned:
            try:
                loaded.extend((load, load_changes(self.spark, load)) for load in plan.loads)
            except RejectedError as e:
                rejected[plan.request.transaction_id] = e
        for ordinal, error in check_loads(loaded).items():
            tid = next(load.transaction_id for load, _ in loaded if load.ordinal == ordinal)
            rejected.setdefault(tid, error)
        return [(load, df) for load, df in loaded if load.transaction_id not in rejected], rejected

    def _targets(
        self, valid: Sequence[PlannedTransaction], loaded: Sequence[tuple[Load, DataFrame]]
    ) -> dict[str, Target]:
        """The batch's changes per target table, keyed (and later written) by table path."""
        dataset_of = {p.request.transaction_id: p.request.dataset for p in valid}
        targets: dict[str, Target] = {}
        for load, df in loaded:
            paths = self.layout.object_table(dataset_of[load.transaction_id], load.schema.name)
            target = targets.setdefault(paths.current, Target(paths, load.schema))
            target.changes.append(changes_only(df))
        return dict(sorted(targets.items()))

    def _resume(
        self, targets: Mapping[str, Target], batch_id: int
    ) -> tuple[dict[str, int], BatchCommit]:
        """Each table's version before this batch, and the batch's commit time. A replayed batch
        (some tables already committed it) gets back its original versions and commit time, so
        it computes exactly the same rows again."""
        query = self.layout.query_name
        before: dict[str, int] = {}
        at: datetime | None = None
        for target in targets.values():
            for path in target.paths.restorable:
                done = find_batch_commit(self.spark, path, query, batch_id)
                if done is None:
                    before[path] = latest_version(self.spark, path)
                else:
                    before[path], at = done[0] - 1, done[1]
        return before, BatchCommit(query, batch_id, at or self.clock())

    def _apply(
        self, targets: Mapping[str, Target], before: Mapping[str, int], commit: BatchCommit
    ) -> tuple[dict[str, TableResult], CdcError | None]:
        """Write each target table once, in path order; on failure restore what was written."""
        results: dict[str, TableResult] = {}
        try:
            for current, target in targets.items():
                changes = target.changes[0]
                for part in target.changes[1:]:
                    changes = changes.unionByName(part)
                results[current] = apply_to_object_table(
                    self.spark,
                    changes=changes,
                    schema=target.schema,
                    paths=target.paths,
                    before=before,
                    commit=commit,
                    partitions=self.shuffle_partitions,
                )
        except Exception as e:  # roll back every table this batch changed, then report FAILED
            log.exception("batch %s: applying failed; restoring %s", commit.batch_id, list(before))
            for path, version in before.items():
                if latest_version(self.spark, path) != version:
                    DeltaTable.forPath(self.spark, path).restoreToVersion(version)
            error = e if isinstance(e, CdcError) else FailedError(f"{type(e).__name__}: {e}")
            return {}, error
        for current, result in results.items():
            append_history(result, targets[current].paths, commit)
        return results, None

    def _outcomes(
        self,
        verdicts: Sequence[Verdict],
        valid: Sequence[PlannedTransaction],
        rejected: Mapping[str, RejectedError],
        results: Mapping[str, TableResult],
        failure: CdcError | None,
        commit: BatchCommit,
    ) -> list[Outcome]:
        applied = {p.request.transaction_id: p for p in valid}
        first: dict[str, Outcome] = {}
        outcomes: list[Outcome] = []
        for verdict in verdicts:
            if isinstance(verdict, Refused):
                request = verdict.request
                outcome = _outcome(verdict.raw, commit, Status.REJECTED, verdict.error)
                outcome.transaction_id = verdict.transaction_id
                outcome.dataset = request.dataset if request else None
            elif isinstance(verdict, Repeated):
                outcome = _duplicate(verdict, first, commit)
            else:
                tid = verdict.request.transaction_id
                if tid in rejected:
                    outcome = _outcome(verdict.raw, commit, Status.REJECTED, rejected[tid])
                elif failure is not None:
                    outcome = _outcome(verdict.raw, commit, Status.FAILED, failure)
                else:
                    outcome = self._committed(verdict.raw, applied[tid], results, commit)
                outcome.transaction_id, outcome.dataset = tid, verdict.request.dataset
                first[tid] = outcome
            outcomes.append(outcome)
        return outcomes

    def _committed(
        self,
        raw: RawRequest,
        plan: PlannedTransaction,
        results: Mapping[str, TableResult],
        commit: BatchCommit,
    ) -> Outcome:
        outcome = _outcome(raw, commit, Status.COMMITTED)
        for load in plan.loads:
            path = self.layout.table(plan.request.dataset, load.schema.name)
            result = results[path]
            counts = {e: result.counts.get((load.ordinal, e), 0) for e in EFFECTS}
            outcome.actions.append(
                ActionOutcome(
                    index=load.action_index,
                    operation=load.operation.value,
                    target=load.schema.name,
                    **counts,
                )
            )
            outcome.table_versions[load.schema.name] = result.version
        outcome.committed_at = commit.at
        return outcome

    def _record(
        self,
        verdicts: Sequence[Verdict],
        outcomes: Sequence[Outcome],
        rejected: Mapping[str, RejectedError],
        commit: BatchCommit,
    ) -> None:
        hashes = [v.content_hash if isinstance(v, Admitted) else "" for v in verdicts]
        ledger.record(
            self.spark, self.layout.ledger, list(zip(outcomes, hashes, strict=True)), commit
        )
        bad: list[tuple[RawRequest, str | None, CdcError]] = []
        for verdict, outcome in zip(verdicts, outcomes, strict=True):
            if outcome.status is Status.REJECTED and outcome.error is not None:
                error = RejectedError(outcome.error.message, code=outcome.error.code)
                bad.append((verdict.raw, outcome.transaction_id, error))
        system.quarantine(self.spark, self.layout.quarantine, bad, commit)
        system.write_outcomes(self.spark, self.layout.outcomes, outcomes, commit)
        if self.publish is not None:
            self.publish(outcomes)

    def _progress(
        self,
        batch_id: int,
        outcomes: Sequence[Outcome],
        results: Mapping[str, TableResult],
        seconds: float,
    ) -> None:
        by_status: dict[str, int] = defaultdict(int)
        for o in outcomes:
            by_status[o.status.value] += 1
        written = ("inserted", "updated", "deleted")
        rows = sum(n for r in results.values() for (_, e), n in r.counts.items() if e in written)
        entry: dict[str, object] = {
            "batchId": batch_id,
            "transactions": len(outcomes),
            **by_status,
            "rowsChanged": rows,
            "tables": len(results),
            "seconds": round(seconds, 3),
        }
        self.history.append(entry)
        log.info(
            "batch %s: %s transactions (%s), %s rows changed in %s tables, %.2fs",
            batch_id,
            len(outcomes),
            ", ".join(f"{k} {v}" for k, v in sorted(by_status.items())),
            rows,
            len(results),
            seconds,
        )


def _outcome(
    raw: RawRequest, commit: BatchCommit, status: Status, error: CdcError | None = None
) -> Outcome:
    """An outcome of this batch for the request ``raw``, without transaction details yet."""
    return Outcome(
        transaction_id=None,
        status=status,
        error=ErrorInfo(code=error.code, message=error.message) if error else None,
        batch_id=commit.batch_id,
        source=str(raw.position),
        received_at=raw.received_at,
    )


def _duplicate(verdict: Repeated, first: Mapping[str, Outcome], commit: BatchCommit) -> Outcome:
    """A repeat: DUPLICATE of a committed original (its counts repeated), else the same fate."""
    tid = verdict.request.transaction_id
    original = Outcome.from_json(verdict.earlier.outcome_json) if verdict.earlier else first[tid]
    outcome = original.model_copy(deep=True)
    if original.status is Status.COMMITTED:
        outcome.status = Status.DUPLICATE
    outcome.batch_id = commit.batch_id
    outcome.source = str(verdict.raw.position)
    outcome.received_at = verdict.raw.received_at
    return outcome


def _path_kind(spark: SparkSession) -> Callable[[str], Literal["dir", "file"] | None]:
    """Whether a path is a directory, a file or absent: local paths and Hadoop URIs (s3a://)."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()

    def kind(path: str) -> Literal["dir", "file"] | None:
        if "://" not in path:
            if os.path.isdir(path):
                return "dir"
            return "file" if os.path.isfile(path) else None
        hpath = jvm.org.apache.hadoop.fs.Path(path)  # type: ignore[union-attr]
        fs = hpath.getFileSystem(conf)
        if not fs.exists(hpath):
            return None
        return "dir" if fs.getFileStatus(hpath).isDirectory() else "file"

    return kind
