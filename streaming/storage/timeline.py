"""A micro-batch's view of its tables' versions, step by step, the same on a replay.

The batch numbers its writes in steps (``core.steps``). Each table is read at the version it had
after the batch's earlier steps — never at "latest", which on a replay after a crash already holds
this batch's later commits. On a replay the batch's commits are found by their metadata, so a
step that was committed is recognised (Delta skips its write) and the commit time is the original
one: the replay computes exactly the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from streaming.storage.commits import BatchCommit, batch_commits, step_order
from streaming.storage.log import latest_version

__all__ = ["Timeline"]


@dataclass
class Timeline:
    spark: SparkSession
    query: str
    batch_id: int
    at: datetime
    commits: dict[str, dict[int, tuple[int, datetime]]]
    """table path → this batch's earlier commits to it (step → version, time)."""
    current: dict[str, int] = field(default_factory=dict)
    step: int = 0
    replay_possible: bool = True
    """See ``BatchCommit.replay_possible``: without it no table is searched for earlier commits."""

    @classmethod
    def open(
        cls,
        spark: SparkSession,
        query: str,
        batch_id: int,
        paths: Iterable[str],
        clock: Callable[[], datetime],
        *,
        replay_possible: bool = True,
    ) -> Timeline:
        """The timeline of ``batch_id`` over the tables it may write (``paths``): their commits
        of this batch so far, read from their logs when the batch may be a replay."""
        commits = (
            {path: batch_commits(spark, path, query, batch_id) for path in sorted(set(paths))}
            if replay_possible
            else {}
        )
        found = [at for steps in commits.values() for _, at in steps.values()]
        at = found[0] if found else clock()
        return cls(spark, query, batch_id, at, commits, replay_possible=replay_possible)

    def commit(self) -> BatchCommit:
        """The batch's commit identity for writes outside its steps (ledger, outcomes)."""
        return BatchCommit(self.query, self.batch_id, self.at, 0, self.replay_possible)

    @property
    def replayed(self) -> bool:
        return any(self.commits.values())

    def version(self, path: str) -> int:
        """The version to read ``path`` at now."""
        if path not in self.current:
            earlier = self.commits.get(path)
            if earlier:
                self.current[path] = min(v for v, _ in earlier.values()) - 1
            else:
                self.current[path] = latest_version(self.spark, path)
        return self.current[path]

    def next_step(self) -> BatchCommit:
        self.step += 1
        return BatchCommit(self.query, self.batch_id, self.at, self.step, self.replay_possible)

    def wrote(self, path: str, commit: BatchCommit) -> int:
        """Record that ``commit`` wrote (or, replayed, had written) ``path``; its version now.

        A step may commit nothing (nothing to write). On a replay, a step the table has no commit
        of while it has a later step's leaves the table where the earlier steps left it: its
        latest version holds those later steps, which this replay has yet to reach."""
        earlier = self.commits.get(path, {})
        if commit.step in earlier:
            self.current[path] = earlier[commit.step][0]
        elif not any(step_order(step) > step_order(commit.step) for step in earlier):
            self.current[path] = latest_version(self.spark, path)
        return self.version(path)

    def restore(self, versions: dict[str, int]) -> None:
        """Put tables back to ``versions`` (a failed segment), and read them there from now on."""
        for path, version in versions.items():
            if latest_version(self.spark, path) != version:
                DeltaTable.forPath(self.spark, path).restoreToVersion(version)
            self.current[path] = version
