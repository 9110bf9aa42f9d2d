"""Grouped = sequential (docs/architecture.md, "Grouped = sequential"), as a property: hundreds
of generated transaction sequences applied together in ONE micro-batch by the Spark engine give
exactly what an independent one-transaction-at-a-time model gives — rows, versions, history and
outcome counts.

Each generated sequence works on its own ids (prefixed with its number) and its own group
(``grp``), so all of them can share one batch and one Spark run; inside a sequence, transactions
hit the same few ids in a generated order, which is where grouping could go wrong. A sequence's
MERGE reads its group of the source schema ``Src`` (written by an earlier batch) and deletes the
rows of its group that the source lacks: it reads the table the batch writes, so the batch is cut
into segments there (``core.steps``) — which this test proves keeps the sequential meaning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import deltalake
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from streaming.apply import objects as apply_module
from streaming.core.batch import split_landing_file
from streaming.core.outcomes import Status
from streaming.runtime.job import Job
from tests.support import Workspace, request

pytestmark = pytest.mark.spark

SEQUENCES = 200
IDS = ["a", "b", "c"]
OPS = ["UPSERT", "PATCH", "DELETE", "INSERT_IGNORE", "MERGE"]
T0 = datetime(2024, 1, 1, tzinfo=UTC)

row = st.fixed_dictionaries(
    {
        "id": st.sampled_from(IDS),
        "name": st.sampled_from(["Rex", "Fido", None]),
        "age": st.sampled_from([1, 2, None]),
    }
)
transaction = st.tuples(
    st.sampled_from(OPS), st.lists(row, min_size=1, max_size=3, unique_by=lambda r: r["id"])
)
sequence = st.tuples(
    st.lists(row, max_size=3, unique_by=lambda r: r["id"]),  # the sequence's rows of Src
    st.lists(transaction, min_size=1, max_size=4),
)
DATASET = """\
petstore.Dog:
  properties: {name: {type: string}, age: {type: integer}, grp: {type: string}}
petstore.Src:
  properties: {name: {type: string}, age: {type: integer}, grp: {type: string}}
  queries:
    inGroup:
      arguments: [{name: g, type: string}]
      expression: grp == g
