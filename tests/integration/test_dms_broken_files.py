"""Issue 37 item 5: every file landed in the DMS zone gets exactly one outcome.

Broken files among good ones in one micro-batch — an ``Op`` that is not I, U or D, a file of 0
bytes, a Parquet file cut in half, two files that are not Parquet — are each REJECTED with their
own code and quarantined, the good ones COMMITTED, with one log line per rejected file and no
Java stack trace; a file being written under a name the zone ignores is not listed until it is
renamed in, and a file is never read again under its name, even after it changed.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from streaming.core.errors import RejectedError
from streaming.core.outcomes import Outcome, Status
from streaming.core.plan import Location
from streaming.inputs.loads import _check_parquet_frame
from streaming.storage.tables import read_table
from tests.support import Workspace
from tests.support.dms import ORDER, config, current, dms_workspace, order, parquet_bytes
from tests.support.spark_log import probe, spark_log

pytestmark = pytest.mark.spark

ORDER_FOLDER = "sales/sales/Order"
VALID = parquet_bytes([order("o9", 100, "new", "I")], ORDER)
"""A valid DMS file's bytes (its first half is the truncated file)."""

GOOD_1, OP_X, EMPTY, TRUNCATED = "1.parquet", "2-op-x.parquet", "3 empty%.parquet", "4.parquet"
NOT_PARQUET, BAD_FOOTER, GOOD_2 = "5-text.parquet", "6-bad-footer.parquet", "7 b%.parquet"
HIDDEN, LANDED = ".8-being-written.parquet", "8.parquet"
"""A file written under a name the zone ignores (leading dot), then renamed into it."""
IGNORED = ("_9-being-written.parquet", "9.parquet.tmp")
"""Other names the zone ignores: never listed."""

REJECTED = {
    OP_X: (
        "INVALID_DMS_OPERATION",
        "row 3: Op 'X' is not I, U or D (2 rows have an Op that is not I, U or D)",
    ),
    EMPTY: ("EMPTY_FILE", "the file is empty (0 bytes)"),
    TRUNCATED: ("TRUNCATED_FILE", "truncated Parquet file"),
    NOT_PARQUET: ("UNREADABLE_DATA", "not a Parquet file"),
    BAD_FOOTER: ("UNREADABLE_DATA", "not a valid Parquet file"),
}
JAVA_TRACE = re.compile(r"^\s+at [\w$.]+\(|\bERROR\b|Exception", re.M)
"""A Java stack frame (``\tat org.apache...(File.java:1)``), an ERROR line, an exception."""


def _name(outcome: Outcome) -> str:
    return outcome.source.rsplit("/", 1)[-1]


def _outcomes(spark: SparkSession, ws: Workspace) -> list[Outcome]:
    rows = read_table(spark, str(ws.root / "warehouse" / "_system" / "outcomes")).collect()
    return sorted((Outcome.from_json(r["outcome"]) for r in rows), key=_name)


def _quarantine(spark: SparkSession, ws: Workspace) -> list[tuple[Any, ...]]:
    rows = read_table(spark, str(ws.root / "warehouse" / "_system" / "quarantine")).collect()
    return sorted(
        (
            r["source"].rsplit("/", 1)[-1],
            r["transaction_id"],
            r["error_code"],
            json.loads(r["payload"])["transactionId"],
        )
        for r in rows
    )


