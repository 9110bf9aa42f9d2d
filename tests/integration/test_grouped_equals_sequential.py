"""Grouped = sequential (docs/architecture.md, "Grouped = sequential"), as a property: many
random transaction sequences applied together in ONE micro-batch by the Spark engine give
exactly what an independent one-transaction-at-a-time model gives — rows, versions, history,
tombstones and outcome counts.

Each sequence works on its own ids (prefixed with its number) and its own group (``grp``), so all
of them can share one batch and one Spark run, and each is checked on its own. Inside a
sequence, transactions hit the same few ids in a random order, which is where grouping could go
wrong; the sequences' transactions are interleaved at random in the batch (each sequence's own
order kept). A sequence's MERGE reads its group of the source schema ``Src`` (written by an
earlier batch) and deletes the rows of its group that the source lacks: it reads the table the
batch writes, so the batch is cut into segments there (``core.steps``) — a segment per MERGE,
the cost of this test. So it is two tests: many sequences of the write-only operations (UPSERT,
PATCH, DELETE, INSERT_IGNORE: one segment), and fewer sequences with a few MERGEs among them
(one between other transactions of its sequence, asserted).

Random, reproducibly: the seed is printed and named in every failure; ``PROPERTY_SEED=<n>``
runs those sequences again. ``PROPERTY_EXAMPLES=<k>`` runs k times as many sequences (and
MERGEs): ``make test-property``, a release check. A failure reports only the sequences that
differ, each with its transactions and what differs, and runs them again alone in a fresh batch.
"""

from __future__ import annotations

import os
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

from streaming.apply import objects as apply_module
from streaming.core.batch import split_landing_file
from streaming.core.outcomes import Outcome, Status
from streaming.runtime.job import Job
from tests.support import Workspace, request

pytestmark = pytest.mark.spark

SEED_ENV = "PROPERTY_SEED"
EXAMPLES_ENV = "PROPERTY_EXAMPLES"
"""Not ``CDC_*`` names: those are configuration overrides (``core.config``), which a ``cdc``
process started with them set would refuse as unknown keys."""
SEED = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(1 << 32))
"""One seed per run (every test derives its own sequences from it)."""
SCALE = int(os.environ.get(EXAMPLES_ENV) or 1)
"""How many times the default number of sequences (and MERGEs) to run."""

WRITE_ONLY_SEQUENCES = 200
"""Sequences of the write-only test: one segment, however many."""
MERGE_SEQUENCES = 16
MERGES = 4
"""MERGEs among the transactions of the MERGE test's sequences: a segment each (each segment
~3 s of the test: 12 MERGEs among 24 sequences took 40-50 s a fold; ``make test-property``
runs 5 times these)."""
CONFIRM_AT_MOST = 5
"""A failure runs its differing sequences again alone when there are at most this many."""

IDS = ("a", "b", "c")
NAMES = ("Rex", "Fido", None)
AGES = (1, 2, None)
WRITE_OPS = ("UPSERT", "PATCH", "DELETE", "INSERT_IGNORE")
OPS = (*WRITE_OPS, "MERGE")
EFFECTS = ("inserted", "updated", "deleted", "unchanged", "skipped")
T0 = datetime(2024, 1, 1, tzinfo=UTC)
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

Row = dict[str, Any]


@dataclass
class Tx:
    op: str
    rows: list[Row]
    """Unprefixed rows (ids from ``IDS``); a MERGE's are its sequence's ``source``."""


@dataclass
class Seq:
    """One independent sequence: its rows of ``Src`` and its transactions, in order."""

    source: list[Row]
    txs: list[Tx]


def _rows(rng: random.Random, at_least: int) -> list[Row]:
    ids = sorted(rng.sample(IDS, rng.randint(at_least, len(IDS))))
    return [{"id": i, "name": rng.choice(NAMES), "age": rng.choice(AGES)} for i in ids]