"""


@dataclass
class Model:
    """The reference: one transaction at a time, written independently of the engine."""

    live: dict[str, tuple[dict[str, Any], int]] = field(default_factory=dict)
    tomb: dict[str, int] = field(default_factory=dict)
    history: list[tuple[str, int, str, str]] = field(default_factory=list)

    def apply(self, tid: str, op: str, rows: list[dict[str, Any]], group: str) -> dict[str, int]:
        counts = dict.fromkeys(["inserted", "updated", "deleted", "unchanged", "skipped"], 0)
        if op == "MERGE":  # rows: the group's source rows; the rest of the group is deleted
            keep = {r["id"] for r in rows}
            for key in [k for k, (d, _) in self.live.items() if d["grp"] == group]:
                if key not in keep:
                    self._delete(tid, key, counts)
            op = "UPSERT"
        for r in rows:
            key = r["id"]
            current = self.live.get(key)
            if op == "DELETE":
                self._delete(tid, key, counts)
                continue
            if op == "PATCH":
                if current is None:
                    counts["skipped"] += 1
                    continue
                data = {**current[0], "age": r["age"]}
            elif op == "INSERT_IGNORE" and current is not None:
                counts["skipped"] += 1
                continue
            else:
                data = {"name": r["name"], "age": r["age"], "grp": r["grp"]}
            if current is None:
                version = self.tomb.pop(key, 0) + 1
                self.live[key] = (data, version)
                self.history.append((key, version, "i", tid))
                counts["inserted"] += 1
            elif current[0] == data:
                counts["unchanged"] += 1
            else:
                self.live[key] = (data, current[1] + 1)
                self.history.append((key, current[1] + 1, "u", tid))
                counts["updated"] += 1
        return counts

    def _delete(self, tid: str, key: str, counts: dict[str, int]) -> None:
        current = self.live.pop(key, None)
        if current is None:
            counts["skipped"] += 1
            return
        self.tomb[key] = current[1] + 1
        self.history.append((key, current[1] + 1, "d", tid))
        counts["deleted"] += 1


def generated_sequences(count: int) -> list[Any]:
    """``count`` sequences from hypothesis: one per example, so they cover its whole range (a
    single example holding a list would be hypothesis's simplest list: all alike)."""
    found: list[Any] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(sequence)
    def collect(generated: Any) -> None:
        found.append(generated)

    collect()
    return found


@pytest.mark.parametrize("fold", ["driver", "executors"])
def test_grouped_batch_equals_one_transaction_at_a_time(
    spark: SparkSession,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    fold: str,
) -> None:
    """Both ways the sink folds a table's changes (``apply.objects``): on the driver (small
    change sets, the usual micro-batch) and on the JVM (large ones, `streaming.apply.sqlfold`)."""
    if fold == "executors":
        monkeypatch.setattr(apply_module, "DRIVER_FOLD_MAX_ROWS", 0)
    sequences = generated_sequences(SEQUENCES)
    assert len(sequences) == SEQUENCES
    assert {op for _, txs in sequences for op, _ in txs} == set(OPS)
    assert sum(len(txs) >= 3 for _, txs in sequences) >= SEQUENCES // 10
    ws = Workspace(tmp_path_factory.mktemp("grouped"))
    ws.dataset("petstore", DATASET)
    model = Model()
    expected_counts: dict[str, dict[str, int]] = {}
    lines: list[str] = []
    sources: list[dict[str, Any]] = []
    for s, (src, txs) in enumerate(sequences):
        group = f"s{s}"
        source = [{**r, "id": f"s{s}-{r['id']}", "grp": group} for r in src]
        sources.extend(source)
        for t, (op, rows) in enumerate(txs):
            tid = f"s{s}-t{t}"
            prefixed = [{**r, "id": f"s{s}-{r['id']}", "grp": group} for r in rows]
            if op == "MERGE":
                action: dict[str, Any] = {
                    "operation": "MERGE",
                    "source": "petstore.Src",
                    "target": "petstore.Dog",
                    "query": "inGroup",
                    "arguments": {"g": group},
                }
                prefixed = source
            else:
                data = [
                    {"id": r["id"]}
                    if op == "DELETE"
                    else {"id": r["id"], "age": r["age"]}
                    if op == "PATCH"
                    else r
                    for r in prefixed
                ]
                ws.data(f"{tid}/petstore/Dog/part.json", *data)
                action = {"operation": op, "locationUri": f"./data/{tid}", "format": "JSON"}
            lines.append(request(tid, action))
            expected_counts[tid] = model.apply(tid, op, prefixed, group)

    job = Job.create(spark, ws.config())
    ws.data("src/petstore/Src/part.json", *sources, {"id": "unused", "grp": "none"})
    setup = request("setup", {"operation": "UPSERT", "locationUri": "./data/src", "format": "JSON"})
    first = job.sink.process(split_landing_file("file:/l/src.jsonl", T0, setup.encode(), T0), 0)
    assert [o.status for o in first] == [Status.COMMITTED]
    body = ("\n".join(lines) + "\n").encode()
    outcomes = job.sink.process(split_landing_file("file:/l/all.jsonl", T0, body, T0), 1)

    assert all(o.status is Status.COMMITTED for o in outcomes), [
        o.error for o in outcomes if o.error
    ][:3]
    got_counts = {
        o.transaction_id: o.actions[0].model_dump(include=set(expected_counts["s0-t0"]))
        for o in outcomes
    }
    assert got_counts == expected_counts

    paths = job.layout.object_table("petstore", "petstore.Dog")
    current = deltalake.DeltaTable(paths.current).to_pyarrow_table().to_pylist()
    assert sorted((r["id"], r["version"], r["name"], r["age"], r["grp"]) for r in current) == (
        sorted((k, v, d["name"], d["age"], d["grp"]) for k, (d, v) in model.live.items())
    )
    history = deltalake.DeltaTable(paths.history).to_pyarrow_table().to_pylist()
    assert sorted((h["id"], h["version"], h["__op"], h["__transaction_id"]) for h in history) == (
        sorted(model.history)
    )
    # Append-only tombstones: a deleted key's tombstone is its row with the largest version;
    # a key that is live again has a row in the current table, which wins.
    latest: dict[str, int] = {}
    for t in deltalake.DeltaTable(paths.tombstones).to_pyarrow_table().to_pylist():
        latest[t["id"]] = max(latest.get(t["id"], 0), t["version"])
    live = {r["id"] for r in current}
    assert {k: v for k, v in latest.items() if k not in live} == model.tomb
