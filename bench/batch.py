"""Workload **Batch**: what one micro-batch costs, ours against the plain pattern (issue 12).

For each (transactions per batch, batches) of ``Sizes.batch_runs``: W1's generator makes
``per_batch x batches`` transactions over W1's three tables of ``Sizes.batch_rows`` rows, one
landing file of ``per_batch`` requests per micro-batch (``max_files_per_trigger`` 1). Our job
(``Job.create(spark, cfg).run(once=True)``) and the plain baseline (``bench.plain``; once with
its MERGEs one after the other, once from threads) read the same landing and data files, each
into its own copy of the same seeded tables, on the same SparkSession.

Per batch, for every contender alike (``bench.meter``): Spark's ``triggerExecution`` of the
batch (the number compared), the foreachBatch function's wall time, the Spark jobs started and
the Delta commits written while it ran (counted). Reported: medians over the warm batches (each
query's first batch is left out: it pays the first reads of the tables' logs once per query),
and the first batch apart.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from bench import data
from bench.common import SHUFFLE_PARTITIONS, column_of, say, seed_tables
from bench.meter import BatchMeter
from bench.ours import Workspace, run_job
from bench.plain import plain_landing
from bench.sizes import Sizes
from streaming.runtime.job import Job

PLAIN_CONTENDERS = (("plain", False), ("plain_threads", True))
"""Name → MERGEs from threads?"""


def batch(spark: SparkSession, sizes: Sizes, base: Path) -> dict[str, Any]:
    runs = {}
    for per_batch, batches in sizes.batch_runs:
        runs[str(per_batch)] = _one_size(
            spark, sizes, base / f"batch-{per_batch}", per_batch, batches
        )
        shutil.rmtree(base / f"batch-{per_batch}", ignore_errors=True)
    return {"table_rows": sizes.batch_rows, "runs": runs}


def _ours(
    spark: SparkSession,
    sizes: Sizes,
    root: Path,
    txs: list[Any],
    per_batch: int,
    yaml_text: str,
) -> tuple[Job, dict[str, str]]:
    """Our workspace with W1's dataset (``yaml_text``), data, requests and seeded tables."""
    ws = Workspace(root, data.W1_DATASET, yaml_text)
    data.write_w1_data(ws.root, txs)
    data.write_requests(ws.landing, txs, per_batch)
    cfg = ws.config(
        landing={"transactions": "./landing/transactions", "max_files_per_trigger": 1},
        spark={"shuffle_partitions": SHUFFLE_PARTITIONS},
    )
    job = Job.create(spark, cfg)
    say(f"Batch {per_batch}: seeding 3 x {sizes.batch_rows:,} rows")
    tables = seed_tables(spark, job, data.W1_DATASET, data.W1_SCHEMAS, sizes.batch_rows, sizes)
    return job, tables


def _one_size(
    spark: SparkSession, sizes: Sizes, root: Path, per_batch: int, batches: int
) -> dict[str, Any]:
    txs = data.w1_transactions(per_batch * batches, sizes.batch_rows)
    job, tables = _ours(spark, sizes, root / "ours", txs, per_batch, data.W1_YAML)
    ws_root = root / "ours"
    plains = [(n, t) for n, t in PLAIN_CONTENDERS if t is False or sizes.batch_threads]
    copies = {
        name: {s: _copy(p, root / name / "warehouse" / s) for s, p in tables.items()}
        for name, _ in plains
    }

    say(f"Batch {per_batch}: ours, {batches} batches of {per_batch} transactions")
    meter = BatchMeter(spark, [Path(job.layout.warehouse)])
    with meter.active():
        ours = run_job(spark, job)
    result: dict[str, Any] = {
        "per_batch": per_batch,
        "transactions": len(txs),
        "ours": {
            **meter.summary(),
            "seconds": round(ours.seconds, 3),
            "statuses": ours.statuses,
            "profile": ours.profile,
        },
    }
    _say_summary(per_batch, "ours", result["ours"])
    rows = {"ours": _rows(tables)}
    for name, threads in plains:
        say(f"Batch {per_batch}: {name}")
        meter = BatchMeter(spark, [root / name / "warehouse"])
        with meter.active():
            seconds, sink = plain_landing(
                spark,
                ws_root,
                ws_root / "landing" / "transactions",
                copies[name],
                1,
                threads=threads,
                name=name,
            )
        result[name] = {
            **meter.summary(),
            "seconds": round(seconds, 3),
            "transactions_applied": sum(len(b.transaction_ids) for b in sink.batches),
        }
        _say_summary(per_batch, name, result[name])
        rows[name] = _rows(copies[name])
    if sizes.scd2:
        scd2_root = root / "ours-scd2"
        scd2_job, scd2_tables = _ours(
            spark, sizes, scd2_root, txs, per_batch, data.with_scd2(data.W1_YAML)
        )
        say(f"Batch {per_batch}: ours with SCD2 tables")
        meter = BatchMeter(spark, [Path(scd2_job.layout.warehouse)])
        with meter.active():
            with_scd2 = run_job(spark, scd2_job)
        result["ours_scd2"] = {
            **meter.summary(),
            "seconds": round(with_scd2.seconds, 3),
            "statuses": with_scd2.statuses,
            "profile": with_scd2.profile,
        }
        _say_summary(per_batch, "ours_scd2", result["ours_scd2"])
        rows["ours_scd2"] = _rows(scd2_tables)
    result["rows_after"] = rows
    result["ratios"] = {
        f"ours_vs_{name}": _ratio(
            result["ours"]["trigger_seconds"], result[name]["trigger_seconds"]
        )
        for name, _ in plains
    }
    if sizes.scd2:
        result["ratios"]["ours_scd2_vs_ours"] = _ratio(
            result["ours_scd2"]["trigger_seconds"], result["ours"]["trigger_seconds"]
        )
    return result