def generate(rng: random.Random, count: int, merges: int) -> list[Seq]:
    """``count`` sequences of 1-4 write-only transactions, ``merges`` of their transactions then
    made MERGEs: the first in the middle of a sequence of 3 or more (so a MERGE is interleaved
    with other operations on the same ids), the rest anywhere."""
    sequences = [
        Seq(_rows(rng, 0), [Tx(rng.choice(WRITE_OPS), _rows(rng, 1)) for _ in range(n)])
        for n in (rng.randint(1, 4) for _ in range(count))
    ]
    if merges:
        inner = [(s, t) for s, q in enumerate(sequences) for t in range(1, len(q.txs) - 1)]
        first = rng.choice(inner)
        slots = [(s, t) for s, q in enumerate(sequences) for t in range(len(q.txs))]
        slots.remove(first)
        for s, t in [first, *rng.sample(slots, merges - 1)]:
            sequences[s].txs[t] = Tx("MERGE", sequences[s].source)
    return sequences


def interleave(rng: random.Random, sequences: Mapping[int, Seq]) -> list[tuple[int, int]]:
    """A random batch order of every (sequence, transaction), each sequence's own order kept."""
    turns = [s for s, q in sequences.items() for _ in q.txs]
    rng.shuffle(turns)
    nxt: dict[int, int] = defaultdict(int)
    order = []
    for s in turns:
        order.append((s, nxt[s]))
        nxt[s] += 1
    return order


@dataclass
class Model:
    """The reference: one transaction at a time, written independently of the engine."""

    live: dict[str, tuple[Row, int]] = field(default_factory=dict)
    tomb: dict[str, int] = field(default_factory=dict)
    history: list[tuple[str, int, str, str]] = field(default_factory=list)

    def apply(self, tid: str, op: str, rows: list[Row], group: str) -> dict[str, int]:
        counts = dict.fromkeys(EFFECTS, 0)
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


@dataclass
class Seen:
    """What one sequence left, as the engine wrote it or as the model says: lists of rows (a row
    written twice is two entries), each sorted."""

    outcomes: list[tuple[str, str, dict[str, int] | str]] = field(default_factory=list)
    """(transaction id, status, counts of its one action — or its error)."""
    current: list[tuple[str, int, str | None, int | None, str]] = field(default_factory=list)
    """(id, version, name, age, grp)."""
    history: list[tuple[str, int, str, str]] = field(default_factory=list)
    """(id, version, op, transaction id)."""
    tombstones: dict[str, int] = field(default_factory=dict)
    """Per deleted key not live again: its tombstone's version."""

    def differences(self, got: Seen) -> list[str]:
        return [
            f"  {name}:\n    expected {mine}\n    got      {theirs}"
            for name in ("outcomes", "current", "history", "tombstones")
            if (mine := getattr(self, name)) != (theirs := getattr(got, name))
        ]


def _sorted(items: list[Any]) -> list[Any]:
    """Sorted by their text: a total order even with None in them; duplicates kept."""
    return sorted(items, key=repr)


def _sent(op: str, rows: list[Row]) -> list[Row]:
    """The rows of a data file of ``op``: a DELETE's ids, a PATCH's ids and ages."""
    keep = {"DELETE": ("id",), "PATCH": ("id", "age")}.get(op)
    return [{k: v for k, v in r.items() if keep is None or k in keep} for r in rows]


def _prefixed(s: int, rows: list[Row]) -> list[Row]:
    return [{**r, "id": f"s{s}-{r['id']}", "grp": f"s{s}"} for r in rows]


def expected(s: int, seq: Seq) -> Seen:
    model = Model()
    outcomes = [
        (
            f"s{s}-t{t}",
            "COMMITTED",
            model.apply(f"s{s}-t{t}", tx.op, _prefixed(s, tx.rows), f"s{s}"),
        )
        for t, tx in enumerate(seq.txs)
    ]
    return Seen(
        outcomes=_sorted(outcomes),
        current=_sorted(
            [(k, v, d["name"], d["age"], d["grp"]) for k, (d, v) in model.live.items()]
        ),
        history=_sorted(model.history),
        tombstones=dict(model.tomb),
    )


