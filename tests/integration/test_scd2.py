"""SCD type 2 tables on real Spark and Delta, through the job's sink (docs/interface.md, "SCD2
tables"): the table the batches MERGE equals ``core.scd2.intervals`` over the history table
read back — for random sequences of transactions (every object operation, re-inserts, several
versions of a key in one transaction, several transactions in one batch), with a tracked subset
(type-1 updates) and with ``valid_from`` from a data column whose times come out of order;
built from history at startup (backfill); read as of a time both ways; a replayed batch
changes nothing.

Random, reproducibly: ``PROPERTY_SEED=<n>`` runs the printed seed's sequences again.
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.apply import objects as apply_module
from streaming.apply import scd2 as scd2_module
from streaming.cli.main import main
from streaming.core.batch import split_landing_file
from streaming.core.outcomes import Status
from streaming.core.scd2 import intervals, scd2_key
from streaming.runtime.job import Job
from streaming.storage import ledger as ledger_module
from streaming.storage.consistent import consistent_versions
from streaming.storage.scd2 import as_of, as_of_history
from tests.support import Workspace, request

pytestmark = pytest.mark.spark

SEED = int(os.environ.get("PROPERTY_SEED") or random.SystemRandom().randrange(1 << 32))
T0 = datetime(2024, 1, 1, tzinfo=UTC)
PROPS = ("name", "age", "grp", "ts")
DATASET = """\
petstore.Dog:
  properties:
    {name: {type: string}, age: {type: integer}, grp: {type: string}, ts: {type: datetime}}
  scd2: [name, grp]
petstore.Cat:
  properties:
    {name: {type: string}, age: {type: integer}, grp: {type: string}, ts: {type: datetime}}
  scd2: {valid_from: ts}
petstore.Src:
  properties:
    {name: {type: string}, age: {type: integer}, grp: {type: string}, ts: {type: datetime}}
  queries:
    inGroup:
      arguments: [{name: g, type: string}]
      expression: grp == g