def _copy(source: str, target: Path) -> str:
    shutil.copytree(source, target)
    return str(target)


def _rows(tables: dict[str, str]) -> int:
    """Rows of the three tables after the run (delta-rs, not timed)."""
    return sum(len(column_of(p)) for p in tables.values())


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or not theirs:
        return None
    return round(ours / theirs, 2)


def _say_summary(per_batch: int, name: str, entry: dict[str, Any]) -> None:
    say(
        f"Batch {per_batch}: {name}: {entry['batches']} batches, median of {entry['warm_batches']} "
        f"warm: {entry['trigger_seconds']}s trigger, {entry['sink_seconds']}s sink, "
        f"{entry['jobs']} jobs, {entry['commits']} commits; first {entry['first_trigger_seconds']}s"
    )


def render_lines(result: dict[str, Any]) -> list[str]:
    """The Batch table: per size and contender, medians per warm batch and the first batch."""
    lines = [
        f"Batch: W1 transactions on 3 tables x {result['table_rows']:,} rows, one landing file "
        "per micro-batch; s/batch: median over the warm batches (batches: warm / all; each "
        "query's first is left out) of Spark's triggerExecution; sink s: in the foreachBatch "
        "function; jobs and Delta commits: counted, median per warm batch",
        f"{'workload':<8} {'contender':<30} {'tx/batch':>8} {'batches':>8} {'s/batch':>8} "
        f"{'sink s':>7} {'jobs':>6} {'commits':>8} {'first s':>8} {'ours / it':>10}",
    ]
    names = {
        "ours": "ours",
        "plain": "plain (one MERGE per table)",
        "plain_threads": "plain, MERGEs from threads",
    }
    for size, run in result["runs"].items():
        for key, label in names.items():
            if key not in run:
                continue
            entry = run[key]
            ratio = run["ratios"].get(f"ours_vs_{key}")
            warm = f"{entry['warm_batches']}/{entry['batches']}"
            cells = [
                _num(entry["trigger_seconds"], ".1f", 8),
                _num(entry["sink_seconds"], ".1f", 7),
                _num(entry["jobs"], ".0f", 6),
                _num(entry["commits"], ".0f", 8),
                _num(entry["first_trigger_seconds"], ".1f", 8),
            ]
            shown = f"{ratio:.2f}x" if ratio is not None else ""
            lines.append(
                f"{'Batch':<8} {label:<30} {int(size):>8} {warm:>8} {' '.join(cells)} {shown:>10}"
            )
        rows = ", ".join(f"{k} {v:,}" for k, v in run["rows_after"].items())
        lines.append(f"Batch    rows of the 3 tables after {int(size)} per batch: {rows}")
    return lines


def profile_lines(result: dict[str, Any], size: str, contender: str = "ours") -> list[str]:
    """Where our batches of one size went (``bench.profile``'s regions): mean seconds and Spark
    jobs per batch, the first batch included. ``contender``: ours, or ours_scd2 (``--scd2``)."""
    run = result["runs"].get(size)
    if run is None or contender not in run or not run[contender].get("profile"):
        return []
    count = run[contender]["batches"] or 1
    out = [
        f"profile of Batch {size} {contender}: mean per batch over its {count} batches "
        "(first included)",
        f"  {'region':<58} {'s/batch':>8} {'jobs/batch':>11}",
    ]
    for entry in run[contender]["profile"]:
        depth = len(entry["path"]) - 1
        name = "  " * depth + entry["path"][-1]
        jobs = entry.get("jobs")
        shown = "-" if jobs is None else f"{jobs / count:.1f}"
        out.append(f"  {name:<58} {entry['seconds'] / count:>8.2f} {shown:>11}")
    return out


def _num(value: float | None, fmt: str, width: int) -> str:
    return format("-" if value is None else format(value, fmt), f">{width}")
