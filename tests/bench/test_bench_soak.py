"""The Soak workload's pure parts (issue 36): its transactions and the state they lead to, the
job's log lines, deciles, medians, the targets, the end checks, the report. No Spark."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from bench import soak
from bench.__main__ import main
from bench.soak import BatchLine, Sample, SoakStream
from tests.bench.results import rendered

SINK_LINE = (
    "2026-11-26 16:23:40,123 INFO streaming.runtime.sink: batch 7: 9 transactions "
    "(COMMITTED 8, DUPLICATE 1), 21 rows changed in 1 tables, 4 Delta commits, 12 Spark jobs, "
    "1.23s"
)


# -- the transactions ------------------------------------------------------------------------
def _apply(state: dict[str, dict[str, Any]], tx: Any) -> None:
    for row in tx.rows:
        if tx.operation == "DELETE":
            del state[row["id"]]
        else:
            state[row["id"]] = {p: row[p] for p in soak.PROPS}


def test_the_stream_expects_what_its_transactions_do_in_order() -> None:
    stream = SoakStream(500)
    state: dict[str, dict[str, Any]] = {}
    seed = stream.seed()
    assert seed.operation == "UPSERT" and len(seed.rows) == 500
    _apply(state, seed)
    txs = [stream.next() for _ in range(2000)]
    landed = [stream.landing() for _ in range(30)]
    for tx in [*txs, *landed]:
        _apply(state, tx)  # a DELETE of a key not there would raise here
    assert state == stream.expected
    deletes = sum(tx.operation == "DELETE" for tx in txs)
    assert 0.07 < deletes / len(txs) < 0.13
    assert stream.deletes > 0 and stream.reinserts > 0
    assert all(1 <= len(tx.rows) <= 5 for tx in txs)
    assert all(len({r["id"] for r in tx.rows}) == len(tx.rows) for tx in txs)


def test_kafka_and_landing_transactions_write_separate_keys() -> None:
    stream = SoakStream(500)
    kafka = {r["id"] for _ in range(3000) for r in stream.next().rows}
    landing = {r["id"] for _ in range(300) for r in stream.landing().rows}
    assert not kafka & landing
    assert len(landing) == soak.LANDING_KEYS
    assert max(kafka) < min(landing)


def test_the_stream_is_the_same_for_a_seed() -> None:
    one, two = SoakStream(300), SoakStream(300)
    assert [one.next() for _ in range(50)] == [two.next() for _ in range(50)]
    tx = SoakStream(300).next()
    assert tx.transaction_id == "soak-0000001" and tx.location == "./data/soak/soak-0000001"


# -- the job's log ---------------------------------------------------------------------------
def test_the_sink_line_is_parsed() -> None:
    assert soak.parse_batch_line(SINK_LINE) == BatchLine(
        batch_id=7,
        transactions=9,
        statuses={"COMMITTED": 8, "DUPLICATE": 1},
        rows=21,
        commits=4,
        jobs=12,
        seconds=1.23,
    )
    empty = (
        "x: batch 3: 0 transactions (), 0 rows changed in 0 tables, 1 Delta commits, "
        "0 Spark jobs, 0.10s"
    )
    parsed = soak.parse_batch_line(empty)
    assert parsed is not None and parsed.statuses == {} and parsed.seconds == 0.1


def test_other_lines_are_no_batch_lines() -> None:
    progress = (
        "2026-11-26 16:23:40,500 INFO streaming.runtime.observe: query cdc batch 7: 9 input "
        "rows, 8.1 rows/s in, 7.3 rows/s processed, 1234 ms, lag soak.transactions 0"
    )
    assert soak.parse_batch_line(progress) is None
    assert soak.parse_progress_line(progress) == (7, 1.234)
    assert soak.parse_progress_line(SINK_LINE) is None


def test_upkeep_lines_give_the_action_and_its_seconds() -> None:
    done = (
        "2026-11-26 16:50:01,123 INFO streaming.runtime.upkeep: upkeep: compact of "
        "_system/outcomes (50 small files of 50): files 51 → 2, 1.23s"
    )
    assert soak.parse_upkeep_line(done) == ("compact", 1.23)
    failed = (
        "2026-11-26 16:50:01,123 WARNING streaming.runtime.upkeep: upkeep: vacuum of "
        "shop/Item failed after 2.50s (Py4JJavaError: x); tried again after a later batch"
    )
    assert soak.parse_upkeep_line(failed) == ("vacuum", 2.5)
    assert soak.parse_upkeep_line("INFO streaming.runtime.sink: batch 3: upkeep: 1.0s") is None
    assert soak.parse_upkeep_line("INFO cdc maintain: OPTIMIZE shop/Item") is None


def test_warnings_read_alike_without_their_time() -> None:
    one = soak.warning_of("2026-11-26 16:23:40,123 WARNING streaming.x: slow batch")
    two = soak.warning_of("2026-11-26 16:29:01,999 WARNING streaming.x: slow batch")
    assert one == two == "WARNING streaming.x: slow batch"
    assert soak.warning_of(SINK_LINE) is None
    jvm = "WARNING: Using incubator modules: jdk.incubator.vector"
    assert soak.warning_of(jvm) == jvm
    spark = "26/11/26 16:23:40 WARN ProcessingTimeExecutor: behind"
    assert soak.warning_of(spark) == "WARN ProcessingTimeExecutor: behind"


def test_repeats_of_a_warning_count_as_one_kind(tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    path.write_text(
        "".join(
            f"2026-11-26 16:23:4{i},1 WARN ProcessingTimeExecutor: Current batch is falling "
            f"behind. The trigger interval is 1000 milliseconds, but spent {5000 + i} "
            "milliseconds\n"
            for i in range(3)
        )
    )
    log = soak.JobLog(path)
    log.read()
    assert list(log.warnings.values()) == [3]
    (kind,) = log.warnings
    assert log.warning_examples[kind].endswith("but spent 5000 milliseconds")


def test_the_log_is_followed_across_partial_writes(tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    path.write_text(SINK_LINE[:50])
    log = soak.JobLog(path)
    log.read()
    assert log.count == 0
    with path.open("a") as f:
        f.write(SINK_LINE[50:] + "\nINFO x: stopping on SIGTERM: batch 8 finished, 0.8 s\n")
    log.read()
    assert [b.batch_id for b in log.batches] == [7]
    assert log.stopping == ["INFO x: stopping on SIGTERM: batch 8 finished, 0.8 s"]


# -- statistics ------------------------------------------------------------------------------
def test_medians_and_quantiles() -> None:
    assert soak.median([3.0, 1.0, 2.0]) == 2.0
    assert soak.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert soak.median([]) is None
    values = [float(v) for v in range(1, 11)]
    assert soak.quantile(values, 0.9) == 9.0
    assert soak.quantile(values, 1.0) == 10.0
    assert soak.quantile([], 0.9) is None


@pytest.mark.parametrize("n", [10, 15, 40, 99, 1000, 1003])
def test_deciles_cover_every_batch_once_and_agree_with_decile_of(n: int) -> None:
    bounds = soak.decile_bounds(n)
    assert len(bounds) == 10 and bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a < b for a, b in bounds)
    assert all(bounds[i][1] == bounds[i + 1][0] for i in range(9))
    for d, (start, end) in enumerate(bounds):
        assert {soak.decile_of(i, n) for i in range(start, end)} == {d}
    assert soak.decile_of(n, n) is None and soak.decile_of(-1, n) is None


def test_fewer_batches_than_deciles_are_refused() -> None:
    with pytest.raises(ValueError):
        soak.decile_bounds(9)


def _batches(seconds: list[float]) -> list[BatchLine]:
    return [BatchLine(i, 8, {"COMMITTED": 8}, 20, 4, 12, s) for i, s in enumerate(seconds)]


def test_decile_rows_split_batches_and_samples() -> None:
    seconds = [float(1 + i // 2) for i in range(20)]  # decile d: two batches of d + 1 s
    spark = {i: s + 0.5 for i, s in enumerate(seconds)}
    samples = [
        Sample(0.0, 0, 100.0, 1000.0),  # before the first batch: decile 1
        Sample(1.0, 3, 110.0, 1100.0),  # batch 3 running: decile 2
        Sample(2.0, 3, 130.0, 1300.0),
        Sample(3.0, 19, 150.0, 1500.0),  # decile 10
        Sample(4.0, 20, 999.0, 9999.0),  # the drain: no decile
    ]
    rows = soak.decile_rows(_batches(seconds), spark, samples, 20)
    assert [r["batches"] for r in rows] == [2] * 10
    assert rows[1]["first_batch"] == 2 and rows[1]["last_batch"] == 3
    assert rows[1]["seconds_p50"] == 2.0 and rows[9]["seconds_p90"] == 10.0
    assert rows[1]["spark_seconds_p50"] == 2.5
    assert rows[0]["python_rss_mb"] == 100.0 and rows[1]["python_rss_mb"] == 120.0
    assert rows[1]["jvm_rss_mb"] == 1200.0 and rows[9]["jvm_rss_mb"] == 1500.0
    assert rows[4]["python_rss_mb"] is None and rows[4]["samples"] == 0
    assert sum(r["samples"] for r in rows) == 4


def _deciles(
    seconds: Sequence[float], python: Sequence[float | None], jvm: Sequence[float | None]
) -> list[dict[str, Any]]:
    return [
        {"decile": d + 1, "seconds_p50": s, "python_rss_mb": p, "jvm_rss_mb": j}
        for d, (s, p, j) in enumerate(zip(seconds, python, jvm, strict=True))
    ]


def test_targets_met() -> None:
    flat = [2.0] * 10
    targets = soak.evaluate_targets(
        _deciles(
            [5.0, 2.0, *[2.1] * 8],
            [80.0, 200.0, *[205.0] * 7, 219.0],
            [900.0, 1000.0, *[950.0] * 8],
        )
    )
    assert [t["met"] for t in targets] == [True, True, True]
    assert targets[0]["value"] == pytest.approx(1.05)
    assert targets[1]["value"] == pytest.approx(0.095)  # the first decile (warm-up) is left out
    assert targets[2]["value"] == pytest.approx(0.05)
    assert soak.evaluate_targets(_deciles(flat, flat, flat))[0]["value"] == 1.0


def test_targets_not_met() -> None:
    targets = soak.evaluate_targets(
        _deciles([2.0, 2.0, *[2.0] * 7, 2.4], [200.0] * 9 + [230.0], [1000.0, 1000.0] + [850.0] * 8)
    )
    assert [t["met"] for t in targets] == [False, False, False]
    assert targets[0]["value"] == pytest.approx(1.2)
    assert targets[2]["value"] == pytest.approx(0.15)


def test_targets_without_samples_are_unknown() -> None:
    targets = soak.evaluate_targets(_deciles([2.0] * 10, [200.0] * 9 + [None], [None] * 10))
    assert targets[0]["met"] is True
    assert targets[1]["met"] is None and targets[2]["met"] is None


def test_files_max_per_table() -> None:
    snaps: list[dict[str, Any]] = [
        {"tables": {"a": {"files": 3}, "b": {"files": None}}},
        {"tables": {"a": {"files": 5}, "b": {"files": 2}}},
        {"tables": {"a": {"files": 4}}},
    ]
    assert soak.files_max(snaps) == {"a": 5, "b": 2}


def test_a_counter_summed_over_its_labels() -> None:
    text = (
        "# HELP cdc_upkeep_runs_total Upkeep runs\n"
        "# TYPE cdc_upkeep_runs_total counter\n"
        'cdc_upkeep_runs_total{table="a",kind="OPTIMIZE"} 2.0\n'
        'cdc_upkeep_runs_total{table="b",kind="VACUUM"} 1.0\n'
        "cdc_upkeep_runs_created 1.7e9\n"
        "cdc_upkeep_runs_total_other 5\n"
    )
    assert soak.counter_total(text, "cdc_upkeep_runs_total") == 3.0
    assert soak.counter_total("cdc_x_total 1\n", "cdc_upkeep_runs_total") is None


# -- the end checks --------------------------------------------------------------------------
def test_exactly_once_holds() -> None:
    check = soak.exactly_once(["a", "b"], [("a", "COMMITTED"), ("b", "COMMITTED")])
    assert check["ok"] and check["committed_once"] == 2 and check["statuses"] == {"COMMITTED": 2}


@pytest.mark.parametrize(
    ("outcomes", "wrong"),
    [
        ([("a", "COMMITTED")], "missing"),
        ([("a", "COMMITTED"), ("b", "COMMITTED"), ("b", "COMMITTED")], "repeated"),
        ([("a", "COMMITTED"), ("b", "COMMITTED"), ("c", "COMMITTED")], "unknown"),
    ],
)
def test_exactly_once_fails(outcomes: list[tuple[str, str]], wrong: str) -> None:
    check = soak.exactly_once(["a", "b"], outcomes)
    assert not check["ok"] and check[wrong] == 1


def test_a_rejected_outcome_fails_exactly_once() -> None:
    outcomes = [("a", "COMMITTED"), ("b", "COMMITTED"), ("x", "REJECTED")]
    assert not soak.exactly_once(["a", "b"], outcomes)["ok"]


def test_the_state_check() -> None:
    row = {"name": "n", "qty": 1, "price": 1.5, "status": "new"}
    assert soak.state_diff({"k1": row}, {"k1": dict(row)})["ok"]
    diff = soak.state_diff({"k1": row, "k2": row}, {"k1": {**row, "qty": 2}, "k3": row})
    assert (diff["missing"], diff["extra"], diff["differ"], diff["ok"]) == (1, 1, 1, False)


def test_the_checkpoint_is_measured(tmp_path: Path) -> None:
    for name in (
        "offsets/0",
        "offsets/1",
        "offsets/.1.crc",
        "commits/0",
        "sources/0/0",
        "sources/0/1",
        "sources/1/0",
        "metadata",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("xx")
    usage = soak.checkpoint_usage(tmp_path)
    assert usage == {
        "bytes": 16,
        "files": 8,
        "offsets": 2,
        "commits": 1,
        "sources": {"0": 2, "1": 1},
    }


def test_the_delta_log_is_counted(tmp_path: Path) -> None:
    log = tmp_path / "_delta_log"
    log.mkdir()
    for name in (
        "00.json",
        "01.json",
        "10.checkpoint.parquet",
        "20.checkpoint.0.2.parquet",
        "00.crc",
        "_last_checkpoint",
    ):
        (log / name).write_text("")
    counts = soak.delta_counts(tmp_path)
    assert counts == {"files": None, "json": 2, "checkpoints": 2}


# -- the report, the options -----------------------------------------------------------------
def _snapshot(files: int, batch: int) -> dict[str, Any]:
    return {
        "label": "x",
        "at_batch": batch,
        "tables": {
            t: {"files": files, "json": batch, "checkpoints": batch // 10}
            for t in soak.TABLE_LABELS
        },
        "checkpoint": {
            "bytes": 4096,
            "files": 30,
            "offsets": batch,
            "commits": batch,
            "sources": {"0": 2, "1": 1},
        },
        "upkeep_metric": None,
        "live_heap": {
            "mb": 300.0 + batch,
            "top": [["[B", (100 + 2 * batch) * 2**20], ["java.lang.String", 50 * 2**20]],
        },
    }


def _result() -> dict[str, Any]:
    deciles = []
    for d in range(10):
        deciles.append(
            {
                "decile": d + 1,
                "batches": 4,
                "first_batch": 4 * d,
                "last_batch": 4 * d + 3,
                "transactions": 12,
                "seconds_p50": 2.0,
                "seconds_p90": 2.5,
                "spark_seconds_p50": 2.4,
                "python_rss_mb": 210.0,
                "jvm_rss_mb": 1400.0 + d,
                "samples": 2,
                "storage": _snapshot(4 * d + 4, 4 * d + 4),
            }
        )
    return {
        "batches_target": 40,
        "batches": 42,
        "rate": 8.0,
        "keys": 5000,
        "trigger": "1 second",
        "upkeep_config": "default",
        "seconds": 240.0,
        "drained": True,
        "drain_seconds": 6.0,
        "published": 800,
        "landing_published": 2,
        "deletes": 120,
        "reinserts": 90,
        "sample_seconds": 5.0,
        "deciles": deciles,
        "start": _snapshot(2, 1),
        "end": _snapshot(44, 42),
        "files_max": {"shop/shop/Item": 44, "_system/outcomes": 44},
        "upkeep": {"log_lines": 0, "examples": [], "metric": None},
        "warnings": {"lines": 1, "kinds": [{"line": "WARN x: y", "count": 1}]},
        "stop": {
            "exit_code": 0,
            "seconds": 2.0,
            "killed": False,
            "line": "INFO x: stopping on SIGTERM: no batch running",
        },
        "check": {
            "outcomes": soak.exactly_once(["a"], [("a", "COMMITTED")]),
            "current": soak.state_diff({}, {}),
        },
        "targets": soak.evaluate_targets(deciles),
    }


def test_the_soak_report() -> None:
    text = rendered("Soak", _result())
    assert "Soak: `cdc run` (a subprocess) for 40 micro-batches (42 with the drain)" in text
    assert (
        "Soak          2         4-7       12       2.00   2.50        2.40       210     1401"
        in (text)
    )
    assert "live files, max over the run: current 44, outcomes 44" in text
    assert "cdc_upkeep_runs_total not served" in text
    assert "exit 0 in 2.0s: stopping on SIGTERM: no batch running" in text
    assert "✓ exactly once: 1 of 1 published transactions COMMITTED once" in text
    assert "✓ current table as the generator expects" in text
    assert "✓ Soak: median batch time, last decile / second" in text
    assert "✓ Soak: driver JVM RSS, deciles 2-10 vs decile 2" in text
    storage = [line for line in text.splitlines() if line.startswith("Soak") and "/4/0" in line]
    assert storage and "8/8/0" in text  # decile 2: 8 files, 8 commit files, no checkpoint
    # decile 2 ends at batch 8 (live heap 308 MB), the last at batch 40: [B grew by 64 MB
    assert "1401            0        -          308" in text
    assert "grown most from decile 2 to the last: [B +64.0 MB" in text
    assert "java.lang.String" not in text.split("grown most")[1].splitlines()[0]


HISTOGRAM = """12345:
 num     #instances         #bytes  class name (module)