def _land(ws: Workspace) -> Path:
    """The first run's files: good ones around each kind of broken one; the hidden one."""
    zone = dms_workspace(ws)
    folder = zone.folder("sales.Order")
    zone.drop(
        "sales.Order",
        GOOD_1,
        [order("o1", 100, "new", "I"), order("o2", 100, "new", "I")],
        ORDER,
    )
    # Read in one scan with the good files (same Parquet columns): only its rows are dropped.
    zone.drop(
        "sales.Order",
        OP_X,
        [
            order("o1", 200, "paid", "U"),
            order("o3", 100, "new", "I"),
            order("o4", 100, "new", "X"),
            order("o5", 100, "new"),  # NULL
        ],
        ORDER,
    )
    zone.put("sales.Order", EMPTY, b"")
    zone.put("sales.Order", TRUNCATED, VALID[: len(VALID) // 2])
    zone.put("sales.Order", NOT_PARQUET, b"ID,STATUS\no9,new\n")
    zone.put("sales.Order", BAD_FOOTER, b"PAR1 this is not parquet PAR1")
    zone.drop(
        "sales.Order",
        GOOD_2,
        [order("o2", 300, "paid", "U"), order("o6", 100, "new", "I")],
        ORDER,
    )
    for name in (HIDDEN, *IGNORED):
        zone.put("sales.Order", name, VALID)
    return folder


def test_every_landed_file_gets_one_outcome_and_a_broken_one_no_stack_trace(
    spark: SparkSession, ws: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    folder = _land(ws)
    caplog.set_level(logging.WARNING)
    with spark_log(spark) as logged:
        job = ws.run_once(spark, config(ws))
        probe(spark, "spark log probe")  # the capture sees what Spark's JVM logs

    # One outcome row per listed file, the hidden ones not listed; each in the first batch.
    found = _outcomes(spark, ws)
    expected = sorted([GOOD_1, OP_X, EMPTY, TRUNCATED, NOT_PARQUET, BAD_FOOTER, GOOD_2])
    assert [_name(o) for o in found] == expected
    assert {o.batch_id for o in found} == {0}
    assert [o.transaction_id for o in found] == [f"dms:{ORDER_FOLDER}/{n}" for n in expected]
    by_name = {_name(o): o for o in found}
    for name, outcome in by_name.items():
        if name in REJECTED:
            assert outcome.status is Status.REJECTED, name
            assert outcome.error is not None and not outcome.actions, name
            code, said = REJECTED[name]
            assert outcome.error.code == code, (name, outcome.error)
            assert said in outcome.error.message and name in outcome.error.message, name
        else:
            assert outcome.status is Status.COMMITTED, (name, outcome.error)
    good_1, good_2 = by_name[GOOD_1].actions[0], by_name[GOOD_2].actions[0]
    assert (good_1.inserted, good_2.inserted, good_2.updated) == (2, 1, 1)

    # Only the good files' rows: nothing of a rejected file (o1's update, o3) was applied.
    orders = job.layout.table("sales", "sales.Order")
    assert current(orders, "id", "version", "status", "ts") == [
        ("o1", 1, "new", 100),
        ("o2", 2, "paid", 300),
        ("o6", 1, "new", 100),
    ]

    # Each rejected file's request quarantined once, with its code.
    assert _quarantine(spark, ws) == sorted(
        (name, f"dms:{ORDER_FOLDER}/{name}", code, f"dms:{ORDER_FOLDER}/{name}")
        for name, (code, _) in REJECTED.items()
    )

    # One log line per rejected file, naming the file and the code; no Java stack trace.
    rejected = sorted(
        (r.getMessage().split(" REJECTED ")[0].rsplit("/", 1)[-1], r.getMessage())
        for r in caplog.records
        if " REJECTED " in r.getMessage()
    )
    assert [name for name, _ in rejected] == sorted(REJECTED)
    for name, message in rejected:
        assert f"[{REJECTED[name][0]}]" in message, message
    seen = "ERROR cdc.test.probe: spark log probe"
    assert seen in logged.lines, logged.text[-5000:]
    spark_said = "\n".join(line for line in logged.lines if line != seen)
    assert JAVA_TRACE.findall(spark_said) == [], spark_said[-5000:]

    # The stream goes on. The empty file filled later is not read again under its name; the
    # hidden file renamed into the zone (a complete file landed atomically) is read.
    (folder / EMPTY).write_bytes(VALID)
    (folder / HIDDEN).rename(folder / LANDED)
    ws.run_once(spark, config(ws))
    later = _outcomes(spark, ws)
    assert [_name(o) for o in later] == sorted([*expected, LANDED])
    landed = next(o for o in later if _name(o) == LANDED)
    assert (landed.status, landed.batch_id) == (Status.COMMITTED, 1)
    assert next(o for o in later if _name(o) == EMPTY).error == by_name[EMPTY].error
    assert ("o9", 1, "new", 100) in current(orders, "id", "version", "status", "ts")


def test_files_on_a_hadoop_file_system_are_checked_alike(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The frame check reads a local file directly and any other (``s3a://``) through Hadoop's
    file system: the same verdicts both ways (here ``file:`` URIs through Hadoop)."""
    contents = {
        "good.parquet": VALID,
        "empty.parquet": b"",
        "half.parquet": VALID[: len(VALID) // 2],
        "text.parquet": b"ID,STATUS\n",
        "footer.parquet": b"PAR1 this is not parquet PAR1",
    }
    verdicts: dict[bool, list[tuple[str, str | None]]] = {}
    for local in (True, False):
        verdicts[local] = []
        for name, content in contents.items():
            path = tmp_path / name
            path.write_bytes(content)
            where = Location(str(path) if local else path.as_uri(), local, is_file=True)
            try:
                _check_parquet_frame(spark, where, name)
                verdicts[local].append((name, None))
            except RejectedError as e:
                assert e.message.startswith(f"{name}: "), e.message
                verdicts[local].append((name, e.code))
    assert verdicts[True] == [
        ("good.parquet", None),
        ("empty.parquet", "EMPTY_FILE"),
        ("half.parquet", "TRUNCATED_FILE"),
        ("text.parquet", "UNREADABLE_DATA"),
        ("footer.parquet", "UNREADABLE_DATA"),
    ]
    assert verdicts[False] == verdicts[True]
