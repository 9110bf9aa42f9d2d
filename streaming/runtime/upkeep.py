"""Table upkeep run by the job itself, after a micro-batch's outcomes (``upkeep:``).

The sink calls ``Upkeep.after_batch`` once a batch is committed, recorded and published: outside
the batch's exactly-once window (a crash here leaves a finished batch, which Spark's replay
recognises by its commits and skips), on the batch's thread (so no upkeep commit races the
job's own writes) and inside its stop gate (a clean stop waits for the task that runs, and no
new one starts once the stop is asked). What is due comes from ``core.upkeep``: compaction
(OPTIMIZE) of tables with many small files, current tables clustered by id when their files'
ranges overlap, VACUUM every ``vacuum_every``, and the retention properties on tables that lack
them. Tasks run one at a time, most pressing first, until the batch's upkeep ``budget`` is
spent; each commit is retried on a conflict (``storage.retry``); a failed task is logged and
counted, never fails the batch (its commits are made) — the next batch tries again.

A tombstones table is pruned when it is compacted: rows of keys live again and rows below a
key's latest version go (``storage.tombstones.prune``: what the job reads of it is unchanged).

Upkeep commits carry no ``userMetadata`` of the job (the session conf that stamps the batch's
own commits is set only around them: ``storage.commits.idempotent``), so a replayed batch never
takes one for its own. OPTIMIZE and VACUUM change no rows; the copies of tables the sink holds
on the driver (the ledger's ids, small tombstones tables) are moved to the new version
(``moved``) instead of being read again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from pyspark.sql import SparkSession

from streaming.core.config import UpkeepConfig
from streaming.core.faults import crash_point
from streaming.core.upkeep import Policy, TableFiles, Task, due, overlap_depth
from streaming.runtime.metrics import Metrics
from streaming.storage.log import (
    commit_operations,
    held_files,
    id_ranges,
    latest_version,
    table_state,
)
from streaming.storage.maintain import compact, vacuum
from streaming.storage.tombstones import prune

__all__ = ["RETRY_AFTER", "UPKEEP_OPERATIONS", "Done", "Result", "Upkeep", "retention_properties"]

log = logging.getLogger(__name__)

Result = Literal["done", "failed"]

UPKEEP_OPERATIONS = frozenset(
    {"OPTIMIZE", "REORG", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES"}
)
"""Delta's names of the operations upkeep commits: none changes a row."""


RETRY_AFTER = 600
"""Seconds before a task that failed on a table is tried again (a lasting failure — a
permission, a corrupt file — logs a line every ten minutes, not every batch)."""


def _first_line(error: BaseException) -> str:
    text = str(error)
    return text.splitlines()[0] if text else ""


def retention_properties(seconds: int) -> dict[str, str]:
    """The table properties that keep ``seconds`` of time travel: Delta's log (cleaned at its
    checkpoints) and the files removed from the table (VACUUM)."""
    interval = f"interval {seconds} seconds"
    return {
        "delta.logRetentionDuration": interval,
        "delta.deletedFileRetentionDuration": interval,
    }


@dataclass(frozen=True)
class Done:
    """A task that ran: what it did, its result, how long it took, the live files before and
    after (when Delta's checksum tells)."""

    task: Task
    result: Result
    seconds: float
    files_before: int | None
    files_after: int | None
    detail: str = ""