-------------------------------------------------------
   1:        120000       90000000  [B (java.base@17.0.2)
   2:         40000       30000000  java.lang.String (java.base@17.0.2)
   3:          1000        2000000  org.apache.spark.sql.delta.Snapshot
Total        161000      122000000
"""


def test_a_class_histogram_gives_the_live_heap_and_its_largest_classes() -> None:
    heap = soak.parse_class_histogram(HISTOGRAM, top=2)
    assert heap == {"mb": 116.3, "top": [["[B", 90000000], ["java.lang.String", 30000000]]}
    assert soak.parse_class_histogram("12345:\nio exception: attach refused\n") is None


def test_heap_growth_names_the_classes_that_grew() -> None:
    before = {"mb": 1.0, "top": [["[B", 10 * 2**20], ["A", 5 * 2**20]]}
    after = {"mb": 2.0, "top": [["[B", 13 * 2**20], ["A", 4 * 2**20], ["New", 2**20]]}
    assert soak.heap_growth(before, after) == [("[B", 3.0), ("New", 1.0)]
    assert soak.heap_growth(None, after) == []


def test_the_options_reach_the_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr("bench.__main__.run", lambda sizes, *_a, **_k: seen.append(sizes))
    assert main(["--workloads", "Soak"]) == 0
    assert (seen[-1].soak_batches, seen[-1].soak_upkeep) == (1000, True)
    assert main(["--workloads", "Soak", "--soak-batches", "40", "--soak-no-upkeep"]) == 0
    assert (seen[-1].soak_batches, seen[-1].soak_upkeep) == (40, False)
    with pytest.raises(SystemExit):
        main(["--workloads", "Soak", "--soak-batches", "5"])


def test_soak_is_not_in_the_default_set() -> None:
    from bench.__main__ import DEFAULT, WORKLOADS

    assert "Soak" in WORKLOADS and "Soak" not in DEFAULT
