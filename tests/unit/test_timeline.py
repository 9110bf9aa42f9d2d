"""A replayed batch's view of a table's versions, step by step (``storage.timeline``), where a
step made no commit — a table's new-key append when the batch only updated it, its MERGE when
the batch only inserted — and how the new-key append is numbered."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from pyspark.sql import SparkSession

from streaming.storage.commits import INSERTS_STEP, BatchCommit, step_order
from streaming.storage.timeline import Timeline

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
    """Step 1 is a segment's MERGE of the table (it only updated: no new-key append), step 2 a
    later segment's. The crash came after step 2: the table's latest version holds it, but
    the replay must see what step 1 left when it reaches step 1's append."""
    timeline = replay({1: 11, 2: 12})
    assert timeline.version(PATH) == 10  # before the batch
    assert timeline.wrote(PATH, step(1)) == 11
    assert timeline.wrote(PATH, step(1).inserts()) == 11  # no commit there, and not 12
    assert timeline.version(PATH) == 11
    assert timeline.wrote(PATH, step(2)) == 12


def test_a_first_step_without_a_commit_leaves_the_table_at_its_version_before_the_batch() -> None:
    timeline = replay({step(1).inserts().step: 11, 2: 12})  # the first segment only inserted
    assert timeline.wrote(PATH, step(1)) == 10
    assert timeline.wrote(PATH, step(1).inserts()) == 11
    assert timeline.wrote(PATH, step(2)) == 12


def test_a_new_key_append_is_numbered_apart_and_ordered_right_after_its_merge() -> None:
    """The timeline's steps keep the numbers they had before new keys were appended apart, so
    a batch left unfinished by that version is replayed with the same steps."""
    inserts = step(3).inserts()
    assert inserts.step == 3 | INSERTS_STEP and inserts.batch_id == 7 and inserts.at == AT
    assert step_order(3) < step_order(inserts.step) < step_order(4)
    assert inserts.txn_version >> 20 == 7  # still batch 7's in Delta's idempotency keys
