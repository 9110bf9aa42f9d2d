"""The bad-input catalogue (issue 5): every kind of bad request or bad data we know of, in one
landing file between good transactions, run through the real job once.

Each kind must be REJECTED with its own error code, its raw bytes kept in ``_system/quarantine``,
while the stream goes on: the good transactions before and after it in the same micro-batch are
COMMITTED with the right rows, and a later run (same checkpoint) still commits. Each kind is its
own test case (``test_kind_is_rejected_with_its_code[<kind>]``) over one module-scoped job run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from streaming.core.outcomes import Outcome, Status
from streaming.runtime.job import Job
from streaming.storage.tables import read_table
from tests.support import Workspace

pytestmark = pytest.mark.spark

PETSTORE = """\
petstore.Dog:
  properties:
    name: {type: string}
    age: {type: integer}
    ownerName: {type: string}
    fee: {type: decimal, precision: 10, scale: 2}
petstore.DogChange:
  properties:
    status: {type: string}
    name: {type: string}
  queries:
    withStatus:
      arguments: [{name: inputStatus, type: string}]
      expression: status == inputStatus
"""


def _request(tid: Any, *actions: dict[str, Any], dataset: str = "petstore", **extra: Any) -> bytes:
    body: dict[str, Any] = {"transactionId": tid, "dataset": dataset, "actions": list(actions)}
    return json.dumps({**body, **extra}).encode()


def _upsert(location: str, **extra: Any) -> dict[str, Any]:
    return {"operation": "UPSERT", "locationUri": location, "format": "JSON", **extra}


def _from_changes(**extra: Any) -> dict[str, Any]:
    """UPSERT into Dog from the DogChange schema (a source-schema action)."""
    return {
        "operation": "UPSERT",
        "target": "petstore.Dog",
        "source": "petstore.DogChange",
        **extra,
    }


ROOT = "@ROOT@"
"""Stands for the workspace's absolute path in a request line (written with the real path)."""


@dataclass(frozen=True)
class Kind:
    """One kind of bad input: its request line, the code it must get, the id its outcome
    carries (None: the id cannot be read) and, for bad data, the files it reads."""

    name: str
    line: bytes
    code: str
    tid: str | None
    data: tuple[tuple[str, bytes], ...] = ()
    """(path under the workspace's ``data/``, content)."""


def _json_lines(*rows: dict[str, Any] | str) -> bytes:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows).encode()