def apply_together(
    spark: SparkSession, root: Path, sequences: Mapping[int, Seq], order: Sequence[tuple[int, int]]
) -> dict[int, Seen]:
    """Apply the sequences' transactions in ``order`` as one micro-batch (after a batch writing
    their ``Src`` rows) in a new workspace at ``root``; what each sequence left, by number."""
    ws = Workspace(root)
    ws.dataset("petstore", DATASET)
    lines: list[str] = []
    for s, t in order:
        tid, tx = f"s{s}-t{t}", sequences[s].txs[t]
        if tx.op == "MERGE":
            action: dict[str, Any] = {
                "operation": "MERGE",
                "source": "petstore.Src",
                "target": "petstore.Dog",
                "query": "inGroup",
                "arguments": {"g": f"s{s}"},
            }
        else:
            ws.data(f"{tid}/petstore/Dog/part.json", *_sent(tx.op, _prefixed(s, tx.rows)))
            action = {"operation": tx.op, "locationUri": f"./data/{tid}", "format": "JSON"}
        lines.append(request(tid, action))

    job = Job.create(spark, ws.config())
    if any(tx.op == "MERGE" for q in sequences.values() for tx in q.txs):
        sources = [r for s, q in sequences.items() for r in _prefixed(s, q.source)]
        ws.data("src/petstore/Src/part.json", *sources, {"id": "unused", "grp": "none"})
        setup = request(
            "setup", {"operation": "UPSERT", "locationUri": "./data/src", "format": "JSON"}
        )
        first = job.sink.process(split_landing_file("file:/l/src.jsonl", T0, setup.encode(), T0), 0)
        assert [(o.status, o.error) for o in first] == [(Status.COMMITTED, None)]
    body = ("\n".join(lines) + "\n").encode()
    outcomes = job.sink.process(split_landing_file("file:/l/all.jsonl", T0, body, T0), 1)

    seen: dict[int, Seen] = {s: Seen() for s in sequences}

    def owner(key: str) -> Seen:
        return seen[int(key.split("-")[0][1:])]

    for o in outcomes:
        assert o.transaction_id is not None, o
        owner(o.transaction_id).outcomes.append((o.transaction_id, o.status.value, _counts(o)))
    paths = job.layout.object_table("petstore", "petstore.Dog")
    current = deltalake.DeltaTable(paths.current).to_pyarrow_table().to_pylist()
    for r in current:
        owner(r["id"]).current.append((r["id"], r["version"], r["name"], r["age"], r["grp"]))
    for h in deltalake.DeltaTable(paths.history).to_pyarrow_table().to_pylist():
        owner(h["id"]).history.append((h["id"], h["version"], h["__op"], h["__transaction_id"]))
    # Append-only tombstones: a deleted key's tombstone is its row with the largest version;
    # a key that is live again has a row in the current table, which wins.
    live = {r["id"] for r in current}
    for t in deltalake.DeltaTable(paths.tombstones).to_pyarrow_table().to_pylist():
        if t["id"] not in live:
            latest = owner(t["id"]).tombstones
            latest[t["id"]] = max(latest.get(t["id"], 0), t["version"])
    for one in seen.values():
        one.outcomes, one.current, one.history = (
            _sorted(one.outcomes),
            _sorted(one.current),
            _sorted(one.history),
        )
    return seen


def _counts(outcome: Outcome) -> dict[str, int] | str:
    """The counts of a transaction's one action; its error when it has none (it failed, or was
    rejected), or when it has more than one."""
    if outcome.error is not None or len(outcome.actions) != 1:
        return f"{outcome.error} {outcome.actions}"
    counts: dict[str, int] = outcome.actions[0].model_dump(include=set(EFFECTS))
    return counts


def describe(s: int, seq: Seq, order: Sequence[tuple[int, int]]) -> str:
    position = {st: n for n, st in enumerate(order)}
    merges = any(tx.op == "MERGE" for tx in seq.txs)
    lines = [f"sequence s{s}" + (f": Src rows {seq.source}" if merges else "")]
    for t, tx in enumerate(seq.txs):
        rows = "(the Src rows of its group)" if tx.op == "MERGE" else _sent(tx.op, tx.rows)
        lines.append(f"  s{s}-t{t} (batch line {position[(s, t)] + 1}) {tx.op} {rows}")
    return "\n".join(lines)


