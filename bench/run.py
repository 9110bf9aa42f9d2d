"""The runner: workloads W1 (many small transactions), Batch (the cost of one micro-batch), W2
(bulk DMS), Scale, ScaleRandom and ScaleClustered (W2 into a small and a large table, rows in id
order, in random id order, or in random id order then clustered by ``cdc maintain --cluster``),
FullLoad (one DMS full-load file into an empty table) and Cold (the first
batch of a fresh process), ours and the baselines side by side on one SparkSession, then a
table of numbers and ratios. CatchUp (``bench.catchup``: a Debezium snapshot and the
transactions after it, ours and plain each in a fresh process) and Soak (``bench.soak``: ``cdc
run`` as a process of its own for many micro-batches) run last, after that session is stopped.

Every contender gets its own copy of the same seeded tables and reads the same data files.
Machine noise (the machine is shared) moves every contender of a run alike: compare ratios.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from pyspark.sql import SparkSession

from bench import baselines, batch, catchup, cold, data, decode, events, kafka, soak
from bench.common import SHUFFLE_PARTITIONS, column_of, rate, say, seed_tables
from bench.ours import TABLES, OurRun, Workspace, run_job
from bench.sizes import Sizes
from streaming.core.config import SparkConfig
from streaming.runtime.job import Job
from streaming.runtime.session import build_session
from streaming.storage.maintain import file_count, maintain
from tests.support.kafka_broker import LocalKafkaBroker


def session() -> SparkSession:
    return build_session(
        SparkConfig(
            app_name="cdc-bench",
            shuffle_partitions=SHUFFLE_PARTITIONS,
            conf={
                "spark.driver.memory": "8g",
                "spark.sql.streaming.noDataMicroBatches.enabled": "false",
            },
        )
    )


def _copy(source: str, target: Path) -> str:
    shutil.copytree(source, target)
    return str(target)


def _rows(table: str, column: str = "id") -> int:
    """Rows of a Delta table (read with delta-rs, after the timed part)."""
    return len(column_of(table, column))


def _keys(table: str) -> set[str]:
    """The ids of a Delta table (read with delta-rs, after the timed part)."""
    return {str(k) for k in column_of(table).to_pylist()}


# -- W1 ----------------------------------------------------------------------------------------
def _w1_workspace(
    spark: SparkSession, sizes: Sizes, root: Path, txs: Sequence[data.SmallTx], label: str
) -> tuple[Workspace, Job, dict[str, str]]:
    """W1's landing files and data files, its job, its three tables seeded."""
    ws = Workspace(root, data.W1_DATASET, data.W1_YAML)
    data.write_w1_data(ws.root, txs)
    data.write_requests(ws.landing, txs, sizes.w1_lines_per_file)
    cfg = ws.config(
        landing={
            "transactions": "./landing/transactions",
            "max_files_per_trigger": sizes.w1_files_per_trigger,
        },
        spark={"shuffle_partitions": SHUFFLE_PARTITIONS},
    )
    job = Job.create(spark, cfg)
    say(f"{label}: seeding 3 x {sizes.w1_table_rows:,} rows")
    tables = seed_tables(spark, job, data.W1_DATASET, data.W1_SCHEMAS, sizes.w1_table_rows, sizes)
    return ws, job, tables


def w1_landing_ours(spark: SparkSession, sizes: Sizes, base: Path) -> dict[str, Any]:
    """Only W1's "ours (grouped, landing)" run: the reference of the Kafka row when W1 itself
    is not in the run."""
    txs = data.w1_transactions(sizes.w1_transactions, sizes.w1_table_rows)
    rows = sum(len(tx.rows) for tx in txs)
    ws, job, _ = _w1_workspace(spark, sizes, base / "w1-reference", txs, "W1K reference")
    say(f"W1K reference: ours over the landing folder, {len(txs):,} transactions")
    ours = run_job(spark, job)
    say(f"W1K reference: ours {ours.seconds:.1f}s {ours.statuses}")
    ws.remove()
    return {
        **ours.as_json(),
        "transactions_per_s": round(rate(len(txs), ours.seconds), 2),
        "rows_per_s": round(rate(rows, ours.seconds), 2),
    }


def w1(spark: SparkSession, sizes: Sizes, base: Path, *, label: str = "W1") -> dict[str, Any]:
    txs = data.w1_transactions(sizes.w1_transactions, sizes.w1_table_rows)
    rows = sum(len(tx.rows) for tx in txs)
    sample = txs[: sizes.w1_sample]
    sample_rows = sum(len(tx.rows) for tx in sample)
    ws, job, tables = _w1_workspace(spark, sizes, base / "w1", txs, label)
    copies = {
        name: {s: _copy(p, base / "w1-tables" / name / s) for s, p in tables.items()}
        for name in ("naive", "deltars")
    }

    per_batch = sizes.w1_lines_per_file * sizes.w1_files_per_trigger
    say(f"{label}: ours, {len(txs):,} transactions ({rows:,} rows), {per_batch:,} per batch")
    ours = run_job(spark, job)
    say(f"{label}: ours {ours.seconds:.1f}s {ours.statuses}")

    naive_landing = base / "w1-naive" / "landing"
    data.write_requests(naive_landing, sample, sizes.w1_lines_per_file)
    say(f"{label}: naive, one MERGE per transaction, the first {len(sample)} transactions")
    naive = baselines.naive_w1(
        spark, ws.root, naive_landing, copies["naive"], sizes.w1_files_per_trigger
    )
    naive.rows = sample_rows
    say(f"{label}: naive {naive.seconds:.1f}s")

    say(f"{label}: blind append of all {rows:,} rows")
    append = baselines.append_w1(
        spark, ws.root, ws.landing, base / "w1-append", sizes.w1_files_per_trigger
    )
    append.rows = rows
    say(f"{label}: append {append.seconds:.1f}s")

    say(f"{label}: delta-rs, one MERGE per transaction, the first {len(sample)} transactions")
    deltars = baselines.deltars_w1(ws.root, [tx.request() for tx in sample], copies["deltars"])
    say(f"{label}: delta-rs {deltars.seconds:.1f}s")

    ours_tx = rate(len(txs), ours.seconds)
    contenders = {
        "naive": rate(naive.transactions, naive.seconds),
        "deltars": rate(deltars.transactions, deltars.seconds),
    }
    return {
        "transactions": len(txs),
        "rows": rows,
        "table_rows": sizes.w1_table_rows,
        "per_batch": per_batch,
        "sample": len(sample),
        "ours": {
            **ours.as_json(),
            "transactions_per_s": round(ours_tx, 2),
            "rows_per_s": round(rate(rows, ours.seconds), 2),
        },
        "naive": {
            **naive.as_json(),
            "transactions_per_s": round(contenders["naive"], 2),
            "rows_per_s": round(rate(naive.rows, naive.seconds), 2),
        },
        "append": {**append.as_json(), "rows_per_s": round(rate(rows, append.seconds), 2)},
        "deltars": {
            **deltars.as_json(),
            "transactions_per_s": round(contenders["deltars"], 2),
            "rows_per_s": round(rate(deltars.rows, deltars.seconds), 2),
        },
        "ratios": {
            "ours_vs_naive_tx": round(rate(ours_tx, contenders["naive"]), 2),
            "ours_vs_append_rows": round(rate(rows / ours.seconds, rows / append.seconds), 3),
            "ours_vs_deltars_tx": round(rate(ours_tx, contenders["deltars"]), 2),
        },
    }


