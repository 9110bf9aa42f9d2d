"""A micro-batch replayed with the same batch id (what Spark does after a crash) writes nothing
twice and finishes what the first attempt left undone."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import deltalake
import pytest
from pyspark.sql import DataFrame, SparkSession

from streaming.apply import objects as apply_module
from streaming.core.batch import RawRequest, split_landing_file
from streaming.core.outcomes import Status
from streaming.runtime.batch import record as record_step
from streaming.runtime.job import Job
from streaming.storage import commits as commits_module
from streaming.storage import timeline as timeline_module
from streaming.storage.commits import BatchCommit
from streaming.storage.tables import read_table
from tests.support import Workspace, request, upsert
from tests.support.datasets import DOG

pytestmark = pytest.mark.spark
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def seed(ws: Workspace) -> list[RawRequest]:
    ws.dataset("petstore", DOG)
    ws.data(
        "in/petstore/Dog/a.json", {"id": "dog1", "name": "Scooby"}, {"id": "dog2", "name": "Rex"}
    )
    body = (request("tx-1", upsert("./data/in")) + "\n").encode()
    return split_landing_file("file:/landing/a.jsonl", T0, body, T0)


def versions(job: Job) -> dict[str, int]:
    paths = job.layout.object_table("petstore", "petstore.Dog")
    return {
        p: deltalake.DeltaTable(p).version()
        for p in (paths.current, paths.history, paths.tombstones, job.layout.ledger)
    }


def test_replaying_a_completed_batch_changes_nothing_and_repeats_the_outcome(
    spark: SparkSession, ws: Workspace
) -> None:
    raws = seed(ws)
    job = Job.create(spark, ws.config())
    first = job.sink.process(raws, batch_id=0)
    after = versions(job)
    again = job.sink.process(raws, batch_id=0)
    assert versions(job) == after
    assert [o.status for o in first] == [o.status for o in again] == [Status.COMMITTED]
    assert again[0].actions == first[0].actions and again[0].committed_at == first[0].committed_at


def test_only_a_batch_that_may_have_run_before_looks_for_its_earlier_commits(
    spark: SparkSession, ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sink's first batch (Spark replays the last unfinished one at a restart) and a batch id
    it runs again search the tables' latest commits for their own; the batch after one the sink
    finished cannot have any, and reads no commit file. Run again, it writes nothing twice."""
    raws = seed(ws)
    ws.data("more/petstore/Dog/a.json", {"id": "dog3", "name": "Lassie"})
    body = (request("tx-2", upsert("./data/more")) + "\n").encode()
    second = split_landing_file("file:/landing/b.jsonl", T0, body, T0)
    job = Job.create(spark, ws.config())
    searched: list[tuple[str, int]] = []
    real = commits_module.batch_commits

    def spy(spark: SparkSession, path: str, query: str, batch_id: int) -> object:
        searched.append((path, batch_id))
        return real(spark, path, query, batch_id)

    monkeypatch.setattr(commits_module, "batch_commits", spy)
    monkeypatch.setattr(timeline_module, "batch_commits", spy)

    job.sink.process(raws, batch_id=0)
    paths = job.layout.object_table("petstore", "petstore.Dog")
    searched_first = {path for path, _ in searched}
    assert {paths.current, paths.history, job.layout.ledger} <= searched_first
    searched.clear()
    (outcome,) = job.sink.process(second, batch_id=1)
    assert outcome.status is Status.COMMITTED and searched == []
    after = versions(job)
    (again,) = job.sink.process(second, batch_id=1)
    assert {b for _, b in searched} == {1} and paths.history in {p for p, _ in searched}
    assert versions(job) == after
    assert again.status is Status.COMMITTED and again.actions == outcome.actions