@dataclass
class Upkeep:
    spark: SparkSession
    config: UpkeepConfig
    current: Collection[str]
    """The current tables (MERGEd by id): clustered, written at ``current_file_mib``."""
    current_file_mib: int
    tombstones: Mapping[str, str] = field(default_factory=dict)
    """Tombstones table → its current table: pruned when compacted (``tombstones.prune``)."""
    root: str = ""
    """The warehouse: table names in logs and metrics are relative to it."""
    metrics: Metrics | None = None
    moved: Callable[[str, int, int], None] = lambda path, before, after: None
    """Told when a task moved a table from version ``before`` to ``after`` without changing its
    rows (the sink's held copies follow)."""
    reraise: Callable[[BaseException], bool] = lambda error: False
    """Whether a task's error ends the upkeep and goes up (the query's stop interrupting it)
    rather than being logged as the task's failure."""
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    _seen: set[str] = field(default_factory=set, init=False)
    _vacuumed: dict[str, float] = field(default_factory=dict, init=False)
    _unchecked: set[str] = field(default_factory=set, init=False)
    _retention_unset: set[str] = field(default_factory=set, init=False)
    _failed: dict[tuple[str, str], float] = field(default_factory=dict, init=False)
    """(table, action) → when it last failed: tried again ``RETRY_AFTER`` later."""

    @property
    def policy(self) -> Policy:
        return Policy(
            compact_files=self.config.compact_files,
            small_bytes=self.config.small_file_mib * 2**20,
            order_depth=self.config.order_depth,
            vacuum_every=self.config.vacuum_every_seconds,
        )

    def after_batch(
        self,
        written: Iterable[str],
        *,
        fence: Callable[[], None] = lambda: None,
        stopping: Callable[[], bool] = lambda: False,
    ) -> list[Done]:
        """Upkeep after a batch that wrote the tables ``written``: the tasks due among every
        table seen since the job started, until the budget is spent or a stop is asked.
        ``fence`` is called before each task (the lease: ``LeaseLost`` ends the upkeep)."""
        if not self.config.enabled:
            return []
        now = self.wall()
        try:
            for path in written:
                if path not in self._seen:
                    if self._retention_missing(path):
                        self._retention_unset.add(path)
                    self._seen.add(path)
                    self._vacuumed[path] = now
                    if self.config.cluster and path in self.current:
                        self._unchecked.add(path)
            states = self._states()
        except Exception as e:  # a batch whose work is done never fails here
            if self.reraise(e):
                raise
            log.warning(
                "upkeep: skipped after this batch, its tables could not be read (%s: %s)",
                type(e).__name__,
                _first_line(e),
            )
            return []
        tasks = [
            task
            for task in [
                *(Task(p, "retention", "not set") for p in sorted(self._retention_unset)),
                *due(
                    states.values(),
                    policy=self.policy,
                    now=now,
                    vacuumed=self._vacuumed,
                    unchecked=self._unchecked,
                ),
            ]
            if now - self._failed.get((task.path, task.action), -RETRY_AFTER) >= RETRY_AFTER
        ]
        started = self.clock()
        done: list[Done] = []
        for task in tasks:
            if done and self.clock() - started >= self.config.budget_seconds:
                break
            if stopping():
                break
            fence()
            done.append(self._run(task, states.get(task.path)))
            crash_point("mid_upkeep")
        if self.metrics is not None:
            after = self._states() if done else states
            files = {self._name(p): s.files for p, s in after.items()}
            self.metrics.upkeep([(d.task.action, d.result, d.seconds) for d in done], files)
        return done

    def _retention_missing(self, path: str) -> dict[str, str]:
        """The retention properties the table lacks (or has other values of), read from its
        log on the driver."""
        wanted = retention_properties(self.config.retention_seconds)
        state = table_state(self.spark, path)
        have = state[1] if state is not None else {}
        return {k: v for k, v in wanted.items() if have.get(k) != v}

    def _states(self) -> dict[str, TableFiles]:
        small = self.config.small_file_mib * 2**20
        states = {}
        for path in self._seen:
            held = held_files(self.spark, path, small)
            if held is not None:
                _, files, small_count = held
                states[path] = TableFiles(path, path in self.current, files, small_count)
        return states

    def _name(self, path: str) -> str:
        root = self.root.rstrip("/") + "/"
        return path[len(root) :] if self.root and path.startswith(root) else path

    def _run(self, task: Task, state: TableFiles | None) -> Done:
        started = self.clock()
        path = task.path
        try:
            before = latest_version(self.spark, path)
            detail = self._do(task, state)
            self._settle(task, path, before)
            after = held_files(self.spark, path, self.config.small_file_mib * 2**20)
        except Exception as e:
            if self.reraise(e):
                raise
            seconds = self.clock() - started
            self._failed[(path, task.action)] = self.wall()
            log.warning(
                "upkeep: %s of %s failed after %.2fs (%s: %s); tried again in %d minutes",
                task.action,
                self._name(path),
                seconds,
                type(e).__name__,
                _first_line(e),
                RETRY_AFTER // 60,
            )
            return Done(task, "failed", seconds, state.files if state else None, None, str(e))
        seconds = self.clock() - started
        files_after = after[1] if after is not None else None
        files_before = state.files if state else None
        log.info(
            "upkeep: %s of %s (%s)%s: files %s → %s, %.2fs",
            task.action,
            self._name(path),
            task.reason,
            f", {detail}" if detail else "",
            "?" if files_before is None else files_before,
            "?" if files_after is None else files_after,
            seconds,
        )
        return Done(task, "done", seconds, files_before, files_after, detail)

    def _do(self, task: Task, state: TableFiles | None) -> str:
        """Run one task; a few words on what it did."""
        spark, path = self.spark, task.path
        if task.action == "retention":
            missing = self._retention_missing(path)
            if not missing:
                return "already set"
            pairs = ", ".join(f"'{k}' = '{v}'" for k, v in missing.items())
            spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({pairs})")
            return f"set {', '.join(missing)}"
        if task.action == "vacuum":
            vacuum(spark, path, self.config.retention_hours)
            return f"retaining {self.config.retention}"
        if task.action == "compact":
            if path in self.tombstones:
                before, after = prune(spark, path, self.tombstones[path])
                if after < before:  # rewritten whole, in few files: nothing left to compact
                    return f"{before - after} superseded of {before} tombstones dropped"
            compact(spark, path, current=False, small_file_mib=self.config.small_file_mib)
            return ""
        # order, check: a current table clustered when its files' id ranges overlap (a table of
        # fewer files than order_depth cannot: no Spark job to read the ranges then)
        version = latest_version(spark, path)
        few = state is not None and state.files < self.config.order_depth
        ranges = None if few else id_ranges(spark, path, version)
        depth = overlap_depth(ranges) if ranges else 1
        cluster = self.config.cluster and depth >= self.config.order_depth
        if not cluster and task.action == "check":
            return f"in order (overlap depth {depth})"
        compact(spark, path, current=True, cluster=cluster, current_file_mib=self.current_file_mib)
        return f"{'clustered by id' if cluster else 'compacted'} (overlap depth {depth})"

    def _settle(self, task: Task, path: str, before: int) -> None:
        """After a task that ran: its table's bookkeeping, and the sink's held copies moved
        along when the task's commits were the only ones."""
        self._failed.pop((path, task.action), None)
        if task.action == "vacuum":
            self._vacuumed[path] = self.wall()
        if task.action == "retention":
            self._retention_unset.discard(path)
        if task.action in ("order", "check"):
            self._unchecked.discard(path)
        after = latest_version(self.spark, path)
        if after == before:
            return
        operations = commit_operations(self.spark, path, before + 1, after)
        if all(op in UPKEEP_OPERATIONS for op in operations):
            self.moved(path, before, after)