def w1k(
    spark: SparkSession,
    sizes: Sizes,
    base: Path,
    broker: LocalKafkaBroker,
    landing: dict[str, Any] | None,
) -> dict[str, Any]:
    """W1 over Kafka, and its ratio to our landing-folder W1 row: this run's W1 when it ran,
    else a reference run of ours over the landing folder (same data, same batch size)."""
    result = kafka.w1_kafka(spark, sizes, base, broker)
    if landing is not None:
        reference, source = landing["ours"], "W1"
    else:
        reference = w1_landing_ours(spark, sizes, base)
        result["landing"], source = reference, "reference"
    result["landing_source"] = source
    result["ratios"] = {
        "kafka_vs_landing_tx": round(
            rate(result["ours"]["transactions_per_s"], reference["transactions_per_s"]), 3
        )
    }
    return result


# -- W2 and Scale ------------------------------------------------------------------------------
def _dms_folder(ws: Workspace) -> Path:
    """W2's table's folder in the DMS landing zone: ``<zone>/<dataset>/<schema path>``."""
    return ws.dms / data.W2_DATASET / Path(*data.W2_SCHEMA.split("."))


def _w2_workspace(
    spark: SparkSession,
    base: Path,
    name: str,
    changes: list[dict[str, Any]],
    table_rows: int,
    sizes: Sizes,
    *,
    shuffled: bool = False,
    props: Sequence[data.Prop] = data.W2_PROPERTIES,
    upkeep: dict[str, Any] | None = None,
    scd2: bool = False,
) -> tuple[Workspace, Job, list[Path], str]:
    """W2's dataset, DMS files and seeded table, all with the properties ``props``;
    ``upkeep``: the job's ``upkeep`` section (default: ``bench.ours.UPKEEP``, off); ``scd2``:
    the schema keeps an SCD2 table (seeded with an open interval per seeded row)."""
    text = data.w2_yaml(props)
    ws = Workspace(base / name, data.W2_DATASET, data.with_scd2(text) if scd2 else text)
    paths = data.write_dms_files(_dms_folder(ws), changes, sizes.w2_files, props)
    overrides: dict[str, Any] = {} if upkeep is None else {"upkeep": upkeep}
    job = Job.create(spark, ws.config(landing={"dms": "./landing/dms"}, **overrides))
    table = seed_tables(
        spark,
        job,
        data.W2_DATASET,
        [data.W2_SCHEMA],
        table_rows,
        sizes,
        shuffled=shuffled,
        w2_props=props,
    )[data.W2_SCHEMA]
    return ws, job, paths, table


W2_LABELS = {
    "naive": "naive MERGE per DMS file",
    "plain_merge": "plain, one MERGE of all changes",
    "append": "blind append",
    "deltars_per_file": "delta-rs MERGE per file",
    "deltars_all": "delta-rs MERGE, all at once",
}
"""W2's baselines as results keys (``plain`` is ``plain_merge`` there) and as rows of the table."""


W2_WARM_UP = (30_000, 50_000, 4)
"""W2's warm-up: changes (above the driver-fold limit, so ours takes the large path), table
rows, files."""


def _w2_warm_up(
    spark: SparkSession,
    base: Path,
    sizes: Sizes,
    *,
    plain: bool,
    props: Sequence[data.Prop] = data.W2_PROPERTIES,
) -> None:
    """Ours and the plain one-MERGE on a small W2 first, untimed: the JVM compiles the code
    both run (Parquet, Delta MERGE, shuffles) before either is timed, so neither pays it for
    the other (ours ran first and paid it alone). The schema has the properties ``props``,
    as the timed run's."""
    changes_n, rows, files = W2_WARM_UP
    small = replace(sizes, w2_changes=changes_n, w2_table_rows=rows, w2_files=files)
    changes = data.w2_changes(changes_n, rows)
    say(f"W2: warm-up, untimed ({changes_n:,} changes into {rows:,} rows, {len(props)} properties)")
    ws, job, _, table = _w2_workspace(spark, base, "w2", changes, rows, small, props=props)
    copy = _copy(table, base / "plain-table")
    run_job(spark, job)
    if plain:
        baselines.plain_w2(spark, base / "plain", ws.dms, copy, props)


def w2(spark: SparkSession, sizes: Sizes, base: Path) -> tuple[dict[str, Any], OurRun]:
    """W2: the DMS changes into a seeded table, ours and the chosen baselines; the schema has
    W2's four properties plus ``sizes.w2_extra_props`` (``data.w2_properties``).

    After the warm-up, ``sizes.w2_runs`` pairs of ours and plain's one MERGE, each pair on
    freshly seeded tables, in turn ours first and plain first; reported: the median run of
    each and the ratio of the medians, and every run. On this 2-core machine the JVM's
    compiler threads take the executors' cores while a process's first big runs are compiled
    (JIT time 20 s in the first W2 run of a process, 7 s in the second, 2-4 s later; ours has
    more code to compile than one MERGE): one pair measured how far the warm-up had got (ours
    / plain 1.69x in a process's second W2 run, 1.29-1.35x later). The other baselines run
    once, after the last pair, on their own copies of its seeded table. Everything is under
    ``base / "w2"``."""
    chosen = set(sizes.w2_baselines)
    props = data.w2_properties(sizes.w2_extra_props)
    changes = data.w2_changes(sizes.w2_changes, sizes.w2_table_rows)
    root = base / "w2"
    say(
        f"W2: {sizes.w2_runs} run(s) of {len(changes):,} changes in {sizes.w2_files} DMS files "
        f"into {sizes.w2_table_rows:,} seeded rows of {len(props)} properties; "
        f"baselines {', '.join(sizes.w2_baselines) or 'none'}"
    )
    _w2_warm_up(spark, root / "warm-up", sizes, plain="plain" in chosen, props=props)
    ours_runs: list[OurRun] = []
    plains: list[baselines.BaselineRun] = []
    runs: dict[str, baselines.BaselineRun] = {}
    rows_after: dict[str, int] = {}
    keys_diff: dict[str, int] | None = None
    paths: list[Path] = []
    for number in range(sizes.w2_runs):
        last = number == sizes.w2_runs - 1
        here = root / f"run-{number}"
        say(f"W2: run {number + 1} of {sizes.w2_runs}: seeding")
        ws, job, paths, table = _w2_workspace(
            spark, here, "ws", changes, sizes.w2_table_rows, sizes, props=props
        )
        wanted = [n for n in W2_COPIES if n in chosen and (last or n == "plain")]
        copies = {name: _copy(table, here / "tables" / name) for name in wanted}
        for name in ("deltars_per_file", "deltars_all"):
            if name in copies:
                baselines.without_change_feed(copies[name])
        sides = ["ours", "plain"] if "plain" in chosen else ["ours"]
        for side in sides if number % 2 == 0 else sides[::-1]:
            if side == "ours":
                say("W2: ours")
                ours_runs.append(run_job(spark, job))
                say(f"W2: ours {ours_runs[-1].seconds:.1f}s {ours_runs[-1].counts}")
            else:
                say("W2: plain, one streaming micro-batch of every DMS file, one MERGE of all")
                plains.append(
                    baselines.plain_w2(spark, here / "plain", ws.dms, copies["plain"], props)
                )
                say(f"W2: plain one MERGE {plains[-1].seconds:.1f}s")
        if last:
            runs.update(_w2_other_baselines(spark, here, ws, paths, copies, props, chosen))
        after = {"ours": _rows(table)}
        for name, path in copies.items():
            after["plain_merge" if name == "plain" else name] = _rows(path)
        if rows_after and {k: after[k] for k in rows_after} != rows_after:
            raise RuntimeError(f"W2: rows after differ between runs: {after}, {rows_after}")
        rows_after = after
        if "plain" in copies:
            ours_keys, plain_keys = _keys(table), _keys(copies["plain"])
            keys_diff = keys_diff or {"only_ours": 0, "only_plain": 0}
            keys_diff["only_ours"] += len(ours_keys - plain_keys)
            keys_diff["only_plain"] += len(plain_keys - ours_keys)
        if not last:
            shutil.rmtree(here, ignore_errors=True)
    scd2_runs: list[OurRun] = []
    for number in range(sizes.w2_runs if sizes.scd2 else 0):
        here = root / f"scd2-run-{number}"
        say(f"W2: ours with an SCD2 table, run {number + 1} of {sizes.w2_runs}: seeding")
        _, scd2_job, _, _ = _w2_workspace(
            spark, here, "ws", changes, sizes.w2_table_rows, sizes, props=props, scd2=True
        )
        scd2_runs.append(run_job(spark, scd2_job))
        say(f"W2: ours with SCD2 {scd2_runs[-1].seconds:.1f}s {scd2_runs[-1].counts}")
        shutil.rmtree(here, ignore_errors=True)
    say(f"W2: rows after: {rows_after}")
    if keys_diff is not None:
        say(f"W2: keys of ours and plain one MERGE differ by {keys_diff} (all runs)")
    ours = _median(ours_runs, lambda r: r.seconds)
    if plains:
        runs["plain_merge"] = _median(plains, lambda r: r.seconds)
    n = len(changes)
    ours_rate = rate(n, ours.seconds)
    rates = {name: rate(n, run.seconds) for name, run in runs.items()}
    result: dict[str, Any] = {
        "changes": n,
        "table_rows": sizes.w2_table_rows,
        "properties": len(props),
        "extra_properties": sizes.w2_extra_props,
        "files": len(paths),
        "baselines": list(sizes.w2_baselines),
        "rows_after": rows_after,
        **({"keys_vs_plain_merge": keys_diff} if keys_diff is not None else {}),
        "ours": {**ours.as_json(), "changes_per_s": round(ours_rate, 1)},
        **{
            name: {**run.as_json(), "changes_per_s": round(rates[name], 1)}
            for name, run in runs.items()
        },
        "runs": {
            "ours": [round(r.seconds, 3) for r in ours_runs],
            **({"plain_merge": [round(r.seconds, 3) for r in plains]} if plains else {}),
        },
        "ratios": {f"ours_vs_{k}": round(rate(ours_rate, v), 3) for k, v in rates.items()},
    }
    if "plain_merge" in runs:
        result["ratios"]["ours_time_vs_plain_merge"] = round(
            rate(ours.seconds, runs["plain_merge"].seconds), 3
        )
    if scd2_runs:
        with_scd2 = _median(scd2_runs, lambda r: r.seconds)
        result["ours_scd2"] = {
            **with_scd2.as_json(),
            "changes_per_s": round(rate(n, with_scd2.seconds), 1),
        }
        result["runs"]["ours_scd2"] = [round(r.seconds, 3) for r in scd2_runs]
        result["ratios"]["ours_scd2_time_vs_ours"] = round(rate(with_scd2.seconds, ours.seconds), 3)
    return result, ours


