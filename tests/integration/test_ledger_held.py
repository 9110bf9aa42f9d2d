"""The ledger's ids held on the driver between batches (``ledger.HeldIds``): a batch of new
transactions is triaged without looking them up in the ledger; a re-sent one is still DUPLICATE;
a transaction another query committed to the same ledger in between is seen."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.sql import SparkSession

from streaming.core.batch import RawRequest, split_landing_file
from streaming.core.outcomes import Status
from streaming.runtime.job import Job
from streaming.storage import ledger
from tests.support import Workspace, request, upsert
from tests.support.datasets import DOG

pytestmark = pytest.mark.spark
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def batch(ws: Workspace, tid: str, name: str, folder: str = "") -> list[RawRequest]:
    folder = folder or tid
    ws.data(f"{folder}/petstore/Dog/part.json", {"id": f"dog-{tid}", "name": name})
    line = request(tid, upsert(f"./data/{folder}"))
    return split_landing_file(f"file:/landing/{tid}.jsonl", T0, (line + "\n").encode(), T0)


def test_new_transactions_are_triaged_from_the_held_ids_and_a_resent_one_is_duplicate(
    spark: SparkSession, ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws.dataset("petstore", DOG)
    job = Job.create(spark, ws.config())
    other = Job.create(spark, ws.config(query_name="other"))  # the same ledger
    reads: list[int | None] = []
    real = ledger.read_table  # type: ignore[attr-defined]  # the name ledger calls

    def spy(spark: SparkSession, path: str, version: int | None = None) -> Any:
        if path == job.layout.ledger:
            reads.append(version)
        return real(spark, path, version)

    monkeypatch.setattr(ledger, "read_table", spy)

    def status(sink_job: Job, raws: list[RawRequest], batch_id: int) -> Status:
        (outcome,) = sink_job.sink.process(raws, batch_id)
        return outcome.status

    assert status(job, batch(ws, "t0", "Rex"), 0) is Status.COMMITTED
    assert reads == []  # an empty ledger (Delta's checksum says so): nothing to look up
    assert status(job, batch(ws, "t1", "Fido"), 1) is Status.COMMITTED
    assert status(job, batch(ws, "t3", "Lassie"), 2) is Status.COMMITTED
    assert reads == []  # held from the empty ledger on, moved along with the sink's appends
    assert job.sink.committed_ids.ids == {"t0", "t1", "t3"}

    assert status(job, batch(ws, "t0", "Rex"), 3) is Status.DUPLICATE
    assert len(reads) == 1  # held: looked up, for its first outcome

    # A new process over the ledger, which now holds rows: its first batch looks its ids up,
    # its second reads them whole once, its third reads nothing.
    restarted = Job.create(spark, ws.config())
    assert status(restarted, batch(ws, "t4", "Benji"), 4) is Status.COMMITTED
    assert len(reads) == 2
    assert status(restarted, batch(ws, "t5", "Bolt"), 5) is Status.COMMITTED
    assert len(reads) == 3
    assert status(restarted, batch(ws, "t6", "Hooch"), 6) is Status.COMMITTED
    assert len(reads) == 3
    assert restarted.sink.committed_ids.ids == {"t0", "t1", "t3", "t4", "t5", "t6"}

    # Another query commits t2 to the same ledger; re-sent here, it is DUPLICATE: the ledger's
    # version moved past the held one, so the ids are read again.
    assert status(other, batch(ws, "t2", "Timmy"), 0) is Status.COMMITTED
    assert status(restarted, batch(ws, "t2", "Timmy"), 7) is Status.DUPLICATE
    assert "t2" in restarted.sink.committed_ids.ids
    # The same id with another request is refused, not applied.
    changed = batch(ws, "t2", "Lassie II", folder="t2-other")
    (outcome,) = restarted.sink.process(changed, 8)
    assert outcome.status is Status.REJECTED and outcome.error is not None
    assert outcome.error.code == "TRANSACTION_ID_REUSED"


def test_a_ledger_too_large_to_hold_is_looked_up_each_batch(
    spark: SparkSession, ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws.dataset("petstore", DOG)
    job = Job.create(spark, ws.config())
    job.sink.committed_ids.max_bytes = 0  # any ledger with a file is too large
    assert job.sink.process(batch(ws, "t0", "Rex"), 0)[0].status is Status.COMMITTED
    assert job.sink.process(batch(ws, "t1", "Fido"), 1)[0].status is Status.COMMITTED
    assert job.sink.committed_ids.version is None
    assert job.sink.process(batch(ws, "t0", "Rex"), 2)[0].status is Status.DUPLICATE