"""
SCD2 = {"Dog": (["name", "grp"], None), "Cat": (["name", "age", "grp"], "ts")}
"""Per SCD2 schema: its tracked properties and ``valid_from``."""
IDS = ("a", "b", "c")
OPS = ("UPSERT", "PATCH", "DELETE", "INSERT_IGNORE", "MERGE", "REPLACE")


def _time(minutes: int) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


class Scenario:
    """A workspace whose batches are made of generated transactions over a few groups of ids."""

    def __init__(
        self,
        spark: SparkSession,
        root: Path,
        rng: random.Random,
        groups: int,
        dataset: str = DATASET,
    ) -> None:
        self.spark, self.rng, self.groups = spark, rng, groups
        self.ws = Workspace(root)
        self.ws.dataset("petstore", dataset)
        self.job = Job.create(spark, self.ws.config())
        self.batch = 0
        self.files = 0
        sources = [self._row(g, i) for g in range(groups) for i in rng.sample(IDS, 2)]
        self.sources = sources
        self.ws.data("src/petstore/Src/part.json", *sources)
        setup = request(
            "setup", {"operation": "UPSERT", "locationUri": "./data/src", "format": "JSON"}
        )
        self.run([setup])

    def _row(self, group: int, key: str) -> dict[str, Any]:
        rng = self.rng
        return {
            "id": f"g{group}-{key}",
            "name": rng.choice(("Rex", "Fido")),
            "age": rng.choice((1, 2)),
            "grp": f"g{group}",
            "ts": _time(rng.randint(0, 30)),  # out of order on purpose
        }

    def transaction(self, tid: str) -> str:
        """1-2 actions on one group: a key may get several versions in one transaction."""
        group = self.rng.randrange(self.groups)
        actions = []
        for n in range(self.rng.randint(1, 2)):
            op = self.rng.choice(OPS)
            if op in ("MERGE", "REPLACE"):
                for target in ("petstore.Dog", "petstore.Cat"):
                    actions.append(
                        {
                            "operation": op,
                            "source": "petstore.Src",
                            "target": target,
                            "query": "inGroup",
                            "arguments": {"g": f"g{group}"},
                        }
                    )
                continue
            rows = [
                self._row(group, k) for k in sorted(self.rng.sample(IDS, self.rng.randint(1, 3)))
            ]
            if op == "DELETE":
                rows = [{"id": r["id"]} for r in rows]
            elif op == "PATCH":
                rows = [{"id": r["id"], "age": r["age"], "ts": r["ts"]} for r in rows]
            self.files += 1
            where = f"f{self.files}"
            for schema in ("Dog", "Cat"):
                self.ws.data(f"{where}/petstore/{schema}/part.json", *rows)
            actions.append({"operation": op, "locationUri": f"./data/{where}", "format": "JSON"})
            del n
        return request(tid, *actions)

    def upsert(self, tid: str, schema: str, key: str) -> str:
        """A transaction that upserts one row of a new ``key`` into ``schema``."""
        return self._one(tid, "UPSERT", schema, self._row(0, key))

    def delete(self, tid: str, schema: str, key: str) -> str:
        """A transaction that deletes the row of ``key`` of group 0 from ``schema``."""
        return self._one(tid, "DELETE", schema, {"id": f"g0-{key}"})

    def _one(self, tid: str, operation: str, schema: str, row: dict[str, Any]) -> str:
        self.files += 1
        where = f"f{self.files}"
        self.ws.data(f"{where}/petstore/{schema}/part.json", row)
        return request(
            tid, {"operation": operation, "locationUri": f"./data/{where}", "format": "JSON"}
        )

    def run(
        self, lines: list[str], batch_id: int | None = None, *, replay: bool = False
    ) -> list[Any]:
        body = ("\n".join(lines) + "\n").encode()
        raws = split_landing_file(f"file:/l/b{self.batch}.jsonl", T0, body, T0)
        number = self.batch if batch_id is None else batch_id
        outcomes = self.job.sink.process(raws, number, replay=replay)
        if batch_id is None:
            self.batch += 1
        return outcomes

    def paths(self, schema: str) -> Any:
        return self.job.layout.object_table("petstore", f"petstore.{schema}", scd2=True)


def _rows(path: str) -> list[dict[str, Any]]:
    return deltalake.DeltaTable(path).to_pyarrow_table().to_pylist()  # type: ignore[no-any-return]


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(repr(row[c]) for c in ("id", "__version", *sorted(row)))


def check_reference(paths: Any, schema: str) -> list[dict[str, Any]]:
    """The SCD2 table equals the reference over the history table read back (delta-rs)."""
    track, valid_from = SCD2[schema]
    want = intervals(_rows(paths.history), PROPS, track, valid_from)
    got = _rows(paths.scd2)
    assert sorted(got, key=_key) == sorted(want, key=_key), f"{schema}, seed {SEED}"
    return got


def _fold(monkeypatch: pytest.MonkeyPatch, fold: str) -> None:
    """``driver`` / ``executors``: the fold (and so the SCD2 step's path); ``, semi-join``:
    the SCD2 step reads the seeds and MERGEs without ``id IN (...)`` (more ids than it lists)."""
    if fold.startswith("executors"):
        monkeypatch.setattr(apply_module, "DRIVER_FOLD_MAX_ROWS", 0)
    if fold.endswith("semi-join"):
        monkeypatch.setattr(scd2_module, "KEY_PUSHDOWN_MAX", 0)


# Each branch of each switch once, not their four pairs: the fold (the SCD2 step on the driver,
# or on the executors) and the read of the stored intervals (``id IN (...)`` with the MERGE's
# condition narrowed to those ids, or the semi-join without) are chosen independently, and
# ``_of_ids`` reads the same way under either fold. The four pairs took 84-170 s each on CI's
# slowest machine; two keep every branch at half the time.
@pytest.mark.parametrize("fold", ["driver", "executors, semi-join"])
def test_scd2_tables_equal_the_reference_over_history(
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fold: str,
) -> None:
    _fold(monkeypatch, fold)
    print(f"\nseed {SEED} (PROPERTY_SEED={SEED} repeats it)")
    rng = random.Random(f"{SEED}:{fold}")
    scene = Scenario(spark, tmp_path, rng, groups=3)
    seen_ops: set[str] = set()
    for batch in range(4):
        lines = [scene.transaction(f"b{batch}-t{t}") for t in range(rng.randint(2, 6))]
        seen_ops.update(op for op in OPS if f'"{op}"' in "".join(lines))
        outcomes = scene.run(lines)
        assert all(o.status is Status.COMMITTED for o in outcomes), [o.error for o in outcomes]
        for schema in ("Dog", "Cat"):
            check_reference(scene.paths(schema), schema)
    got = _rows(scene.paths("Dog").scd2)
    assert got, "no intervals: the sequences wrote nothing"
    # the ledger records the SCD2 tables' versions; a consistent read takes them
    versions = consistent_versions(spark, scene.job.layout)
    for schema in ("Dog", "Cat"):
        path = scene.paths(schema).scd2
        assert versions[path] == deltalake.DeltaTable(path).version()
    recorded = [json.loads(r["table_versions"]) for r in _rows(scene.job.layout.ledger)]
    for schema in ("Dog", "Cat"):
        assert any(scd2_key(f"petstore.{schema}") in v for v in recorded)
    assert len(seen_ops) >= 4, seen_ops


def test_type_1_updates_keep_the_interval_and_tracked_changes_open_one(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = Workspace(tmp_path)
    ws.dataset("petstore", DATASET)
    job = Job.create(spark, ws.config())
    clock = iter(T0 + timedelta(hours=h) for h in range(1, 10))
    for n, (name, age) in enumerate([("Rex", 1), ("Rex", 2), ("Max", 2)]):
        ws.data(f"v{n}/petstore/Dog/part.json", {"id": "d", "name": name, "age": age})
        at = next(clock)
        job.sink.clock = lambda at=at: at  # type: ignore[misc]
        line = request(
            f"t{n}", {"operation": "UPSERT", "locationUri": f"./data/v{n}", "format": "JSON"}
        )
        job.sink.process(split_landing_file(f"file:/l/{n}.jsonl", T0, line.encode(), T0), n)
    paths = job.layout.object_table("petstore", "petstore.Dog", scd2=True)
    got = sorted(_rows(paths.scd2), key=lambda r: r["__version"])
    hour = lambda h: T0 + timedelta(hours=h)  # noqa: E731
    assert [
        (r["__version"], r["name"], r["age"], r["__start_at"], r["__end_at"], r["__is_current"])
        for r in got
    ] == [(1, "Rex", 2, hour(1), hour(3), False), (3, "Max", 2, hour(3), None, True)]
    assert got[0]["__transaction_id"] == "t0"
    check_reference(paths, "Dog")

    # as of a time: from the SCD2 table, and from history for a schema without one
    def names(at: datetime) -> list[tuple[str, str]]:
        frame = as_of(spark, job.layout, "petstore", "petstore.Dog", at)
        return sorted((r["id"], r["name"]) for r in frame.collect())

    assert names(hour(0)) == [] and names(hour(1)) == [("d", "Rex")]
    assert names(hour(2) + timedelta(minutes=59)) == [("d", "Rex")]
    assert names(hour(3)) == [("d", "Max")]
    # from history (each version its own interval: untracked values as they were then)
    history = as_of_history(spark.read.format("delta").load(paths.history), hour(1))
    assert [(r["name"], r["age"]) for r in history.collect()] == [("Rex", 1)]
    later = as_of_history(spark.read.format("delta").load(paths.history), hour(3))
    assert [(r["name"], r["age"]) for r in later.collect()] == [("Max", 2)]
    assert as_of(spark, job.layout, "petstore", "petstore.Src", hour(9)).count() == 0

    # the command line: cdc show --as-of, --scd2
    config = ws.root / "cdc.yaml"
    config.write_text(ws.config().model_dump_json())
    capsys.readouterr()
    as_of_text = (hour(2)).isoformat()
    show = ["show", "petstore", "petstore.Dog", "--as-of", as_of_text]
    assert main([*show, "--json", "--config", str(config)]) == 0
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["id"], r["name"], r["age"]) for r in shown] == [("d", "Rex", 2)]
    assert (
        main(
            [
                "show",
                "petstore",
                "petstore.Dog",
                "--scd2",
                "--consistent",
                "--json",
                "--config",
                str(config),
            ]
        )
        == 0
    )
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["__version"], r["name"]) for r in shown] == [(1, "Rex"), (3, "Max")]

    # maintain clusters SCD2 tables by id like current tables; the intervals stay
    assert main(["maintain", "--cluster", "--config", str(config)]) == 0
    assert sorted(_rows(paths.scd2 or ""), key=_key) == sorted(got, key=_key)


def test_valid_from_out_of_order_and_deletes_at_commit_time(
    spark: SparkSession, tmp_path: Path
) -> None:
    ws = Workspace(tmp_path)
    ws.dataset("petstore", DATASET)
    job = Job.create(spark, ws.config())
    steps = [
        ("UPSERT", "Tom", 10),
        ("UPSERT", "Kit", 40),
        ("UPSERT", "Max", 20),
        ("DELETE", None, None),
    ]
    for n, (op, name, minutes) in enumerate(steps):
        row = {"id": "c"} if op == "DELETE" else {"id": "c", "name": name, "ts": _time(minutes)}
        ws.data(f"v{n}/petstore/Cat/part.json", row)
        at = T0 + timedelta(hours=n + 1)
        job.sink.clock = lambda at=at: at  # type: ignore[misc]
        line = request(f"t{n}", {"operation": op, "locationUri": f"./data/v{n}", "format": "JSON"})
        job.sink.process(split_landing_file(f"file:/l/{n}.jsonl", T0, line.encode(), T0), n)
    paths = job.layout.object_table("petstore", "petstore.Cat", scd2=True)
    got = sorted(_rows(paths.scd2), key=lambda r: r["__version"])
    minute = lambda m: T0 + timedelta(minutes=m)  # noqa: E731
    # Max (ts 20) comes after Kit (ts 40): lifted to 40, Kit's interval is empty and dropped;
    # the delete ends Max's at its commit time (hour 4).
    assert [(r["name"], r["__start_at"], r["__end_at"], r["__deleted"]) for r in got] == [
        ("Tom", minute(10), minute(40), False),
        ("Max", minute(40), T0 + timedelta(hours=4), True),
    ]
    check_reference(paths, "Cat")


def test_backfill_builds_the_table_from_history_at_startup(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(f"{SEED}:backfill")
    without = DATASET.replace("  scd2: [name, grp]\n", "")
    scene = Scenario(spark, tmp_path, rng, groups=2, dataset=without)
    ws = scene.ws
    for batch in range(2):
        scene.run([scene.transaction(f"b{batch}-t{t}") for t in range(4)])
    paths = scene.job.layout.object_table("petstore", "petstore.Dog", scd2=True)
    assert not os.path.exists(paths.scd2 or "")
    history = _rows(paths.history)

    ws.dataset("petstore", DATASET)  # scd2 on for Dog: the restart builds its table
    if scene.job.lease is not None:
        scene.job.lease.release()
    caplog.set_level(logging.INFO, logger="streaming.runtime.job")
    job = Job.create(spark, ws.config())
    got = check_reference(paths, "Dog")
    assert (
        f"scd2: built petstore.Dog's SCD2 table from its history ({len(history)} versions → "
        f"{len(got)} intervals)"
    ) in caplog.text
    # and the batches go on from there
    scene.job = job
    scene.run([scene.transaction("after-t0"), scene.transaction("after-t1")])
    check_reference(paths, "Dog")
    # as of a time, for a schema without an SCD2 table: from its history
    later = datetime.now(UTC) + timedelta(days=1)
    src = as_of(spark, job.layout, "petstore", "petstore.Src", later)
    assert sorted(r["id"] for r in src.collect()) == sorted(r["id"] for r in scene.sources)
    assert as_of(spark, job.layout, "petstore", "petstore.Src", T0).count() == 0


def test_a_replayed_batch_changes_nothing(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(f"{SEED}:replay")
    scene = Scenario(spark, tmp_path, rng, groups=2)
    scene.run([scene.transaction(f"b0-t{t}") for t in range(3)])
    lines = [scene.transaction(f"b1-t{t}") for t in range(4)]
    # generated transactions may leave Dog's intervals as they are (a DELETE of absent ids, an
    # INSERT_IGNORE of present ones), and then no SCD2 MERGE is made: a new id makes sure of one
    lines.append(scene.upsert("b1-new", "Dog", "new"))
    paths = scene.paths("Dog")
    before = deltalake.DeltaTable(paths.scd2).version()

    def dies(*_: Any, **__: Any) -> None:
        raise RuntimeError("the driver died before the ledger")

    original: Callable[..., Any] = ledger_module.record
    monkeypatch.setattr(ledger_module, "record", dies)
    with pytest.raises(Exception, match="before the ledger"):
        scene.run(lines, batch_id=scene.batch)
    merged = deltalake.DeltaTable(paths.scd2).version()
    assert merged == before + 1  # the SCD2 MERGE was made before the ledger
    snapshot = sorted(_rows(paths.scd2), key=_key)
    monkeypatch.setattr(ledger_module, "record", original)
    outcomes = scene.run(lines, replay=True)
    assert all(o.status is Status.COMMITTED for o in outcomes)
    assert deltalake.DeltaTable(paths.scd2).version() == merged  # not made again
    assert sorted(_rows(paths.scd2), key=_key) == snapshot
    check_reference(paths, "Dog")
    check_reference(scene.paths("Cat"), "Cat")


def test_a_batch_that_changes_no_interval_makes_no_scd2_commit(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A small batch whose changes leave every interval as it is (a delete of an id the table
    never had) writes nothing to the SCD2 table: no MERGE, no empty commit; it commits."""
    scene = Scenario(spark, tmp_path, random.Random(f"{SEED}:no-change"), groups=1)
    scene.run([scene.upsert("t1", "Dog", "kept")])
    paths = scene.paths("Dog")
    before = deltalake.DeltaTable(paths.scd2).version()
    outcomes = scene.run([scene.delete("t2", "Dog", "absent")])
    assert [o.status for o in outcomes] == [Status.COMMITTED]
    assert deltalake.DeltaTable(paths.scd2).version() == before
    check_reference(paths, "Dog")
    outcomes = scene.run([scene.delete("t3", "Dog", "kept")])  # and a real change still is
    assert [o.status for o in outcomes] == [Status.COMMITTED]
    assert deltalake.DeltaTable(paths.scd2).version() == before + 1
    check_reference(paths, "Dog")


def test_a_change_feeds_time_property_gives_source_time_validity(
    spark: SparkSession, ws: Workspace, kafka_broker: Any
) -> None:
    from tests.support.datasets import SHOP
    from tests.support.debezium import Topics, send

    prefix = f"scd{random.SystemRandom().randrange(1 << 30):x}"
    kafka_broker.create_topics([f"{prefix}.requests", f"{prefix}.outcomes"])
    timed = SHOP.replace(
        "    sourcePosition: {type: string}\n  watermark: [sourcePosition]\nshop.Order:",
        "    sourcePosition: {type: string}\n    changedAt: {type: datetime}\n"
        "  watermark: [sourcePosition]\n  scd2: {valid_from: changedAt}\nshop.Order:",
    )
    assert timed != SHOP
    ws.dataset("shop", timed)
    cfg = ws.config(
        landing={},
        kafka={
            "bootstrap": kafka_broker.bootstrap,
            "transactions_topic": f"{prefix}.requests",
            "outcomes_topic": f"{prefix}.outcomes",
            "change_feeds": [
                {
                    "name": "pg",
                    "dataset": "shop",
                    "topic_prefix": prefix,
                    "tables": {"shop.Customer": "public.customers"},
                    "transaction_metadata": False,
                    "time_property": "changedAt",
                }
            ],
        },
    )
    topics = Topics(prefix=prefix)
    topics.event("public.customers", "r", {"id": 1, "name": "Ada", "balance": "100.00"})
    topics.event("public.customers", "u", {"id": 1, "name": "Ann", "balance": "80.00"})
    sent = [json.loads(r.value or b"{}")["source"]["ts_ms"] for r in topics.records]
    send(kafka_broker.bootstrap, topics.take())
    job = ws.run_once(spark, cfg)
    paths = job.layout.object_table("shop", "shop.Customer", scd2=True)
    got = sorted(_rows(paths.scd2 or ""), key=lambda r: r["__version"])
    at = [datetime.fromtimestamp(ms / 1000, UTC) for ms in sent]
    assert [(r["name"], r["__start_at"], r["__end_at"]) for r in got] == [
        ("Ada", at[0], at[1]),
        ("Ann", at[1], None),
    ]
    current = _rows(paths.current)
    assert [r["changedAt"] for r in current] == [at[1]]
    want = intervals(
        _rows(paths.history),
        ["name", "balance", "sourcePosition", "changedAt"],
        ["name", "balance"],
        "changedAt",
    )
    assert sorted(got, key=_key) == sorted(want, key=_key)


def test_a_new_property_reaches_the_scd2_table_at_startup(
    spark: SparkSession, tmp_path: Path
) -> None:
    ws = Workspace(tmp_path)
    ws.dataset("petstore", DATASET)
    first = Job.create(spark, ws.config())
    if first.lease is not None:
        first.lease.release()
    ws.dataset(
        "petstore",
        DATASET.replace("ts: {type: datetime}}", "ts: {type: datetime}, x: {type: string}}", 1),
    )
    job = Job.create(spark, ws.config())
    paths = job.layout.object_table("petstore", "petstore.Dog", scd2=True)
    columns = [f.name for f in deltalake.DeltaTable(paths.scd2 or "").schema().fields]
    assert "x" in columns and "__version" in columns  # added as to history (after the others)


@pytest.mark.parametrize("fold", ["driver", "executors"])
def test_a_removed_property_keeps_its_scd2_column_and_its_values(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fold: str
) -> None:
    _fold(monkeypatch, fold)
    ws = Workspace(tmp_path)
    with_grp = "petstore.Dog:\n  properties: {name: {type: string}, grp: {type: string}}\n"
    ws.dataset("petstore", with_grp + "  scd2: [name]\n")
    outcomes: list[Any] = []

    def run(job: Job, n: int, row: dict[str, Any]) -> None:
        ws.data(f"v{n}/petstore/Dog/part.json", row)
        line = request(
            f"t{n}", {"operation": "UPSERT", "locationUri": f"./data/v{n}", "format": "JSON"}
        )
        at = T0 + timedelta(hours=n + 1)
        job.sink.clock = lambda: at
        outcomes.extend(
            job.sink.process(split_landing_file(f"file:/l/{n}.jsonl", T0, line.encode(), T0), n)
        )

    first = Job.create(spark, ws.config())
    run(first, 0, {"id": "d", "name": "Rex", "grp": "g1"})
    if first.lease is not None:
        first.lease.release()
    ws.dataset("petstore", with_grp.replace(", grp: {type: string}", "") + "  scd2: [name]\n")
    job = Job.create(spark, ws.config())
    run(job, 1, {"id": "d", "name": "Max"})
    assert [o.status for o in outcomes] == [Status.COMMITTED, Status.COMMITTED]
    paths = job.layout.object_table("petstore", "petstore.Dog", scd2=True)
    got = sorted(_rows(paths.scd2 or ""), key=lambda r: r["__version"])
    assert [(r["__version"], r["name"], r["grp"], r["__is_current"]) for r in got] == [
        (1, "Rex", "g1", False),  # closed: the removed column keeps its value
        (2, "Max", None, True),  # opened: NULL, as the current table's insert writes it
    ]