W2_COPIES = ("naive", "plain", "deltars_per_file", "deltars_all")
"""W2's baselines that MERGE into a copy of the seeded table."""


def _w2_other_baselines(
    spark: SparkSession,
    here: Path,
    ws: Workspace,
    paths: list[Path],
    copies: dict[str, str],
    props: Sequence[data.Prop],
    chosen: set[str],
) -> dict[str, baselines.BaselineRun]:
    """W2's baselines besides plain's one MERGE, each once (after the last pair)."""
    runs: dict[str, baselines.BaselineRun] = {}
    if "naive" in chosen:
        say("W2: naive, one MERGE per DMS file")
        runs["naive"] = baselines.naive_w2(spark, here / "naive", ws.dms, copies["naive"], props)
        say(f"W2: naive {runs['naive'].seconds:.1f}s")
    if "append" in chosen:
        say("W2: blind append")
        runs["append"] = baselines.append_w2(
            spark, here / "append", ws.dms, here / "append" / "bronze", props
        )
        say(f"W2: append {runs['append'].seconds:.1f}s")
    for name, per_file in (("deltars_per_file", True), ("deltars_all", False)):
        if name in chosen:
            say(f"W2: delta-rs MERGE {'per file' if per_file else 'of all changes at once'}")
            runs[name] = baselines.deltars_w2(paths, copies[name], per_file=per_file, props=props)
            say(f"W2: delta-rs {runs[name].seconds:.1f}s")
    return runs


def scale(
    spark: SparkSession,
    sizes: Sizes,
    base: Path,
    reuse: tuple[int, OurRun] | None,
    *,
    shuffled: bool = False,
    clustered: bool = False,
    liquid: bool = False,
) -> dict[str, Any]:
    """Scale (``shuffled``: ScaleRandom, the tables' rows in random id order across files, and
    the job's own upkeep on, with its defaults: before the timed run, the upkeep the job runs
    after its first write to the table since it started (``Upkeep.after_batch``: the table's
    order checked, clustered by id when its files' ranges overlap), untimed, its seconds and
    tasks reported — a user's table after a day of running; the timed run's own upkeep is
    reported apart and left out of the ratio. W2's run is then never reused, its table is in id
    order. ``clustered``: ScaleClustered, the shuffled table clustered by ``cdc maintain
    --cluster`` instead, untimed, its seconds reported; upkeep off). ``liquid``: ScaleLiquid, the
    shuffled table given Delta's liquid clustering instead (``ALTER TABLE … CLUSTER BY (id)``,
    then ``OPTIMIZE … FULL``), untimed, its seconds reported; upkeep off. For both, after the timed
    run the same upkeep again, timed and reported (``after``): what keeping the table clustered
    costs once a batch wrote into it (Z-order rewrites the table; liquid clustering's incremental
    ``OPTIMIZE`` the files not clustered yet).

    ``sizes.scale_runs`` rounds, each size on a freshly seeded table in each, the small table
    first in one round and the large one first in the next; reported per size: the median run
    (of two, the faster) and every run. In one round alone the small table's run was a
    process's first big one, and the JIT still compiling made it slower than the large table's
    (10.3 s against 6.9 s warm): the ratio then flattered us. W2's run, when reused for Scale's
    small table, is already W2's median and counts as every round's."""
    label = (
        "ScaleLiquid"
        if liquid
        else "ScaleClustered"
        if clustered
        else "ScaleRandom"
        if shuffled
        else "Scale"
    )
    upkept = shuffled and not (clustered or liquid)
    shuffled = shuffled or clustered or liquid
    changes = data.w2_changes(sizes.w2_changes, sizes.w2_table_rows)
    every: dict[int, list[OurRun]] = {rows: [] for rows in sizes.scale_rows}
    maintained: dict[str, dict[str, Any]] = {}
    if reuse is None:  # W2 did not run first: its warm-up, so the small table does not pay it
        _w2_warm_up(spark, base / f"{label.lower()}-warm-up", sizes, plain=False)
    for number in range(sizes.scale_runs):
        order = sizes.scale_rows if number % 2 == 0 else sizes.scale_rows[::-1]
        for rows in order:
            if reuse and reuse[0] == rows and not shuffled:
                if not every[rows]:
                    say(f"{label}: {rows:,} rows = W2's run")
                    every[rows].append(reuse[1])
                continue
            say(
                f"{label}: run {number + 1} of {sizes.scale_runs}: seeding {rows:,} rows"
                f"{' in random id order' if shuffled else ''}"
            )
            ws, job, _, table = _w2_workspace(
                spark,
                base,
                f"{label.lower()}-{rows}",
                changes,
                rows,
                sizes,
                shuffled=shuffled,
                upkeep={} if upkept else None,
            )
            if upkept:
                assert job.sink.upkeep is not None
                started = time.perf_counter()
                tasks = job.sink.upkeep.after_batch([table])
                maintained[str(rows)] = {
                    "seconds": round(time.perf_counter() - started, 3),
                    "tasks": [
                        {
                            "action": t.task.action,
                            "detail": t.detail,
                            "seconds": round(t.seconds, 3),
                        }
                        for t in tasks
                    ],
                }
                say(f"{label}: the job's upkeep before the run {maintained[str(rows)]}")
            if clustered:
                maintained[str(rows)] = _zorder(spark, table)
                say(f"{label}: cdc maintain --cluster {maintained[str(rows)]}")
            if liquid:
                maintained[str(rows)] = _liquid(spark, table, first=True)
                say(f"{label}: CLUSTER BY (id), OPTIMIZE FULL {maintained[str(rows)]}")
            say(f"{label}: ours against {rows:,} rows")
            every[rows].append(run_job(spark, job))
            if clustered or liquid:
                after = _liquid(spark, table, first=False) if liquid else _zorder(spark, table)
                maintained[str(rows)]["after"] = after
                say(f"{label}: the same upkeep after the run {after}")
            say(
                f"{label}: {every[rows][-1].batch_seconds:.1f}s"
                f" (+ upkeep after it {every[rows][-1].upkeep_seconds:.1f}s)"
            )
            ws.remove()
    runs = {rows: _median(each, lambda r: r.batch_seconds) for rows, each in every.items()}
    small, large = sizes.scale_rows
    return {
        "changes": len(changes),
        "shuffled": shuffled,
        "upkeep": upkept,
        **({"maintain": maintained} if clustered or liquid or upkept else {}),
        "liquid": liquid,
        "runs": {str(r): run.as_json() for r, run in runs.items()},
        "every": {
            str(r): [round(run.batch_seconds, 3) for run in each] for r, each in every.items()
        },
        "time_ratio": round(runs[large].batch_seconds / runs[small].batch_seconds, 3),
        "rows_ratio": large / small,
    }


