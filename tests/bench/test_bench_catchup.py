"""The CatchUp workload's pure parts (issue 48): the snapshot's records (tests/support/
snapshot.py), the transactions after it, the expected state, and the results' lines. No Spark,
no broker."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from typing import Any

from bench import data, events
from bench.catchup import (
    EVENTS_PER_TX,
    config,
    error_line,
    out_of_memory,
    records,
    render_lines,
    transactions,
)
from bench.sizes import FULL, QUICK
from tests.bench.results import rendered
from tests.support.debezium import Topics
from tests.support.snapshot import (
    KEY_PREFIX,
    SNAPSHOT_LSN,
    compare_rows,
    expected_count,
    snapshot_mark,
    snapshot_records,
    snapshot_row,
    snapshot_values,
)

TABLES = list(events.SCHEMAS.values())


def test_a_snapshot_read_is_what_topics_event_writes_byte_for_byte() -> None:
    rows = 4
    made = list(snapshot_records("pfx", TABLES, rows))
    assert len(made) == rows * len(TABLES)
    topics = Topics(prefix="pfx")
    for index, (topic, key, value) in enumerate(made):
        table, number = TABLES[index // rows], index % rows
        want = topics.event(
            table,
            "r",
            snapshot_row(number),
            lsn=SNAPSHOT_LSN,
            snapshot=snapshot_mark(index, len(made)),
        )
        assert (topic, key, value) == (want.topic, want.key, want.value)


def test_the_snapshot_is_marked_first_true_last_without_transactions_at_one_lsn() -> None:
    values = [json.loads(v or b"") for _, _, v in snapshot_records("p", TABLES, 3)]
    assert [v["source"]["snapshot"] for v in values] == ["first"] + ["true"] * 4 + ["last"]
    assert {v["op"] for v in values} == {"r"}
    assert all(v["transaction"] is None and v["before"] is None for v in values)
    assert {v["source"]["lsn"] for v in values} == {SNAPSHOT_LSN}


def test_the_snapshot_keys_are_those_the_events_update_and_come_before_every_change() -> None:
    assert KEY_PREFIX == data.W2_PREFIX
    assert snapshot_row(42)["id"] == data.key(data.W2_PREFIX, 42)
    assert set(snapshot_row(7)) == {"id", *events.PROPS}
    txs = events.event_transactions(300, 50, per_tx=(3, 3))
    changed = [json.loads(r.value) for r in events.event_records(txs, "p") if r.value]
    lsns = [v["source"]["lsn"] for v in changed if "source" in v]
    assert lsns and min(lsns) > SNAPSHOT_LSN


def test_catch_up_transactions_have_three_events_each() -> None:
    sizes = replace(QUICK, catchup_rows=1_000, catchup_transactions=500)
    txs = transactions(sizes)
    assert len(txs) == 500
    assert {len(tx.changes) for tx in txs} == {EVENTS_PER_TX}
    ops = Counter(c.op for tx in txs for c in tx.changes)
    assert ops["u"] > ops["c"] > 0 and ops["d"] > 0
    assert (FULL.catchup_rows, FULL.catchup_transactions) == (1_000_000, 20_000)
    assert (QUICK.catchup_rows, QUICK.catchup_transactions) == (100_000, 2_000)


def test_the_default_events_per_transaction_is_unchanged() -> None:
    assert events.event_transactions(400, 300) == events.event_transactions(
        400, 300, per_tx=events.EVENTS_PER_TX
    )


def test_records_are_the_snapshot_then_the_transactions() -> None:
    sizes = replace(QUICK, catchup_rows=10, catchup_transactions=5)
    txs = transactions(sizes)
    made = list(records("p", 10, txs))
    assert [t for t, _, _ in made[:20]] == ["p.public.accounts"] * 10 + ["p.public.payments"] * 10
    rest = [json.loads(v) for t, _, v in made[20:] if t == "p.transaction" and v]
    assert [b["status"] for b in rest] == ["BEGIN", "END"] * 5


def test_the_expected_state_counts_deletes_and_inserts() -> None:
    touched: dict[str, tuple[Any, ...] | None] = {
        "a000000001": None,  # a snapshot key deleted
        "a000000002": ("x", 1, "new"),  # updated
        "a500000000": ("y", 2, "new"),  # inserted
        "a500000001": None,  # inserted, then deleted
    }
    assert expected_count(10, touched) == 10 - 1 + 1
    ids = [f"a{n:09d}" for n in range(10) if n != 1] + ["a500000000"]
    values = [touched[i] or () if i in touched else snapshot_values(int(i[1:])) for i in ids]
    assert compare_rows(ids, values, 10, touched)["ok"]
    wrong = compare_rows(ids[:-1], values[:-1], 10, touched)
    assert (wrong["missing"], wrong["ok"]) == (1, False)
    values[0] = ("z", 0, "new")
    assert compare_rows(ids, values, 10, touched)["differ"] == 1


def test_the_config_sets_the_driver_memory_only_when_asked() -> None:
    class Broker:
        bootstrap = "127.0.0.1:9"

    broker: Any = Broker()
    default = config(broker, "p")
    assert default["spark"] == {"shuffle_partitions": 4, "conf": {}}
    assert "max_offsets_per_trigger" not in default["kafka"]
    assert config(broker, "p", "4g")["spark"]["conf"] == {"spark.driver.memory": "4g"}
    assert default["kafka"]["change_feeds"][0]["topic_prefix"] == "p"


def test_an_out_of_memory_error_and_the_call_that_raised_it() -> None:
    log = (
        'Exception: java.lang.OutOfMemoryError thrown from the UncaughtExceptionHandler in "t"\n'
        "py4j.protocol.Py4JJavaError: An error occurred while calling o289.collectToPython.\n"
        ": java.lang.OutOfMemoryError: Java heap space\n"
        "\n"
    )
    assert out_of_memory(log) == (
        "py4j.protocol.Py4JJavaError: An error occurred while calling o289.collectToPython. "
        ": java.lang.OutOfMemoryError: Java heap space"
    )
    assert out_of_memory(log.splitlines()[0]) == log.splitlines()[0]
    assert out_of_memory("fine") is None


def test_the_error_line_of_a_failed_run() -> None:
    log = "WARN something\ncdc: error [QUERY_FAILED]: the query failed: OutOfMemoryError\nmore\n"
    assert error_line(log) == "cdc: error [QUERY_FAILED]: the query failed: OutOfMemoryError"
    assert error_line("nothing here") is None


def _result(*, failed: bool) -> dict[str, Any]:
    check = {
        "rows": {s: {"expected": 100, "ours": 100, "plain": 100} for s in events.SCHEMAS},
        "ours": {s: {"ok": not failed} for s in events.SCHEMAS},
        "plain": {s: {"ok": True} for s in events.SCHEMAS},
        "same_rows": not failed,
    }
    ours: dict[str, Any] = {
        "seconds": 80.5,
        "phases": {"python-session": 4.0},
        "exit_code": 2 if failed else 0,
        "failed": failed,
        "peak_python_mb": 2500.0,
        "peak_jvm_mb": 4400.0,
        "statuses": None if failed else {"COMMITTED": 2002},
    }
    if failed:
        ours["error"] = "cdc: error [QUERY_FAILED]: Java heap space"
    plain = {
        "seconds": 40.0,
        "phases": {"session-run": 30.0},
        "exit_code": 0,
        "failed": False,
        "peak_python_mb": 200.0,
        "peak_jvm_mb": 2200.0,
    }
    return {
        "table_rows": 50,
        "tables": 2,
        "transactions": 2_000,
        "events_per_transaction": 3,
        "events": 6_100,
        "records": 10_000,
        "produce_seconds": 1.2,
        "driver_memory": "4g",
        "ours": ours,
        "plain": plain,
        "check": check,
        "ratios": {"time": 2.01, "peak_python": 12.5, "peak_jvm": 2.0},
    }


def test_the_catch_up_lines() -> None:
    text = rendered("CatchUp", _result(failed=False))
    assert "CatchUp  ours (cdc run --once)" in text
    assert "ours / plain: time 2.01x, peak RSS driver 12.50x, JVM 2.00x" in text
    assert "same ids and values" in text and "{'COMMITTED': 2002}" in text
    assert "MERGEs done 30.0s" in text


def test_a_failed_ours_is_shown_with_its_error() -> None:
    lines = render_lines(_result(failed=True))
    text = "\n".join(lines)
    assert "FAILED, exit 2" in text
    assert "cdc: error [QUERY_FAILED]: Java heap space" in text
    assert "(ours failed)" in text and "ours and plain DIFFER" in text