def check(
    spark: SparkSession,
    tmp_path_factory: pytest.TempPathFactory,
    sequences: list[Seq],
    rng: random.Random,
    what: str,
) -> None:
    """Apply every sequence in one batch and compare each with the model; on a difference, fail
    naming only the sequences that differ (and whether each differs alone in a fresh batch)."""
    print(f"\n{what}: {len(sequences)} sequences, seed {SEED} ({SEED_ENV}={SEED} repeats them)")
    numbered = dict(enumerate(sequences))
    order = interleave(rng, numbered)
    want = {s: expected(s, q) for s, q in numbered.items()}
    got = apply_together(spark, tmp_path_factory.mktemp("grouped"), numbered, order)
    wrong = {s: diff for s in numbered if (diff := want[s].differences(got[s]))}
    if not wrong:
        return
    report = [
        f"grouped != sequential ({what}, seed {SEED}: rerun with {SEED_ENV}={SEED}): "
        f"{len(wrong)} of {len(sequences)} sequences differ: {', '.join(f's{s}' for s in wrong)}"
    ]
    alone: dict[int, Seen] = {}
    if len(wrong) <= CONFIRM_AT_MOST:
        chosen = {s: numbered[s] for s in wrong}
        alone_order = [st for st in order if st[0] in chosen]
        alone = apply_together(spark, tmp_path_factory.mktemp("alone"), chosen, alone_order)
    for s, diff in list(wrong.items())[:3]:
        report += [describe(s, numbered[s], order), *diff]
        if s in alone:
            again = want[s].differences(alone[s])
            report.append(
                "  alone in a fresh batch (with the other differing ones): "
                + ("differs too" if again else "matches: it takes the rest of the batch")
            )
    pytest.fail("\n".join(report), pytrace=False)


def _fold(monkeypatch: pytest.MonkeyPatch, fold: str) -> None:
    """Both ways the sink folds a table's changes (``apply.objects``): on the driver (small
    change sets, the usual micro-batch) and on the JVM (large ones, `streaming.apply.sqlfold`)."""
    if fold == "executors":
        monkeypatch.setattr(apply_module, "DRIVER_FOLD_MAX_ROWS", 0)


@pytest.mark.parametrize("fold", ["driver", "executors"])
def test_write_only_sequences_grouped_in_one_segment_equal_one_at_a_time(
    spark: SparkSession,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    fold: str,
) -> None:
    _fold(monkeypatch, fold)
    rng = random.Random(f"{SEED}:write-only:{fold}")
    count = WRITE_ONLY_SEQUENCES * SCALE
    sequences = generate(rng, count, merges=0)
    assert {tx.op for q in sequences for tx in q.txs} == set(WRITE_OPS)
    assert sum(len(q.txs) >= 3 for q in sequences) >= count // 10
    check(spark, tmp_path_factory, sequences, rng, f"write-only, fold on the {fold}")


@pytest.mark.parametrize("fold", ["driver", "executors"])
def test_sequences_with_merges_cut_into_segments_equal_one_at_a_time(
    spark: SparkSession,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    fold: str,
) -> None:
    _fold(monkeypatch, fold)
    rng = random.Random(f"{SEED}:merges:{fold}")
    count, merges = MERGE_SEQUENCES * SCALE, MERGES * SCALE
    sequences = generate(rng, count, merges)
    assert {tx.op for q in sequences for tx in q.txs} == set(OPS)
    assert sum(tx.op == "MERGE" for q in sequences for tx in q.txs) == merges
    assert sum(len(q.txs) >= 3 for q in sequences) >= count // 10
    assert any(
        q.txs[t].op == "MERGE" for q in sequences for t in range(1, len(q.txs) - 1)
    )  # a MERGE between other transactions of its sequence
    check(spark, tmp_path_factory, sequences, rng, f"with {merges} MERGEs, fold on the {fold}")