def _liquid(spark: SparkSession, table: str, *, first: bool) -> dict[str, Any]:
    """Delta's liquid clustering by id: ``first``, turned on (``ALTER TABLE … CLUSTER BY``) and
    every file clustered (``OPTIMIZE … FULL``); else the incremental ``OPTIMIZE``. Its seconds
    and the live files before and after."""
    before = file_count(spark, table)
    started = time.perf_counter()
    if first:
        spark.sql(f"ALTER TABLE delta.`{table}` CLUSTER BY (id)")
    spark.sql(f"OPTIMIZE delta.`{table}`{' FULL' if first else ''}")
    return {
        "seconds": round(time.perf_counter() - started, 3),
        "files_before": before,
        "files_after": file_count(spark, table),
    }


def _zorder(spark: SparkSession, table: str) -> dict[str, Any]:
    """``cdc maintain --cluster`` of the table again: its seconds, the live files around it."""
    started = time.perf_counter()
    done = maintain(
        spark, [table], optimize=False, vacuum_hours=None, current=[table], cluster=True
    )[0]
    return {
        "seconds": round(time.perf_counter() - started, 3),
        "files_before": done.files_before,
        "files_after": done.files_after,
    }


FULL_LOAD_WARM_UP = 5
"""FullLoad's warm-up: ours and the append on a file of 1/5 the rows first, untimed."""


def _full_load_workspace(
    spark: SparkSession, base: Path, sizes: Sizes, name: str, n: int
) -> tuple[Workspace, Path, Job, str]:
    """A job whose W2 table is empty, and one DMS full-load file of ``n`` rows for it."""
    ws = Workspace(base / name, data.W2_DATASET, data.W2_YAML)
    path = data.write_full_load(_dms_folder(ws), n)
    job = Job.create(spark, ws.config(landing={"dms": "./landing/dms"}))
    table = seed_tables(spark, job, data.W2_DATASET, [data.W2_SCHEMA], 0, sizes)[data.W2_SCHEMA]
    before = _rows(table)
    if before:
        raise RuntimeError(f"FullLoad: the table should start empty, it holds {before:,} rows")
    return ws, path, job, table