def _parquet(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


def _bad_data(name: str, code: str, content: bytes, fmt: str = "JSON") -> Kind:
    """A request that upserts the files of ``data/bad/<name>`` (Dog data, ``content``)."""
    suffix = "parquet" if fmt == "PARQUET" else "json"
    tid = f"bad-{name}"
    return Kind(
        name,
        _request(tid, _upsert(f"./data/bad/{name}", format=fmt)),
        code,
        tid,
        ((f"bad/{name}/petstore/Dog/part.{suffix}", content),),
    )


def _bad(name: str, code: str, *actions: dict[str, Any], **extra: Any) -> Kind:
    return Kind(name, _request(f"bad-{name}", *actions, **extra), code, f"bad-{name}")


def _raw(name: str, code: str, line: bytes, tid: str | None) -> Kind:
    return Kind(name, line, code, tid)


KINDS: list[Kind] = [
    # -- the request itself: bytes, JSON, shape ------------------------------------------------
    _raw(
        "truncated-json",
        "INVALID_JSON",
        b'{"transactionId": "bad-truncated-json", "act',
        "bad-truncated-json",
    ),
    _raw(
        "not-utf8",
        "INVALID_ENCODING",
        b'{"transactionId": "bad-not-utf8", "dataset": "petstore\xff\xfe", "actions": []}',
        "bad-not-utf8",
    ),
    _raw(
        "lone-surrogate-escape",
        "INVALID_ENCODING",
        b'{"transactionId": "bad-\\ud800", "dataset": "petstore", "actions": '
        b'[{"operation": "UPSERT", "locationUri": "./data/good1"}]}',
        None,
    ),
    _raw(
        "too-large",
        "MESSAGE_TOO_LARGE",
        _request("bad-too-large", _upsert("./data/good1"), padding="x" * 1_000_001),
        "bad-too-large",
    ),
    _raw(
        "deep-nesting",
        "TOO_DEEPLY_NESTED",
        b'{"transactionId": "bad-deep-nesting", "dataset": "petstore", "actions": '
        + b"[" * 50_000
        + b"]" * 50_000
        + b"}",
        "bad-deep-nesting",
    ),
    _raw("not-an-object", "NOT_AN_OBJECT", b'["bad-not-an-object"]', None),
    _raw(
        "no-transaction-id",
        "MISSING_TRANSACTION_ID",
        json.dumps({"dataset": "petstore", "actions": [_upsert("./data/good1")]}).encode(),
        None,
    ),
    _raw(
        "numeric-transaction-id",
        "INVALID_TRANSACTION_ID",
        _request(7, _upsert("./data/good1")),
        None,
    ),
    _raw(
        "transaction-id-too-long",
        "INVALID_TRANSACTION_ID",
        _request("x" * 257, _upsert("./data/good1")),
        "x" * 257,
    ),
    _raw(
        "no-dataset",
        "MISSING_DATASET",
        json.dumps(
            {"transactionId": "bad-no-dataset", "actions": [_upsert("./data/good1")]}
        ).encode(),
        "bad-no-dataset",
    ),
    _raw(
        "no-actions",
        "MISSING_ACTIONS",
        json.dumps({"transactionId": "bad-no-actions", "dataset": "petstore"}).encode(),
        "bad-no-actions",
    ),
    _bad("empty-actions", "EMPTY_ACTIONS"),
    _bad("unknown-field", "UNKNOWN_FIELD", _upsert("./data/good1", colour="red")),
    _bad("no-location-or-source", "MISSING_FIELD", {"operation": "UPSERT", "format": "JSON"}),
    _bad("arguments-not-an-object", "INVALID_FIELD", _from_changes(arguments=["ready"])),
    _bad("unknown-operation", "UNKNOWN_OPERATION", _upsert("./data/good1", operation="UPSERTT")),
    _bad("unknown-format", "UNKNOWN_FORMAT", _upsert("./data/good1", format="CSV")),
    _bad(
        "unknown-column-format",
        "UNKNOWN_COLUMN_FORMAT",
        _upsert("./data/good1", columnFormat="SHOUTING"),
    ),
    _raw(
        "transaction-id-reused",
        "TRANSACTION_ID_REUSED",
        _request("good-before", _upsert("./data/good2")),
        "good-before",
    ),
    # -- what the request names: dataset, schemas, locations, queries ------------------------
    _bad("unknown-dataset", "UNKNOWN_DATASET", _upsert("./data/good1"), dataset="nosuch"),
    _bad("unknown-target", "UNKNOWN_SCHEMA", _upsert("./data/good1", target="petstore.Cat")),
    _bad(
        "record-action-on-object",
        "WRONG_SCHEMA_KIND",
        {"operation": "INSERT_RECORD", "locationUri": "./data/good1", "target": "petstore.Dog"},
    ),
    _bad("empty-location", "INVALID_LOCATION", _upsert("")),
    _bad("blank-location", "INVALID_LOCATION", _upsert("   ")),
    _bad("nul-in-location", "INVALID_LOCATION", _upsert("./data/good1\u0000/x")),
    _bad("malformed-uri", "INVALID_LOCATION", _upsert("s3a://[bucket/data")),
    _bad("ftp-location", "UNSUPPORTED_SCHEME", _upsert("ftp://example.com/data")),
    _bad("dotdot-escape", "LOCATION_NOT_ALLOWED", _upsert("./data/../outside")),
    _bad("symlink-escape", "LOCATION_NOT_ALLOWED", _upsert("./data/escape")),
    _bad("absolute-outside", "LOCATION_NOT_ALLOWED", _upsert("/etc")),
    _bad("s3a-not-allowed", "LOCATION_NOT_ALLOWED", _upsert("s3a://bucket/data")),
    _bad("missing-location", "LOCATION_NOT_FOUND", _upsert("./data/missing")),
    _bad(
        "delta-source-not-a-table",
        "UNREADABLE_DATA",
        _upsert(f"delta://{ROOT}/data/good1", target="petstore.Dog"),
    ),
    _bad(
        "catalog-table-missing",
        "UNREADABLE_DATA",
        _upsert("table://default.no_such_table", target="petstore.Dog"),
    ),
    _bad("no-data-for-schema", "NO_DATA_FOR_SCHEMA", _upsert("./data/nodata")),
    _bad("unknown-query", "UNKNOWN_QUERY", _from_changes(query="nosuch")),
    _bad(
        "unknown-argument",
        "UNKNOWN_ARGUMENT",
        _from_changes(query="withStatus", arguments={"inputStatus": "ready", "colour": "red"}),
    ),
    _bad("missing-argument", "MISSING_ARGUMENT", _from_changes(query="withStatus")),
    _bad(
        "argument-type",
        "ARGUMENT_TYPE_MISMATCH",
        _from_changes(query="withStatus", arguments={"inputStatus": 5}),
    ),
    _bad(
        "query-not-applicable",
        "QUERY_NOT_APPLICABLE",
        _from_changes(operation="MERGE", query="withStatus", arguments={"inputStatus": "ready"}),
    ),
    # -- the data the request points at -----------------------------------------------------
    _bad_data("corrupt-parquet", "UNREADABLE_DATA", b"PAR1 this is not parquet PAR1", "PARQUET"),
    _bad_data("no-id-column", "MISSING_ID_COLUMN", _json_lines({"name": "Nobody"})),
    _bad_data(
        "ambiguous-column",
        "AMBIGUOUS_COLUMN",
        _json_lines({"id": "a1", "owner_name": "Ann", "OWNERNAME": "Bob"}),
    ),
    _bad_data(
        "truncated-data-line",
        "CORRUPT_RECORD",
        _json_lines({"id": "c1", "name": "Ok"}, '{"id": "c2", "na'),
    ),
    _bad_data("null-id", "MISSING_ID", _json_lines({"id": "m1"}, {"id": None, "name": "Anon"})),
    _bad_data("every-id-null", "MISSING_ID", _json_lines({"id": None, "name": "Anon"})),
    _bad_data("absent-id", "MISSING_ID", _json_lines({"id": "m2"}, {"name": "No id key"})),
    _bad_data("duplicate-id", "DUPLICATE_ID", _json_lines({"id": "d1"}, {"id": "d1"})),
    _bad_data(
        "duplicate-id-other-values",
        "DUPLICATE_ID",
        _json_lines({"id": "d2", "name": "a"}, {"id": "d2", "name": "b"}),
    ),
    _bad_data("text-in-integer", "TYPE_MISMATCH", _json_lines({"id": "t1", "age": "old"})),
    _bad_data("object-in-integer", "TYPE_MISMATCH", _json_lines({"id": "t2", "age": {"y": 3}})),
    # A value a decimal(10,2) takes only rounded (issue 57): never rounded, from a JSON number,
    # JSON text, or a Parquet decimal of a larger scale (DMS's and Parquet files' columns).
    _bad_data("decimal-json-number", "TYPE_MISMATCH", _json_lines({"id": "f1", "fee": 1.005})),
    _bad_data("decimal-json-text", "TYPE_MISMATCH", _json_lines({"id": "f2", "fee": "2.999"})),
    _bad_data(
        "decimal-parquet-scale",
        "TYPE_MISMATCH",
        _parquet(
            pa.table({"id": ["f3"], "fee": pa.array([Decimal("3.1415")], pa.decimal128(10, 4))})
        ),
        "PARQUET",
    ),
    _bad_data(
        "parquet-column-type",
        "TYPE_MISMATCH",
        _parquet(pa.table({"id": ["t3"], "age": pa.array([[1, 2]], pa.list_(pa.int64()))})),
        "PARQUET",
    ),
    _bad_data(
        "parquet-text-in-integer",
        "TYPE_MISMATCH",
        _parquet(pa.table({"id": ["t4"], "age": ["three"]})),
        "PARQUET",
    ),
]

GOOD_BEFORE = _request("good-before", _upsert("./data/good1"))
GOOD_AFTER = _request("good-after", _upsert("./data/good2"))
GOOD_LATER = _request("good-later", _upsert("./data/good3"))
DOGS_AFTER_RUN_1 = [("dog1", 2, "Rex", 4), ("dog2", 1, "Fido", 5), ("dog3", 1, "Lassie", 2)]


@dataclass
class Run:
    """What the module's job runs left: outcomes and quarantined rows by landing line."""

    job: Job
    outcomes: dict[int, Outcome]
    """Run 1's outcomes by line number of its landing file."""
    quarantine: dict[int, dict[str, Any]]
    lines: dict[int, bytes]
    later: dict[str, Outcome]
    """Run 2's outcomes by transaction id."""
    dogs_after_run_1: list[tuple[Any, ...]]


def _line_number(source: str) -> int:
    return int(source.rsplit(":", 1)[1])


def _write(root: Path, relative: str, content: bytes) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


def _dogs(path: str) -> list[tuple[Any, ...]]:
    table = deltalake.DeltaTable(path).to_pyarrow_table(columns=["id", "version", "name", "age"])
    return sorted(tuple(r.values()) for r in table.to_pylist())


@pytest.fixture(scope="module")
def run(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    ws = Workspace(tmp_path_factory.mktemp("bad_input"))
    ws.dataset("petstore", PETSTORE)
    data = ws.root / "data"
    ws.data("good1/petstore/Dog/part.json", {"id": "dog1", "name": "Rex", "age": 3})
    ws.data("good1/petstore/Dog/more.json", {"id": "dog2", "name": "Fido", "age": 5})
    ws.data(
        "good2/petstore/Dog/part.json",
        {"id": "dog1", "name": "Rex", "age": 4},
        {"id": "dog3", "name": "Lassie", "age": 2},
    )
    ws.data("good3/petstore/Dog/part.json", {"id": "dog4", "name": "Pluto", "age": 9})
    ws.data("nodata/petstore/Cat/part.json", {"id": "cat1"})
    _write(ws.root, "outside/petstore/Dog/part.json", b'{"id": "evil", "name": "Outside"}\n')
    os.symlink(ws.root / "outside", data / "escape")
    for kind in KINDS:
        for relative, content in kind.data:
            _write(data, relative, content)

    root = str(ws.root).encode()
    lines = [GOOD_BEFORE, *(k.line.replace(ROOT.encode(), root) for k in KINDS), GOOD_AFTER]
    assert all(b"\n" not in line for line in lines)
    (ws.landing / "0001.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    cfg = ws.config()
    job = ws.run_once(spark, cfg)
    layout = job.layout
    found = read_table(spark, layout.outcomes).collect()
    outcomes = {_line_number(r["source"]): Outcome.from_json(r["outcome"]) for r in found}
    assert len(outcomes) == len(found) == len(lines)  # one outcome per request line
    quarantined = deltalake.DeltaTable(layout.quarantine).to_pyarrow_table().to_pylist()
    quarantine = {_line_number(q["source"]): q for q in quarantined}
    assert len(quarantine) == len(quarantined)
    dogs = _dogs(layout.table("petstore", "petstore.Dog"))

    # The stream goes on: the next file is read by the same query (same checkpoint).
    (ws.landing / "0002.jsonl").write_bytes(GOOD_LATER + b"\n")
    job = ws.run_once(spark, cfg)
    later = {
        r["transaction_id"]: Outcome.from_json(r["outcome"])
        for r in read_table(spark, layout.outcomes).where("batch_id > 0").collect()
    }
    yield Run(job, outcomes, quarantine, dict(enumerate(lines, start=1)), later, dogs)


def test_the_catalogue_has_at_least_30_codes() -> None:
    assert len({k.code for k in KINDS}) >= 30
    assert len({k.name for k in KINDS}) == len(KINDS)


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_kind_is_rejected_with_its_code_and_quarantined(run: Run, kind: Kind) -> None:
    number = KINDS.index(kind) + 2  # line 1 is GOOD_BEFORE
    outcome = run.outcomes[number]
    assert outcome.status is Status.REJECTED
    assert outcome.error is not None
    assert (outcome.error.code, outcome.transaction_id) == (kind.code, kind.tid), (
        outcome.error.message
    )
    assert not outcome.table_versions and not outcome.actions
    kept = run.quarantine[number]
    assert (kept["error_code"], kept["transaction_id"], kept["payload"]) == (
        kind.code,
        kind.tid,
        run.lines[number],
    )
    assert kept["error_message"] == outcome.error.message


def test_a_type_mismatch_names_the_columns_whose_values_do_not_fit(run: Run) -> None:
    mismatched = [k for k in KINDS if k.code == "TYPE_MISMATCH"]
    assert len(mismatched) == 7
    for kind in mismatched:
        error = run.outcomes[KINDS.index(kind) + 2].error
        assert error is not None
        if kind.name.startswith("decimal-"):
            assert "'fee'" in error.message, error.message
            assert "fee: decimal(10,2), at most 8 digits before the point and 2 after" in (
                error.message
            )
        else:
            assert "'age'" in error.message, error.message


def test_good_transactions_around_the_bad_ones_commit(run: Run) -> None:
    first, last = run.outcomes[1], run.outcomes[len(run.lines)]
    assert (first.transaction_id, first.status) == ("good-before", Status.COMMITTED)
    assert (last.transaction_id, last.status) == ("good-after", Status.COMMITTED)
    assert (first.actions[0].inserted, last.actions[0].inserted, last.actions[0].updated) == (
        2,
        1,
        1,
    )
    assert first.batch_id == last.batch_id == 0  # one micro-batch with every bad kind
    # Only the good data is in the table: nothing of a rejected transaction was applied.
    assert run.dogs_after_run_1 == DOGS_AFTER_RUN_1
    assert set(run.quarantine) == set(run.lines) - {1, len(run.lines)}


def test_the_stream_goes_on_after_the_bad_batch(run: Run) -> None:
    assert run.later["good-later"].status is Status.COMMITTED
    assert run.later["good-later"].batch_id == 1
    dogs = _dogs(run.job.layout.table("petstore", "petstore.Dog"))
    assert dogs == [*DOGS_AFTER_RUN_1, ("dog4", 1, "Pluto", 9)]
    changes = deltalake.DeltaTable(run.job.layout.table("petstore", "petstore.DogChange"))
    assert changes.to_pyarrow_table().num_rows == 0