def test_crash_before_history_is_rolled_forward_with_the_same_commit_time(
    spark: SparkSession, ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    raws = seed(ws)
    job = Job.create(spark, ws.config())

    def crash(*_: object) -> None:
        raise RuntimeError("driver died before the history append")

    monkeypatch.setattr(record_step, "append_history", crash)
    with pytest.raises(RuntimeError):
        job.sink.process(raws, batch_id=0)
    paths = job.layout.object_table("petstore", "petstore.Dog")
    assert deltalake.DeltaTable(paths.history).to_pyarrow_table().num_rows == 0
    current_version = deltalake.DeltaTable(paths.current).version()

    monkeypatch.undo()
    job.sink.clock = lambda: datetime(2030, 1, 1, tzinfo=UTC)  # a replay must not use a new time
    (outcome,) = job.sink.process(raws, batch_id=0)
    assert outcome.status is Status.COMMITTED and outcome.actions[0].inserted == 2
    assert deltalake.DeltaTable(paths.current).version() == current_version
    current = deltalake.DeltaTable(paths.current).to_pyarrow_table().to_pylist()
    history = deltalake.DeltaTable(paths.history).to_pyarrow_table().to_pylist()
    assert sorted((h["id"], h["version"], h["updated"]) for h in history) == sorted(
        (c["id"], c["version"], c["updated"]) for c in current
    )
    assert outcome.committed_at is not None and outcome.committed_at.year != 2030


class _Killed(BaseException):
    """The driver dies: not an ``Exception``, so the sink neither restores nor isolates."""


def test_killed_between_a_tables_merge_and_its_insert_append_is_rolled_forward(
    spark: SparkSession, ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large batch writes the keys a table held by a MERGE and its new keys by an append: two
    commits of one table, two steps. Killed between them, the restarted job's replay skips the
    MERGE (Delta's idempotency keys) and makes the append: the rows, versions, history and
    counts are those of a batch that never died."""
    raws = seed(ws)
    job = Job.create(spark, ws.config())
    job.sink.process(raws, batch_id=0)
    ws.data(
        "more/petstore/Dog/a.json",
        {"id": "dog1", "name": "Scooby-Doo"},
        {"id": "dog3", "name": "Lassie"},
    )
    body = (request("tx-2", upsert("./data/more")) + "\n").encode()
    second = split_landing_file("file:/landing/b.jsonl", T0, body, T0)
    paths = job.layout.object_table("petstore", "petstore.Dog")
    monkeypatch.setattr(apply_module, "DRIVER_FOLD_MAX_ROWS", 0)  # the large path
    append = apply_module.append  # type: ignore[attr-defined]  # the name objects calls

    def killed_at_the_insert_append(df: DataFrame, path: str, commit: BatchCommit) -> bool:
        if path == paths.current:
            raise _Killed()
        return append(df, path, commit)

    monkeypatch.setattr(apply_module, "append", killed_at_the_insert_append)
    with pytest.raises(_Killed):
        job.sink.process(second, batch_id=1)
    table = deltalake.DeltaTable(paths.current)
    assert [c["operation"] for c in table.history()][:2] == ["MERGE", "WRITE"]
    assert sorted(r["id"] for r in table.to_pyarrow_table().to_pylist()) == ["dog1", "dog2"]

    monkeypatch.setattr(apply_module, "append", append)
    restarted = Job.create(spark, ws.config())  # a new process: its first batch may be a replay
    (outcome,) = restarted.sink.process(second, batch_id=1)
    assert outcome.status is Status.COMMITTED
    assert (outcome.actions[0].inserted, outcome.actions[0].updated) == (1, 1)
    table = deltalake.DeltaTable(paths.current)
    assert [c["operation"] for c in table.history()][:3] == ["WRITE", "MERGE", "WRITE"]
    assert sorted(
        (r["id"], r["version"], r["name"]) for r in table.to_pyarrow_table().to_pylist()
    ) == [
        ("dog1", 2, "Scooby-Doo"),
        ("dog2", 1, "Rex"),
        ("dog3", 1, "Lassie"),
    ]
    history = deltalake.DeltaTable(paths.history).to_pyarrow_table().to_pylist()
    assert sorted((h["id"], h["version"]) for h in history) == [
        ("dog1", 1),
        ("dog1", 2),
        ("dog2", 1),
        ("dog3", 1),
    ]


def test_whole_input_replayed_on_a_fresh_checkpoint_changes_no_table(
    spark: SparkSession, ws: Workspace
) -> None:
    """Lose the checkpoint and read every request again: the ledger makes each one DUPLICATE,
    so every table keeps the same rows and versions; and a new request in the new checkpoint's
    batch 0 is applied, not mistaken for the old checkpoint's batch 0 (Delta's txnAppId)."""
    ws.dataset("petstore", DOG)
    ws.data(
        "a/petstore/Dog/part.json", {"id": "dog1", "name": "Scooby"}, {"id": "dog2", "name": "Rex"}
    )
    ws.data("b/petstore/Dog/part.json", {"id": "dog2"})
    ws.requests(request("tx-1", upsert("./data/a")))
    ws.requests(
        request("tx-2", {"operation": "DELETE", "locationUri": "./data/b", "format": "JSON"})
    )
    job = ws.run_once(spark)
    paths = job.layout.object_table("petstore", "petstore.Dog")
    tables = (paths.current, paths.history, paths.tombstones)
    before = {
        p: (deltalake.DeltaTable(p).version(), deltalake.DeltaTable(p).to_pyarrow_table())
        for p in tables
    }

    shutil.rmtree(job.layout.checkpoint)
    again = ws.run_once(spark)

    for path, (version, rows) in before.items():
        assert deltalake.DeltaTable(path).version() == version
        assert deltalake.DeltaTable(path).to_pyarrow_table().equals(rows)
    replayed = read_table(spark, again.layout.outcomes).where(
        "batch_id > 0 OR status = 'DUPLICATE'"
    )
    assert sorted((r["transaction_id"], r["status"]) for r in replayed.collect()) == [
        ("tx-1", "DUPLICATE"),
        ("tx-2", "DUPLICATE"),
    ]

    shutil.rmtree(job.layout.checkpoint)
    ws.data("c/petstore/Dog/part.json", {"id": "dog3", "name": "Lassie"})
    ws.requests(request("tx-3", upsert("./data/c")))
    last = ws.run_once(spark)
    dogs = deltalake.DeltaTable(paths.current).to_pyarrow_table().to_pylist()
    assert sorted((d["id"], d["version"]) for d in dogs) == [("dog1", 1), ("dog3", 1)]
    newest = read_table(spark, last.layout.outcomes).where("transaction_id = 'tx-3'").collect()
    assert [(r["status"], r["batch_id"]) for r in newest] == [("COMMITTED", 0)]


def test_a_first_load_killed_before_history_is_rolled_forward_from_its_append(
    spark: SparkSession, ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first load's history is the rows its append wrote, projected again from the load's
    rows (cached until the batch ends). Killed before the history append, the replay skips
    the append already made and appends those same rows to history: not the table's rows — a
    commit after the append (here another writer's) is not history of this batch."""
    raws = seed(ws)
    job = Job.create(spark, ws.config())
    monkeypatch.setattr(apply_module, "DRIVER_FOLD_MAX_ROWS", 0)  # the large path
    first_rows: list[int] = []
    real_first_rows = apply_module.first_rows  # type: ignore[attr-defined]

    def counted(*args: object, **kwargs: object) -> DataFrame:
        first_rows.append(1)
        return real_first_rows(*args, **kwargs)  # type: ignore[arg-type]

    def killed(*_: object) -> None:
        raise _Killed()

    monkeypatch.setattr(apply_module, "first_rows", counted)
    monkeypatch.setattr(record_step, "append_history", killed)
    with pytest.raises(_Killed):
        job.sink.process(raws, batch_id=0)
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()  # released all the same
    paths = job.layout.object_table("petstore", "petstore.Dog")
    appended = deltalake.DeltaTable(paths.current)
    written = appended.to_pyarrow_table().to_pylist()
    assert first_rows and appended.history(1)[0]["operation"] == "WRITE"
    other = spark.createDataFrame([written[0]], read_table(spark, paths.current).schema)
    other.write.format("delta").mode("append").save(paths.current)  # not this batch's commit

    monkeypatch.setattr(record_step, "append_history", apply_module.append_history)
    restarted = Job.create(spark, ws.config())
    (outcome,) = restarted.sink.process(raws, batch_id=0)
    assert outcome.status is Status.COMMITTED and outcome.actions[0].inserted == 2
    assert len(first_rows) == 2  # the replay took the same path
    history = deltalake.DeltaTable(paths.history).to_pyarrow_table().to_pylist()
    columns = ("id", "version", "created", "updated", "hash", "name")
    assert sorted(tuple(h[c] for c in columns) for h in history) == sorted(
        tuple(w[c] for c in columns) for w in written
    )
    assert {(h["__op"], h["__deleted"], h["__transaction_id"]) for h in history} == {
        ("i", False, "tx-1")
    }


def _repeated_first_load(ws: Workspace) -> list[RawRequest]:
    """Two transactions into an empty table in one batch: dog2 in both (folded), dog1 and
    dog3 once each (projected)."""
    ws.dataset("petstore", DOG)
    ws.data(
        "in1/petstore/Dog/a.json", {"id": "dog1", "name": "Scooby"}, {"id": "dog2", "name": "Rex"}
    )
    ws.data(
        "in2/petstore/Dog/b.json", {"id": "dog2", "name": "Rexie"}, {"id": "dog3", "name": "Lassie"}
    )
    body = "".join(
        request(tid, upsert(f"./data/{folder}")) + "\n"
        for tid, folder in (("tx-1", "in1"), ("tx-2", "in2"))
    ).encode()
    return split_landing_file("file:/landing/a.jsonl", T0, body, T0)


def _history(job: Job) -> list[tuple[object, ...]]:
    paths = job.layout.object_table("petstore", "petstore.Dog")
    columns = ("id", "version", "hash", "name", "__transaction_id")
    rows = deltalake.DeltaTable(paths.history).to_pyarrow_table().to_pylist()
    return sorted(tuple(h[c] for c in columns) for h in rows)


def test_a_first_load_with_a_repeated_key_killed_before_history_is_rolled_forward(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first load whose keys partly repeat projects the others and folds the repeated
    (``objects._apply_first_load``); killed before the history append, the replay appends the
    history an uninterrupted batch appends — both parts, the same rows."""
    monkeypatch.setattr(apply_module, "DRIVER_FOLD_MAX_ROWS", 0)  # the large path
    folds: list[str] = []
    real_fold_rows = apply_module.fold_rows  # type: ignore[attr-defined]  # names objects calls
    real_first_rows = apply_module.first_rows  # type: ignore[attr-defined]

    def folded(*args: object, unique: bool, **kwargs: object) -> DataFrame:
        folds.append("ungrouped" if unique else "grouped")
        return real_fold_rows(*args, unique=unique, **kwargs)  # type: ignore[arg-type]

    def projected(*args: object, **kwargs: object) -> DataFrame:
        folds.append("first rows")
        return real_first_rows(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(apply_module, "fold_rows", folded)
    monkeypatch.setattr(apply_module, "first_rows", projected)
    whole = Workspace(tmp_path / "whole")
    raws = _repeated_first_load(whole)
    job = Job.create(spark, whole.config())
    job.sink.process(raws, batch_id=0)
    assert folds == ["first rows", "grouped"]  # dog1 and dog3 projected, dog2 folded
    expected = _history(job)
    assert [(h[0], h[1], h[4]) for h in expected] == [
        ("dog1", 1, "tx-1"),
        ("dog2", 1, "tx-1"),
        ("dog2", 2, "tx-2"),
        ("dog3", 1, "tx-2"),
    ]

    def killed(*_: object) -> None:
        raise _Killed()

    ws = Workspace(tmp_path / "killed")
    raws = _repeated_first_load(ws)
    monkeypatch.setattr(record_step, "append_history", killed)
    with pytest.raises(_Killed):
        Job.create(spark, ws.config()).sink.process(raws, batch_id=0)
    monkeypatch.setattr(record_step, "append_history", apply_module.append_history)
    restarted = Job.create(spark, ws.config())
    outcomes = restarted.sink.process(raws, batch_id=0)
    assert [o.status for o in outcomes] == [Status.COMMITTED] * 2
    assert [(o.actions[0].inserted, o.actions[0].updated) for o in outcomes] == [(2, 0), (1, 1)]
    assert folds == ["first rows", "grouped"] * 3  # the replay took the same path
    assert _history(restarted) == expected