def _full_load_warm_up(spark: SparkSession, base: Path, sizes: Sizes) -> None:
    """Ours and the blind append on a smaller file first, untimed (as W2's warm-up): without
    it ours ran first, in a JVM that had compiled none of a big load's code, and the append
    after it ran warm."""
    n = max(sizes.full_load_rows // FULL_LOAD_WARM_UP, 1_000)
    say(f"FullLoad: warm-up, untimed ({n:,} rows)")
    ws, path, job, _ = _full_load_workspace(spark, base, sizes, "full-load-warm-up", n)
    run_job(spark, job)
    target = base / "full-load-warm-up-append"
    baselines.append_full_load(spark, path, target)
    baselines.layout_full_load(spark, path, base / "full-load-warm-up-layout")
    ws.remove()
    shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(base / "full-load-warm-up-layout", ignore_errors=True)


def full_load(spark: SparkSession, sizes: Sizes, base: Path) -> dict[str, Any]:
    """The initial load: one DMS full-load file into W2's table, created empty by the job (ours),
    against a blind Spark read + Delta append of the same file to a new table, and against
    the same file written plainly as our layout's current and history tables
    (``baselines.layout_full_load``: what the layout alone costs); all after a warm-up on a
    smaller file, then ``sizes.full_load_runs`` rounds, each on fresh tables, in turn ours
    first and ours last. Reported: the median run of each and the ratios of the medians (one
    pair's ratio followed the append's spread on a busy machine: 1.6 to 3.8 s over four runs
    of the same file)."""
    n = sizes.full_load_rows
    _full_load_warm_up(spark, base, sizes)
    ours_runs: list[OurRun] = []
    appends: list[baselines.BaselineRun] = []
    layouts: list[baselines.BaselineRun] = []
    rows_after: dict[str, int] = {}
    file_mib = 0.0
    for number in range(sizes.full_load_runs):
        say(f"FullLoad: run {number + 1} of {sizes.full_load_runs}: a DMS file of {n:,} rows")
        ws, path, job, table = _full_load_workspace(spark, base, sizes, f"full-load-{number}", n)
        file_mib = round(path.stat().st_size / 2**20, 2)
        target = base / f"full-load-append-{number}"
        layout = base / f"full-load-layout-{number}"
        sides = ("ours", "append", "layout")
        for side in sides if number % 2 == 0 else sides[::-1]:
            if side == "ours":
                ours_runs.append(run_job(spark, job))
                say(f"FullLoad: ours {ours_runs[-1].seconds:.1f}s {ours_runs[-1].counts}")
            elif side == "append":
                appends.append(baselines.append_full_load(spark, path, target))
                appends[-1].rows = n
                say(f"FullLoad: blind append {appends[-1].seconds:.1f}s")
            else:
                layouts.append(baselines.layout_full_load(spark, path, layout))
                layouts[-1].rows = n
                say(f"FullLoad: the layout written plainly {layouts[-1].seconds:.1f}s")
        after = {
            "ours": _rows(table),
            "append": _rows(str(target), "ID"),
            "layout": _rows(str(layout / "current")),
            "layout_history": _rows(str(layout / "history")),
        }
        if rows_after and after != rows_after:
            raise RuntimeError(f"FullLoad: rows after differ between runs: {after}, {rows_after}")
        rows_after = after
        ws.remove()
        shutil.rmtree(target, ignore_errors=True)
        shutil.rmtree(layout, ignore_errors=True)
    say(f"FullLoad: rows after: {rows_after}")
    ours = _median(ours_runs, lambda r: r.seconds)
    append = _median(appends, lambda r: r.seconds)
    layout_run = _median(layouts, lambda r: r.seconds)
    ours_rate, append_rate = rate(n, ours.seconds), rate(n, append.seconds)
    return {
        "rows": n,
        "file_mib": file_mib,
        "rows_after": rows_after,
        "ours": {**ours.as_json(), "rows_per_s": round(ours_rate, 1)},
        "append": {**append.as_json(), "rows_per_s": round(append_rate, 1)},
        "layout": {**layout_run.as_json(), "rows_per_s": round(rate(n, layout_run.seconds), 1)},
        "runs": {
            "ours": [round(r.seconds, 3) for r in ours_runs],
            "append": [round(r.seconds, 3) for r in appends],
            "layout": [round(r.seconds, 3) for r in layouts],
        },
        "ratios": {
            "ours_vs_append": round(rate(ours_rate, append_rate), 3),
            "ours_time_vs_append": round(rate(ours.seconds, append.seconds), 3),
            "ours_time_vs_layout": round(rate(ours.seconds, layout_run.seconds), 3),
            "layout_time_vs_append": round(rate(layout_run.seconds, append.seconds), 3),
        },
    }


T = TypeVar("T")


def _median(runs: Sequence[T], seconds: Callable[[T], float]) -> T:
    """The run whose time is the median (the lower middle one of an even count)."""
    return sorted(runs, key=seconds)[(len(runs) - 1) // 2]


def sweep(spark: SparkSession, sizes: Sizes, base: Path) -> dict[str, Any]:
    """Ours only: W1 transactions at several batch sizes (two batches each), profiled."""
    out: dict[str, Any] = {}
    for per_batch in sizes.sweep:
        txs = data.w1_transactions(2 * per_batch, sizes.w1_table_rows)
        ws = Workspace(base / f"sweep-{per_batch}", data.W1_DATASET, data.W1_YAML)
        data.write_w1_data(ws.root, txs)
        data.write_requests(ws.landing, txs, per_batch)
        cfg = ws.config(
            landing={"transactions": "./landing/transactions", "max_files_per_trigger": 1},
            spark={"shuffle_partitions": SHUFFLE_PARTITIONS},
        )
        job = Job.create(spark, cfg)
        say(f"Sweep: {per_batch} transactions per batch, 2 batches")
        seed_tables(spark, job, data.W1_DATASET, data.W1_SCHEMAS, sizes.w1_table_rows, sizes)
        ours = run_job(spark, job)
        say(f"Sweep: {per_batch} per batch: {ours.seconds:.1f}s")
        out[str(per_batch)] = {
            **ours.as_json(),
            "transactions_per_s": round(rate(len(txs), ours.seconds), 2),
        }
        ws.remove()
    return out


def latency(
    spark: SparkSession, sizes: Sizes, base: Path, broker: LocalKafkaBroker
) -> dict[str, Any]:
    """Ours, then plain, under the same published load; the ratio of their p50 latencies."""
    result = kafka.latency(spark, sizes, base, broker)
    result["plain"] = kafka.latency_plain(spark, sizes, base, broker)
    ours, plain = result["latency"]["p50"]["seconds"], result["plain"]["latency"]["p50"]["seconds"]
    result["ratios"] = {"ours_vs_plain_p50": round(rate(ours, plain), 2)}
    return result


# -- warm-up, report ---------------------------------------------------------------------------
def warm_up(spark: SparkSession, base: Path) -> None:
    """A tiny W1 (ours and every baseline) so JIT and first-use costs are out of the numbers."""
    from bench.sizes import QUICK

    tiny = Sizes(
        **{
            **asdict(QUICK),
            "name": "warm-up",
            "w1_transactions": 10,
            "w1_table_rows": 1_000,
            "w1_lines_per_file": 10,
            "w1_files_per_trigger": 1,
            "w1_sample": 2,
        }
    )
    w1(spark, tiny, base / "warm-up", label="warm-up")
    shutil.rmtree(base / "warm-up", ignore_errors=True)


TARGETS: list[tuple[str, str, Callable[[dict[str, Any]], float | None], str, float]] = [
    (
        "W1",
        "W1 vs naive per-transaction MERGE",
        lambda r: _get(r, "W1", "ratios", "ours_vs_naive_tx"),
        ">=",
        100.0,
    ),
    (
        "Batch",
        "Batch 25: ours / plain",
        lambda r: _get(r, "Batch", "runs", "25", "ratios", "ours_vs_plain"),
        "<=",
        1.5,
    ),
    (
        "Batch",
        "Batch 25: ours with SCD2 / ours (--scd2)",
        lambda r: _get(r, "Batch", "runs", "25", "ratios", "ours_scd2_vs_ours"),
        "<=",
        1.25,  # issue 49
    ),
    ("W2", "W2 vs blind append", lambda r: _get(r, "W2", "ratios", "ours_vs_append"), ">=", 0.5),
    (
        "W2",
        "W2: ours with SCD2 time / ours time (--scd2)",
        lambda r: _get(r, "W2", "ratios", "ours_scd2_time_vs_ours"),
        "<=",
        1.25,  # issue 49
    ),
    (
        "W2",
        "W2 vs delta-rs MERGE (all at once)",
        lambda r: _get(r, "W2", "ratios", "ours_vs_deltars_all"),
        ">=",
        1.0,
    ),
    (
        "W2",
        "W2 vs delta-rs MERGE (per file)",
        lambda r: _get(r, "W2", "ratios", "ours_vs_deltars_per_file"),
        ">=",
        1.0,
    ),
    (
        "W2",
        "W2: ours time / plain one MERGE time",
        lambda r: _get(r, "W2", "ratios", "ours_time_vs_plain_merge"),
        "<=",
        1.5,
    ),
    (
        "Scale",
        "Scale: time large / small table",
        lambda r: _get(r, "Scale", "time_ratio"),
        "<=",
        1.5,
    ),
    (
        "ScaleRandom",
        "ScaleRandom: time large / small table",
        lambda r: _get(r, "ScaleRandom", "time_ratio"),
        "<=",
        1.5,
    ),
    (
        "ScaleClustered",
        "ScaleClustered: time large / small table",
        lambda r: _get(r, "ScaleClustered", "time_ratio"),
        "<=",
        1.5,
    ),
    (
        "ScaleLiquid",
        "ScaleLiquid: time large / small table",
        lambda r: _get(r, "ScaleLiquid", "time_ratio"),
        "<=",
        1.5,
    ),
    (
        "FullLoad",
        "FullLoad: ours time / blind append time",
        lambda r: _get(r, "FullLoad", "ratios", "ours_time_vs_append"),
        "<=",
        3.0,
    ),
]
"""(workload, name, value, comparison, bound): a target of a workload that ran but whose value
is missing (its baseline was not run, or the results file predates it) is shown as "not run"."""


LATENCY_P50_TARGET = 5.0
"""Issue 12: seconds from publishing a transaction to its outcome event, median, at 50 tx/s
(issue 6 asked for 3 s)."""
LATENCY_VS_PLAIN_TARGET = 1.5
"""Issue 12: our p50 latency / the plain baseline's (publish → end of its batch's MERGEs)."""


def _latency(entry: dict[str, Any]) -> str:
    return f"{'' if entry['exact'] else '>= '}{entry['seconds']:.1f}s"


def _get(results: dict[str, Any], *keys: str) -> float | None:
    node: Any = results
    for k in keys:
        if not isinstance(node, dict) or k not in node:
            return None
        node = node[k]
    return float(node)


def render(results: dict[str, Any]) -> str:
    lines = [
        f"cdc benchmark ({results['sizes']['name']}"
        f"{', deletion vectors on' if results['sizes'].get('deletion_vectors') else ''}), "
        f"{results['machine']}",
        f"code: {results['code']}",
        "",
        f"{'workload':<8} {'contender':<34} {'seconds':>9} {'tx/s':>9} {'rows/s':>10} "
        f"{'changes/s':>10} {'ours / it':>10}",
    ]

    def row(work: str, name: str, entry: dict[str, Any], ratio: float | None) -> None:
        def num(key: str, fmt: str) -> str:
            return format(entry[key], fmt) if key in entry else "-"

        lines.append(
            f"{work:<8} {name:<34} {entry['seconds']:>9.1f} "
            f"{num('transactions_per_s', '>9,.1f'):>9} "
            f"{num('rows_per_s', '>10,.0f'):>10} {num('changes_per_s', '>10,.0f'):>10} "
            f"{(f'{ratio:.2f}x' if ratio is not None else ''):>10}"
        )

    if "W1" in results:
        r = results["W1"]
        ratios = r["ratios"]
        rows_ratio = ratios["ours_vs_append_rows"]
        lines.append(
            f"W1: {r['transactions']:,} transactions, {r['rows']:,} rows, 3 tables x "
            f"{r['table_rows']:,} rows, {r['per_batch']:,} transactions per batch"
        )
        row("W1", "ours (grouped, landing)", r["ours"], None)
        row(
            "W1",
            f"naive MERGE per tx (first {r['sample']})",
            r["naive"],
            ratios["ours_vs_naive_tx"],
        )
        row("W1", "blind append (rows/s)", r["append"], rows_ratio)
        row(
            "W1",
            f"delta-rs MERGE per tx (first {r['sample']})",
            r["deltars"],
            ratios["ours_vs_deltars_tx"],
        )
    if "Batch" in results:
        lines += batch.render_lines(results["Batch"])
    if "W1K" in results:
        r = results["W1K"]
        lines.append(
            f"W1K: the same {r['transactions']:,} transactions as JSON requests on a Kafka topic, "
            f"{r['per_batch']:,} per batch (kafka.max_offsets_per_trigger), first publish → "
            "last outcome event; ratio = kafka / landing"
        )
        if "landing" in r:
            row("W1", "ours (grouped, landing, reference)", r["landing"], None)
        row("W1", "ours (grouped, kafka)", r["ours"], r["ratios"]["kafka_vs_landing_tx"])
    if "Latency" in results:
        r = results["Latency"]
        lat = r["latency"]
        lines.append(
            f"Latency: {r['published']:,} transactions of 1-5 rows published at {r['rate']:g} tx/s "
            f"for {r['publish_seconds']:g}s (achieved {r['achieved_rate']:.1f} tx/s) while ours "
            f"runs, trigger {r['trigger']}, <= {r['per_batch']} per batch"
            + (
                f", after {r['warm_seconds']:g}s of the same stream untimed (each contender)"
                if r.get("warm_seconds")
                else ""
            )
        )
        lines.append(
            f"Latency  ours (kafka), publish → outcome: p50 {_latency(lat['p50'])}, "
            f"p99 {_latency(lat['p99'])}, max {_latency(lat['max'])}; "
            f"{r['measured']:,} of {r['published']:,} transactions measured"
        )
        if r["censored"]:
            lines.append(
                f"Latency  {r['censored']:,} had no outcome when the job was stopped "
                f"{r['stopped_after_last_publish']:.0f}s after the last publish: their latency "
                "counts as a lower bound (>=)"
            )
        lines.append(
            f"Latency  measured: median {r['median_queued_seconds']:.1f}s from publish to the "
            f"start of its micro-batch, {r['median_in_batch_seconds']:.1f}s from there to the "
            "outcome"
        )
        lines += _latency_plain_lines(r)
        for b in r["batches"]:
            sink = f"{b['sink_seconds']:.1f}s in the sink" if b["sink_seconds"] else "skipped"
            measured = (
                f", {b['measured']} outcomes at {b['latency_min']:.1f}-{b['latency_max']:.1f}s"
                if b["measured"]
                else ""
            )
            lines.append(
                f"Latency  batch {b['batchId']}: {b['inputRows']} requests, "
                f"{b['spark_seconds']:.1f}s (Spark), {sink}{measured}"
            )
    if "W2" in results:
        r = results["W2"]
        ratios = r["ratios"]
        props = f", {r['properties']} properties" if "properties" in r else ""
        lines.append(
            f"W2: {r['changes']:,} DMS changes in {r['files']} files into a table of "
            f"{r['table_rows']:,} rows{props}"
        )
        row("W2", "ours (DMS landing zone)", r["ours"], None)
        for key, label in W2_LABELS.items():
            if key in r:
                row("W2", label, r[key], ratios.get(f"ours_vs_{key}"))
        missing = [label for key, label in W2_LABELS.items() if key not in r]
        if missing:
            lines.append(f"W2       not run: {'; '.join(missing)}")
        time_ratio = ratios.get("ours_time_vs_plain_merge")
        if time_ratio is not None:
            merges = r["plain_merge"].get("merge_seconds", {}).get("count", 1)
            lines.append(
                f"W2       time ours / plain one MERGE: {r['ours']['seconds']:.1f}s / "
                f"{r['plain_merge']['seconds']:.1f}s = {time_ratio:.2f}x"
                + _spread(r.get("runs"), {"ours": "ours", "plain_merge": "plain"})
                + (f" (plain ran {merges} micro-batches, not one)" if merges != 1 else "")
            )
        if "rows_after" in r:
            after = r["rows_after"]
            names = {
                "plain_merge": "plain one MERGE",
                "deltars_per_file": "delta-rs per file",
                "deltars_all": "delta-rs all at once",
            }
            lines.append(
                "W2       rows after: "
                + ", ".join(f"{names.get(k, k)} {v:,}" for k, v in after.items())
                + ("" if len(set(after.values())) <= 1 else "  (DIFFER)")
            )
        diff = r.get("keys_vs_plain_merge")
        if diff is not None:
            lines.append(
                f"W2       keys only in ours {diff['only_ours']:,}, only in plain one MERGE "
                f"{diff['only_plain']:,}"
            )
    if "Events" in results:
        r = results["Events"]
        lines.append(
            f"Events: {r['events']:,} Debezium events (JSON, no schema wrapper) in "
            f"{r['transactions']:,} source transactions over {r['tables']} tables of "
            f"{r['table_rows']:,} rows, "
            + (f"<= {r['per_batch']:,} per batch" if r["per_batch"] else "ours available-now")
        )
        row("Events", "ours (change feed)", r["ours"], None)
        row(
            "Events",
            "plain, last per key, MERGE per table",
            r["plain"],
            r["ratios"]["ours_vs_plain"],
        )
        check = r["check"]
        differ = not check["same_rows"] or any(check["ours_vs_expected"].values())
        lines.append(
            f"Events   time ours / plain: {r['ours']['seconds']:.1f}s / "
            f"{r['plain']['seconds']:.1f}s = {r['ratios']['ours_time_vs_plain']:.2f}x; rows after: "
            + ", ".join(
                f"{schema} {c['ours']:,}/{c['plain']:,}" for schema, c in check["rows"].items()
            )
            + ("  (DIFFER)" if differ else " (ours/plain: same ids and values)")
        )
    if "EventsLatency" in results:
        lines += events.latency_lines(results["EventsLatency"])
    if "CatchUp" in results:
        lines += catchup.render_lines(results["CatchUp"])
    if "Soak" in results:
        lines += soak.render_lines(results["Soak"])
    orders = {
        "Scale": "",
        "ScaleRandom": "rows in random id order, the job's upkeep on, ",
        "ScaleClustered": "rows in random id order, then cdc maintain --cluster, ",
        "ScaleLiquid": "rows in random id order, then CLUSTER BY (id) and OPTIMIZE FULL, ",
    }
    for work, order in orders.items():
        if work not in results:
            continue
        r = results[work]
        for rows, run in r["runs"].items():
            each = r.get("every", {}).get(rows, [])
            own = run["seconds"] - run.get("upkeep_seconds", 0.0)
            lines.append(
                f"{work:<8} ours, W2 changes into {int(rows):>12,} rows {own:>9.1f}s"
                + (f"  (median of {len(each)} runs: {_seconds(each)})" if len(each) > 1 else "")
                + (
                    f"; the job's upkeep after it {run['upkeep_seconds']:.1f}s (not in the time)"
                    if r.get("upkeep")
                    else ""
                )
            )
            m = r.get("maintain", {}).get(rows)
            if m and r.get("upkeep"):
                tasks = ", ".join(
                    f"{t['action']} {t['detail']} {t['seconds']:.1f}s" for t in m["tasks"]
                )
                lines.append(
                    f"{work:<8} the job's upkeep before the run, {int(rows):,} rows (not in the "
                    f"time): {m['seconds']:.1f}s: {tasks or 'nothing due'}"
                )
            elif m:
                how = (
                    "CLUSTER BY (id), OPTIMIZE FULL"
                    if r.get("liquid")
                    else "cdc maintain --cluster"
                )
                again = "OPTIMIZE" if r.get("liquid") else "cdc maintain --cluster"
                lines.append(
                    f"{work:<8} {how} of {int(rows):,} rows (not in ours' time): "
                    f"{m['seconds']:.1f}s, {m['files_before']} -> {m['files_after']} files"
                    + (
                        f"; after the run, {again} again: {m['after']['seconds']:.1f}s, "
                        f"{m['after']['files_before']} -> {m['after']['files_after']} files"
                        if m.get("after")
                        else ""
                    )
                )
        lines.append(
            f"{work:<8} time ratio {r['time_ratio']:.2f}x for {r['rows_ratio']:g}x rows "
            f"({order}{r['changes']:,} changes)"
        )
    if "FullLoad" in results:
        r = results["FullLoad"]
        ratios = r["ratios"]
        lines.append(
            f"FullLoad: one DMS full-load file of {r['rows']:,} rows ({r['file_mib']:.1f} MiB, "
            "Op = 'I', unique ids) into an empty table"
        )
        row("FullLoad", "ours (DMS landing zone)", r["ours"], None)
        row("FullLoad", "blind append (Spark read + append)", r["append"], ratios["ours_vs_append"])
        if "layout" in r:
            row("FullLoad", "our layout written plainly", r["layout"], None)
        after = r["rows_after"]
        names = {"ours": "ours", "append": "append", "layout": "layout"}
        spread = _spread(r.get("runs"), names)
        lines.append(
            f"FullLoad time ours / append: {r['ours']['seconds']:.1f}s / "
            f"{r['append']['seconds']:.1f}s = {ratios['ours_time_vs_append']:.2f}x{spread}; "
            "rows after: "
            + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in after.items())
            + ("" if set(after.values()) == {r["rows"]} else "  (DIFFER)")
        )
        if "layout" in r:
            lines.append(
                f"FullLoad the layout alone (current + history rows, hashed, two plain appends): "
                f"{r['layout']['seconds']:.1f}s = {ratios['layout_time_vs_append']:.2f}x the "
                f"append; ours / it = {ratios['ours_time_vs_layout']:.2f}x"
            )
    if "Cold" in results:
        lines += cold.render_lines(results["Cold"])
    if "Decode" in results:
        lines += decode.render_lines(results["Decode"])
    for per_batch, entry in results.get("Sweep", {}).items():
        lines.append(
            f"Sweep    ours, {int(per_batch):>4} transactions per batch {entry['seconds']:>9.1f}s "
            f"{entry['transactions_per_s']:>7.2f} tx/s"
        )
    for work in ("W1", "W1K", "W2", "FullLoad"):
        if work in results:
            lines += ["", *profile_lines(f"{work} ours", results[work]["ours"])]
            if "ours_scd2" in results[work]:
                lines += ["", *profile_lines(f"{work} ours_scd2", results[work]["ours_scd2"])]
    if "Batch" in results:
        for size in results["Batch"]["runs"]:
            for contender in ("ours", "ours_scd2"):
                lines += ["", *batch.profile_lines(results["Batch"], size, contender)]
    lines += ["", "targets:"]
    for work, name, get, op, bound in TARGETS:
        value = get(results)
        if value is None:
            if work in results:
                lines.append(f"  {name:<40} {'':>9}  (target {op} {bound}x)  not run")
            continue
        met = value >= bound if op == ">=" else value <= bound
        lines.append(
            f"  {name:<40} {value:>8.2f}x  (target {op} {bound}x)  {'met' if met else 'NOT met'}"
        )
    if "Latency" in results:
        p50 = results["Latency"]["latency"]["p50"]
        value, bound = p50["seconds"], LATENCY_P50_TARGET
        verdict = (
            ("met" if value <= bound else "NOT met")
            if p50["exact"] or value > bound
            else "unknown (a lower bound)"
        )
        lines.append(
            f"  {'Latency p50, publish → outcome':<40} {'' if p50['exact'] else '>='}"
            f"{value:>8.2f}s  (target <= {bound}s)  {verdict}"
        )
        ratio = results["Latency"].get("ratios", {}).get("ours_vs_plain_p50")
        if ratio is not None:
            exact = p50["exact"] and results["Latency"]["plain"]["latency"]["p50"]["exact"]
            met = ratio <= LATENCY_VS_PLAIN_TARGET
            verdict = "met" if met else "NOT met"
            if not exact:
                verdict += " (from lower bounds)"
            lines.append(
                f"  {'Latency p50: ours / plain':<40} {ratio:>8.2f}x  "
                f"(target <= {LATENCY_VS_PLAIN_TARGET}x)  {verdict}"
            )
    if "Soak" in results:
        lines += soak.target_lines(results["Soak"])
    return "\n".join(lines)


def _latency_plain_lines(r: dict[str, Any]) -> list[str]:
    """The plain baseline's latency under the same load, and the ratio of the medians."""
    plain = r.get("plain")
    if plain is None:
        return []
    lat = plain["latency"]
    lines = [
        f"Latency  plain (kafka), publish → end of its batch's MERGEs: p50 {_latency(lat['p50'])}, "
        f"p99 {_latency(lat['p99'])}, max {_latency(lat['max'])}; {plain['measured']:,} of "
        f"{plain['published']:,} measured (achieved {plain['achieved_rate']:.1f} tx/s)",
    ]
    if plain["batches"]:
        sizes = [b["transactions"] for b in plain["batches"]]
        seconds = sorted(b["seconds"] for b in plain["batches"])
        lines.append(
            f"Latency  plain: {len(sizes)} batches of {min(sizes)}-{max(sizes)} transactions, "
            f"median {seconds[len(seconds) // 2]:.1f}s in its foreachBatch"
        )
    ratio = r.get("ratios", {}).get("ours_vs_plain_p50")
    if ratio is not None:
        lines.append(f"Latency  p50 ours / plain {ratio:.2f}x")
    return lines


def _spread(runs: dict[str, list[float]] | None, names: dict[str, str]) -> str:
    """`` (medians of N runs: ours a/b/c s, plain d/e/f s)`` for a workload that reports the
    median of several runs (``runs``: contender -> seconds of each run; ``names``: the
    contenders to print, and their labels); empty for a single run or none."""
    if not runs or len(runs.get("ours", [])) < 2:
        return ""
    parts = [f"{label} {_seconds(runs[key])}" for key, label in names.items() if key in runs]
    return f" (medians of {len(runs['ours'])} runs: {', '.join(parts)})"


def _seconds(runs: Sequence[float]) -> str:
    """``a/b/c s``: the seconds of each run, in run order."""
    return "/".join(f"{x:.1f}" for x in runs) + " s"


def profile_lines(title: str, run: dict[str, Any]) -> list[str]:
    """Our run's profile as an indented tree: seconds, share of the run, calls, Spark jobs."""
    total = run["seconds"]
    out = [
        f"profile of {title}: {total:.1f}s end to end, {len(run['batches'])} batches",
        f"  {'region':<58} {'seconds':>8} {'share':>6} {'calls':>6} {'jobs':>6}",
    ]
    inside = 0.0
    for entry in run["profile"]:
        depth = len(entry["path"]) - 1
        if depth == 0:
            inside += entry["seconds"]
        name = "  " * depth + entry["path"][-1]
        out.append(
            f"  {name:<58} {entry['seconds']:>8.1f} {entry['seconds'] / total:>6.0%} "
            f"{entry['calls']:>6} {entry.get('jobs', '-'):>6}"
        )
    out.append(
        f"  {'outside the sink (stream: listing, offsets, commits)':<58} "
        f"{total - inside:>8.1f} {(total - inside) / total:>6.0%}"
    )
    if run.get("files"):
        out.append(f"  {'tables after the run':<58} {'files':>8} {'mean MiB':>9} {'max MiB':>8}")
        for table, f in run["files"].items():
            out.append(
                f"    {table:<56} {int(f['files']):>8} {f['mean_mib']:>9.2f} {f['max_mib']:>8.2f}"
            )
    return out


SESSIONLESS = ("CatchUp", "Soak")
"""Workloads that need no SparkSession in the benchmark's process (CatchUp and Soak run ``cdc
run`` as a process of its own, CatchUp its plain too): alone, the benchmark starts none (nor its
warm-up); with others, they run after the session is stopped."""


class _Broker:
    """The local Kafka broker, started by the first workload that needs it."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.broker: LocalKafkaBroker | None = None

    def get(self) -> LocalKafkaBroker:
        if self.broker is None:
            self.broker = kafka.start_broker(self.base)
        return self.broker

    def stop(self) -> None:
        if self.broker is not None:
            self.broker.stop()


def run(
    sizes: Sizes, workloads: Sequence[str], output: Path, *, keep: bool = False
) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="cdc-bench-", dir="/tmp"))
    say(f"workspace {base}")
    TABLES.clear()
    TABLES.update({"deletion_vectors": True} if sizes.deletion_vectors else {})
    results: dict[str, Any] = {
        "sizes": asdict(sizes),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} cores, local[2], {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f} at start",
        "workloads": list(workloads),
        "code": _code_version(),
    }
    started = time.perf_counter()
    spark: SparkSession | None = None
    brokers = _Broker(base)
    try:
        if any(w not in SESSIONLESS for w in workloads):
            spark = session()
            _session_workloads(spark, sizes, workloads, base, output, results, brokers)
        if spark is not None and any(w in SESSIONLESS for w in workloads):
            spark.stop()  # the machine's memory and cores to the job's process alone
            spark = None
        if "CatchUp" in workloads:
            results["CatchUp"] = catchup.catchup(sizes, base, brokers.get())
            _write(output, results)
        if "Soak" in workloads:
            results["Soak"] = soak.soak(sizes, base, brokers.get())
            _write(output, results)
        results["seconds"] = round(time.perf_counter() - started, 1)
        results["load_average_end"] = round(os.getloadavg()[0], 1)
        _write(output, results)
        print(render(results), flush=True)
        return results
    finally:
        brokers.stop()
        if spark is not None:
            spark.stop()
        if not keep:
            shutil.rmtree(base, ignore_errors=True)


def _session_workloads(
    spark: SparkSession,
    sizes: Sizes,
    workloads: Sequence[str],
    base: Path,
    output: Path,
    results: dict[str, Any],
    brokers: _Broker,
) -> None:
    """The workloads that run on the benchmark's SparkSession, after its warm-up."""
    warm_up(spark, base)
    if "W1" in workloads:
        results["W1"] = w1(spark, sizes, base)
        shutil.rmtree(base / "w1", ignore_errors=True)
        shutil.rmtree(base / "w1-tables", ignore_errors=True)
        _write(output, results)
    if "Batch" in workloads:
        results["Batch"] = batch.batch(spark, sizes, base)
        _write(output, results)
    if "W1K" in workloads:
        results["W1K"] = w1k(spark, sizes, base, brokers.get(), results.get("W1"))
        _write(output, results)
    reuse = None
    if "W2" in workloads:
        results["W2"], ours = w2(spark, sizes, base)
        # Scale's runs have W2's four properties: a wide W2's run is not one of them
        reuse = None if sizes.w2_extra_props else (sizes.w2_table_rows, ours)
        shutil.rmtree(base / "w2", ignore_errors=True)
        _write(output, results)
    if "Scale" in workloads:
        results["Scale"] = scale(spark, sizes, base, reuse)
        _write(output, results)
    if "ScaleRandom" in workloads:
        results["ScaleRandom"] = scale(spark, sizes, base, None, shuffled=True)
        _write(output, results)
    if "ScaleClustered" in workloads:
        results["ScaleClustered"] = scale(spark, sizes, base, None, clustered=True)
        _write(output, results)
    if "ScaleLiquid" in workloads:
        results["ScaleLiquid"] = scale(spark, sizes, base, None, liquid=True)
        _write(output, results)
    if "FullLoad" in workloads:
        results["FullLoad"] = full_load(spark, sizes, base)
        _write(output, results)
    if "Sweep" in workloads:
        results["Sweep"] = sweep(spark, sizes, base)
    if "Cold" in workloads:
        results["Cold"] = cold.cold(spark, sizes, base)
        _write(output, results)
    if "Latency" in workloads:
        results["Latency"] = latency(spark, sizes, base, brokers.get())
        _write(output, results)
    if "Events" in workloads:
        results["Events"] = events.events(spark, sizes, base, brokers.get())
        _write(output, results)
    if "Decode" in workloads:
        results["Decode"] = decode.decode_alone(spark, sizes)
        _write(output, results)
    if "EventsLatency" in workloads:
        results["EventsLatency"] = events.events_latency(spark, sizes, base, brokers.get())


def _code_version() -> str:
    """The commit of the code measured, and whether its engine had uncommitted changes."""
    import subprocess

    import streaming

    root = Path(streaming.__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "streaming", "connectors"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"{root} (not a git checkout)"
    return f"{head}{' + uncommitted changes in streaming/connectors' if dirty else ''} ({root})"


def _write(output: Path, results: dict[str, Any]) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2, default=str) + "\n")
