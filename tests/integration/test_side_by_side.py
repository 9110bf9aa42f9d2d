"""``parallel.side_by_side``: a batch's appends to different tables run concurrently — the
new keys' append to the current table beside the tombstones' (``apply._write_current``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from streaming import apply as apply_module
from streaming.parallel import side_by_side
from tests.integration.test_deletion_vectors import KEYS, _rows, _two_batches

pytestmark = pytest.mark.spark


def test_the_writes_run_at_the_same_time(spark: SparkSession) -> None:
    both = threading.Barrier(2, timeout=10)  # broken (an error) unless the two wait together
    side_by_side(spark, [both.wait, both.wait])
    assert both.n_waiting == 0 and not both.broken


def test_it_waits_for_every_write_then_raises_the_first_failure(spark: SparkSession) -> None:
    done = threading.Event()

    def fails() -> None:
        raise ValueError("first")

    def slow() -> None:
        time.sleep(0.5)
        done.set()

    def also_fails() -> None:
        raise KeyError("third")

    with pytest.raises(ValueError, match="first"):
        side_by_side(spark, [fails, slow, also_fails])
    assert done.is_set(), "returned before a write still in flight had ended"


def test_the_writes_keep_the_callers_job_group(spark: SparkSession) -> None:
    context = spark.sparkContext
    context.setJobGroup("cdc-side-by-side", "test")
    try:
        groups: list[str | None] = []
        side_by_side(
            spark, [lambda: groups.append(context.getLocalProperty("spark.jobGroup.id"))] * 2
        )
        assert groups == ["cdc-side-by-side"] * 2
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]


def test_the_new_keys_and_the_tombstones_are_appended_side_by_side(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large batch that updates, inserts and deletes (``_two_batches``' second): after its
    MERGE, the append of its new keys and the append of its tombstones overlap, each on a
    thread of its own; the table is what the writes in turn gave."""
    calls: list[tuple[str, int, float, float]] = []
    original_append, original_tombstones = apply_module.append, apply_module._append_tombstones

    def timed(kind: str, fn: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                calls.append((kind, threading.get_ident(), started, time.perf_counter()))

        return run

    def append(df: Any, path: str, commit: Any) -> bool:
        system = "/_history/" in path or "/_tombstones/" in path
        kind = "current" if path.endswith("/petstore/Pet") and not system else "other"
        return timed(kind, original_append)(df, path, commit)

    monkeypatch.setattr(apply_module, "append", append)
    monkeypatch.setattr(
        apply_module, "_append_tombstones", timed("tombstones", original_tombstones)
    )
    current = _two_batches(spark, tmp_path, vectors=False, large=True)

    tombstones = [c for c in calls if c[0] == "tombstones"]
    assert len(tombstones) == 1  # the second batch's
    appended = [c for c in calls if c[0] == "current" and c[2] > calls[0][3]]
    assert len(appended) == 1, calls  # the second batch's new keys (the first: a first load)
    (_, t_thread, t_start, t_end), (_, a_thread, a_start, a_end) = tombstones[0], appended[0]
    assert t_thread != a_thread
    assert t_start < a_end and a_start < t_end, "the two appends did not overlap"
    ids = {r[0] for r in _rows(current, "id", "version")}
    deleted = {f"p{n:02d}" for n in range(1, KEYS, 5)}
    assert ids == {f"p{n:02d}" for n in range(KEYS)} - deleted | {"q0", "q1"}
