"""A replayed batch's view of a table's versions, step by step (``streaming.timeline``), where a
step made no commit: a table's MERGE step when the batch only inserts, its insert step when it
only updates, and so on."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from pyspark.sql import SparkSession

from streaming.tables import BatchCommit
from streaming.timeline import Timeline

AT = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
PATH = "/warehouse/petstore/petstore/Dog"


class _NoSpark:
    """A replay reads the versions from the commits it found: asking Spark would be wrong."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the timeline asked Spark for {name}")


def replay(commits: dict[int, int]) -> Timeline:
    """Batch 7 replayed: ``commits`` are its earlier commits to PATH, step → version."""
    return Timeline(
        cast(SparkSession, _NoSpark()),
        "q@c1",
        7,
        AT,
        {PATH: {step: (version, AT) for step, version in commits.items()}},
    )


def step(number: int) -> BatchCommit:
    return BatchCommit("q@c1", 7, AT, number)


def test_a_step_without_a_commit_leaves_the_table_where_the_earlier_steps_left_it() -> None:
    """Steps 1 and 2 are one table's MERGE and insert append (the batch only updated it: no
    append), steps 3 and 4 a later segment's. The crash came after step 3: the table's latest
    version holds it, but the segment of steps 3-4 must read what step 1 left."""
    timeline = replay({1: 11, 3: 12})
    assert timeline.version(PATH) == 10  # before the batch
    assert timeline.wrote(PATH, step(1)) == 11
    assert timeline.wrote(PATH, step(2)) == 11  # no commit at step 2, and not 12
    assert timeline.version(PATH) == 11
    assert timeline.wrote(PATH, step(3)) == 12


def test_a_first_step_without_a_commit_leaves_the_table_at_its_version_before_the_batch() -> None:
    timeline = replay({2: 11, 4: 12})  # the first segment only inserted
    assert timeline.wrote(PATH, step(1)) == 10
    assert timeline.wrote(PATH, step(2)) == 11
    assert timeline.wrote(PATH, step(3)) == 11
    assert timeline.wrote(PATH, step(4)) == 12
