"""The Events workloads' pure helpers (issue 35, item 5): the change-event generator, the
records it becomes, and the results' lines. No Spark, no broker."""

from __future__ import annotations

import json
from collections import Counter

from bench import data
from bench.events import (
    EVENTS_PER_TX,
    FEED,
    SCHEMAS,
    event_records,
    event_transactions,
    final_state,
    source_txid,
    sql_of,
    transaction_id,
)
from tests.bench.results import rendered


def test_the_generator_is_deterministic_with_a_seed() -> None:
    assert event_transactions(500, 1_000) == event_transactions(500, 1_000)
    assert event_transactions(500, 1_000, seed=1) != event_transactions(500, 1_000, seed=2)


def test_exactly_n_events_in_transactions_of_a_few_each() -> None:
    txs = event_transactions(1_003, 1_000)
    assert sum(len(tx.changes) for tx in txs) == 1_003
    low, high = EVENTS_PER_TX
    assert all(low <= len(tx.changes) <= high for tx in txs)
    assert len({tx.txid for tx in txs}) == len(txs)
    # no key twice in one transaction
    for tx in txs:
        keys = [(c.table, c.row["id"]) for c in tx.changes]
        assert len(keys) == len(set(keys))


def test_mostly_updates_over_both_tables_keys_repeating_every_event_valid() -> None:
    txs = event_transactions(5_000, 2_000)
    ops = Counter(c.op for tx in txs for c in tx.changes)
    assert ops["u"] > ops["c"] > 0 and ops["u"] > ops["d"] > 0
    assert ops["u"] / 5_000 > 0.6
    assert {c.table for tx in txs for c in tx.changes} == set(SCHEMAS.values())
    assert any(len({c.table for c in tx.changes}) == 2 for tx in txs)
    touched = Counter((c.table, c.row["id"]) for tx in txs for c in tx.changes)
    assert max(touched.values()) > 1  # keys repeat across transactions
    live = {t: {data.key(data.W2_PREFIX, n) for n in range(2_000)} for t in SCHEMAS.values()}
    for tx in txs:
        for c in tx.changes:
            if c.op == "c":
                assert c.row["id"] not in live[c.table]
                live[c.table].add(c.row["id"])
            else:
                assert c.row["id"] in live[c.table]
                if c.op == "d":
                    live[c.table].remove(c.row["id"])
    state = final_state(txs)
    for table, rows in state.items():
        for key, row in rows.items():
            assert (row is not None) == (key in live[table])


def test_the_records_have_begin_and_end_per_transaction_with_matching_counts() -> None:
    txs = event_transactions(300, 500)
    records = event_records(txs, "pfx")
    boundaries = [json.loads(r.value or b"") for r in records if r.topic == "pfx.transaction"]
    assert [b["status"] for b in boundaries] == ["BEGIN", "END"] * len(txs)
    ends = [b for b in boundaries if b["status"] == "END"]
    for tx, end in zip(txs, ends, strict=True):
        assert end["id"] == tx.txid
        per_table = Counter(c.table for c in tx.changes)
        assert {d["data_collection"]: d["event_count"] for d in end["data_collections"]} == dict(
            per_table
        )
        assert end["event_count"] == len(tx.changes)
    data_records = [r for r in records if r.topic != "pfx.transaction"]
    values = [json.loads(r.value) for r in data_records if r.value is not None]
    assert len(values) == 300
    tombstones = [r for r in data_records if r.value is None]
    assert len(tombstones) == sum(1 for tx in txs for c in tx.changes if c.op == "d")
    lsns = [v["source"]["lsn"] for v in values]
    assert lsns == sorted(lsns) and len(set(lsns)) == len(lsns)
    assert {r.topic for r in data_records} == {f"pfx.{t}" for t in SCHEMAS.values()}


def test_outcome_ids_map_back_to_the_postgres_txid() -> None:
    assert transaction_id("100007:7") == f"debezium:{FEED}:100007:7"
    assert source_txid(f"debezium:{FEED}:7531:2814712") == "7531"
    assert source_txid(f"debezium:{FEED}:evlat.public.accounts[0]@0-99") is None
    assert source_txid("debezium:other:7531:1") is None


def test_sql_of_a_transaction() -> None:
    (tx,) = event_transactions(1, 10)
    statements = sql_of(tx)
    assert len(statements) == len(tx.changes)
    verbs = {"c": "INSERT", "u": "UPDATE", "d": "DELETE"}
    for (sql, params), c in zip(statements, tx.changes, strict=True):
        assert sql.startswith(verbs[c.op]) and c.row["id"] in params


def _events_result(same: bool) -> dict[str, object]:
    return {
        "events": 200_000,
        "transactions": 66_000,
        "table_rows": 1_000_000,
        "tables": 2,
        "per_batch": 0,
        "check": {
            "rows": {"ledger.Account": {"ours": 10, "plain": 10}},
            "same_rows": same,
            "ours_vs_expected": {"ledger.Account": 0},
        },
        "ours": {"seconds": 40.0, "changes_per_s": 5_000.0, "transactions_per_s": 1_650.0},
        "plain": {"seconds": 20.0, "changes_per_s": 10_000.0, "transactions_per_s": 3_300.0},
        "ratios": {"ours_vs_plain": 0.5, "ours_time_vs_plain": 2.0},
    }


def test_the_events_lines() -> None:
    text = rendered("Events", _events_result(True))
    assert "Events   time ours / plain: 40.0s / 20.0s = 2.00x" in text
    assert "(ours/plain: same ids and values)" in text
    assert "0.50x" in text
    assert "(DIFFER)" in rendered("Events", _events_result(False))


def test_a_skipped_events_latency_says_why() -> None:
    text = rendered("EventsLatency", {"skipped": "no jars"})
    assert "EventsLatency: skipped: no jars" in text
