"""Workload **CatchUp** (issue 48): a database's first day, one ``cdc run --once``.

A Debezium PostgreSQL connector's initial snapshot of two tables (``public.accounts`` →
``ledger.Account``, ``public.payments`` → ``ledger.Payment``: the Events workload's dataset and
feed, ``sourcePosition`` the watermark) and the source transactions that followed it, all on
Kafka before either contender starts (JSON without the converter's schema wrapper, as
``bench.events``):

- the snapshot (``tests/support/snapshot.py``, shared with the driver-memory test):
  ``Sizes.catchup_rows`` ``op: r`` reads per table, no ``transaction`` block, ``source.snapshot``
  ``first`` / ``true`` / ``last``, all at the LSN the snapshot began at (before every streamed
  change's);
- then ``Sizes.catchup_transactions`` source transactions of exactly ``EVENTS_PER_TX`` events
  (``bench.events.event_transactions``: updates, some inserts and deletes, of snapshot keys and
  of keys inserted since; each event on either table), each with BEGIN and END on
  ``<prefix>.transaction``, LSNs increasing; a delete is followed by its Kafka tombstone.

Producing them (confluent-kafka, batched, lz4) is not timed; its seconds are reported.

*Ours*: an empty warehouse (the job creates its tables), a config with the change feed and no
``kafka.max_offsets_per_trigger`` (every record in as few micro-batches as Spark takes), run as
a cold process: ``python -m bench.cold_driver ours`` = ``cdc run --once`` (``bench.cold``).
*Plain*: a cold process too (``bench.cold_driver catchup-plain``), on a session built from the
same config (same Spark settings: 4 shuffle partitions, and ``spark.driver.memory`` unset,
Spark's 1g, unless ``--catchup-driver-memory``): per table, its data topic read whole with
Spark's Kafka batch source, ``from_json``, the last event per key by LSN (snapshot reads and
streamed events alike), and one Delta MERGE into an empty table of the same columns it creates
first (``bench.events.merge_events``).

Measured per process: launch → exit; the driver's peak RSS (``VmHWM`` of the Python process)
and its JVM's (the ``java`` child's ``VmHWM``), each the larger of the process's own reading at
exit and the parent's polls every 0.2 s (``tests.support.memory``); the ratios ours / plain.
After both: ours' current tables against plain's (ids and values) and both against the state the
generator expects (delta-rs); ours' outcomes by status. Ours may fail (a snapshot of 1M rows
per table runs today's driver out of memory): then its exit code, its ``cdc: error`` line, its
seconds and peaks are recorded and plain still runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from itertools import chain
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml
from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from bench import events
from bench.cold import PROJECT, _split, _statuses
from bench.common import SHUFFLE_PARTITIONS, say
from bench.ours import TABLES, UPKEEP, Workspace
from bench.sizes import Sizes
from streaming.core.layout import Layout
from tests.support.kafka_broker import LocalKafkaBroker
from tests.support.memory import PeakWatch
from tests.support.snapshot import compare_rows, produce, snapshot_records, triples

PREFIX = "catchup"
EVENTS_PER_TX = 3
SPARK_DEFAULT_DRIVER_MEMORY = "1g"
"""Spark's ``spark.driver.memory`` when the config sets none (``Sizes.catchup_driver_memory``
empty: the Events workload's config, what ``cdc run`` gets unless told). Local mode: the
executors' heap too."""
TIMEOUT = 3600.0
"""The longest either process may take (then its process group is killed: a failure)."""
PLAIN_SCHEMA = StructType(
    [
        StructField("id", StringType(), nullable=False),
        StructField("version", LongType(), nullable=False),
        StructField("created", TimestampType(), nullable=False),
        StructField("updated", TimestampType(), nullable=False),
        StructField("hash", StringType(), nullable=False),
        StructField("owner", StringType()),
        StructField("balance", LongType()),
        StructField("status", StringType()),
        StructField(events.POSITION, StringType()),
    ]
)
"""Plain's empty tables: the columns (and types) of ours' current tables, which
``events.merge_events`` writes."""


# -- the records ---------------------------------------------------------------------------------
def transactions(sizes: Sizes) -> list[events.EventTx]:
    """The source transactions after the snapshot: ``catchup_transactions`` of exactly
    ``EVENTS_PER_TX`` events over the snapshot's keys (and keys inserted since)."""
    count = EVENTS_PER_TX * sizes.catchup_transactions
    return events.event_transactions(
        count, sizes.catchup_rows, per_tx=(EVENTS_PER_TX, EVENTS_PER_TX)
    )


def records(
    prefix: str, rows: int, txs: list[events.EventTx]
) -> Iterator[tuple[str, bytes | None, bytes | None]]:
    """The snapshot's reads, then the transactions' records (BEGIN, events, tombstones, END)."""
    tables = list(events.SCHEMAS.values())
    return chain(snapshot_records(prefix, tables, rows), triples(events.event_records(txs, prefix)))


def config(broker: LocalKafkaBroker, prefix: str, driver_memory: str = "") -> dict[str, Any]:
    """Ours' ``cdc.yaml`` (the Events workload's feed; no bound on a batch's records), plain's
    session's too; ``driver_memory``: ``spark.driver.memory``, "" = Spark's default."""
    conf = {"spark.driver.memory": driver_memory} if driver_memory else {}
    return {
        "warehouse": "./warehouse",
        "checkpoints": "./checkpoints",
        "datasets": {events.DATASET: f"{events.DATASET}.yaml"},
        "allowed_locations": ["./data"],
        "landing": {},
        "tables": dict(TABLES),
        "upkeep": dict(UPKEEP),
        "kafka": {
            "bootstrap": broker.bootstrap,
            "transactions_topic": f"{prefix}.requests",
            "outcomes_topic": f"{prefix}.outcomes",
            "change_feeds": [
                {
                    "name": events.FEED,
                    "dataset": events.DATASET,
                    "topic_prefix": prefix,
                    "tables": dict(events.SCHEMAS),
                }
            ],
        },
        "spark": {"shuffle_partitions": SHUFFLE_PARTITIONS, "conf": conf},
    }


# -- plain (runs in the cold process: bench.cold_driver catchup-plain) ---------------------------
def plain_catchup(
    spark: SparkSession, bootstrap: str, tables: Mapping[str, tuple[str, str]]
) -> dict[str, float]:
    """Per schema (topic, path): create the empty table, then one MERGE of the topic's last
    event per key; seconds per table."""
    per_table: dict[str, float] = {}
    for schema, (topic, path) in sorted(tables.items()):
        at = time.perf_counter()
        DeltaTable.create(spark).location(path).addColumns(PLAIN_SCHEMA).execute()
        events.merge_events(spark, path, events.latest_events(spark, bootstrap, topic))
        per_table[schema] = round(time.perf_counter() - at, 3)
    return per_table


# -- a cold process ------------------------------------------------------------------------------
def launch(mode: str, root: Path, cwd: Path, config_file: Path, *extra: str) -> dict[str, Any]:
    """``python -m bench.cold_driver MODE STAMPS CONFIG EXTRA...`` in a fresh process (its own
    process group), its memory watched; never raises for the process's failure: exit code,
    seconds (launch → exit), phases, peaks, and for a failure the ``cdc: error`` line."""
    stamps = root / f"stamps-{mode}.json"
    log = root / f"{mode}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDC_")}
    env["PYTHONPATH"] = str(PROJECT)
    command = [
        sys.executable,
        "-m",
        "bench.cold_driver",
        mode,
        str(stamps),
        str(config_file),
        *extra,
    ]
    with log.open("w") as out:
        launched = time.time()
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=out, stderr=out, start_new_session=True
        )
        watch = PeakWatch(process.pid).start()
        try:
            code = process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            code = process.wait()
        exited = time.time()
    watched = watch.stop()
    got: dict[str, Any] = json.loads(stamps.read_text()) if stamps.exists() else {}
    times = {k: float(v) for k, v in got.items() if not k.startswith(("peak_", "plain_"))}
    out_: dict[str, Any] = {
        **_split({"launch": launched, **times, "exit": exited}),
        "exit_code": code,
        "failed": code != 0,
        "peak_python_mb": max(watched["python_mb"], float(got.get("peak_python_mb", 0.0))),
        "peak_jvm_mb": max(watched["jvm_mb"], float(got.get("peak_jvm_mb", 0.0))),
        "jvm_rss_max_mb": watched["jvm_rss_mb"],
        "log": str(log),
    }
    if "tables" not in times and {"session", "run"} <= times.keys():  # plain's one phase
        out_["phases"]["session-run"] = round(times["run"] - times["session"], 3)
    if "plain_per_table" in got:
        out_["per_table"] = got["plain_per_table"]
    if code != 0:
        text = log.read_text(errors="replace")
        out_["error"] = error_line(text) or f"exit code {code} (no `cdc: error` line)"
        oom = out_of_memory(text)
        if oom is not None:
            out_["out_of_memory"] = oom
        out_["log_tail"] = text[-2000:]
    return out_


def error_line(log: str) -> str | None:
    """The first line of the process's ``cdc: error [...]`` message (trimmed), or None."""
    for line in log.splitlines():
        if line.startswith("cdc: error"):
            return line.strip()[:500]
    return None


def out_of_memory(log: str) -> str | None:
    """A log's ``OutOfMemoryError``: preferably the one a Py4J call raised, with the call
    (``An error occurred while calling o289.collectToPython. : java.lang.OutOfMemoryError: Java
    heap space``), else the first line naming one; None without."""
    lines = log.splitlines()
    first: str | None = None
    for index, line in enumerate(lines):
        if "OutOfMemoryError" not in line:
            continue
        if index and "An error occurred while calling" in lines[index - 1]:
            return f"{lines[index - 1].strip()} {line.strip()}"[:400]
        first = first or line.strip()[:300]
    return first


# -- checks (after both) -------------------------------------------------------------------------
def _check_table(path: str, rows: int, touched: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    try:
        table = events.current_rows(path)
    except Exception as e:  # no table, or not readable: ours failed before it wrote one
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}, None
    ids = table.column("id").to_pylist()
    values = list(zip(*(table.column(p).to_pylist() for p in events.PROPS), strict=True))
    return compare_rows(ids, values, rows, touched), table


def check(
    ours: Mapping[str, str], plain: Mapping[str, str], rows: int, txs: list[events.EventTx]
) -> dict[str, Any]:
    """Per schema: ours and plain against the expected state, and ours against plain (same
    ids and values, in id order)."""
    expected = events.final_state(txs)
    out: dict[str, Any] = {"rows": {}, "ours": {}, "plain": {}, "same_rows": True}
    for schema, table in events.SCHEMAS.items():
        ours_check, ours_rows = _check_table(ours[schema], rows, expected[table])
        plain_check, plain_rows = _check_table(plain[schema], rows, expected[table])
        out["ours"][schema], out["plain"][schema] = ours_check, plain_check
        out["rows"][schema] = {
            "expected": plain_check.get("expected", ours_check.get("expected")),
            "ours": None if ours_rows is None else ours_rows.num_rows,
            "plain": None if plain_rows is None else plain_rows.num_rows,
        }
        out["same_rows"] = out["same_rows"] and _same(ours_rows, plain_rows)
    return out


def _same(a: pa.Table | None, b: pa.Table | None) -> bool:
    """Same ids and values (types and nullability aside)."""
    if a is None or b is None or a.num_rows != b.num_rows:
        return False
    return all(a.column(c).to_pylist() == b.column(c).to_pylist() for c in ("id", *events.PROPS))


# -- the workload --------------------------------------------------------------------------------
def catchup(sizes: Sizes, base: Path, broker: LocalKafkaBroker) -> dict[str, Any]:
    """CatchUp: see the module docstring. Runs without a session in this process."""
    root = base / "catchup"
    root.mkdir(parents=True, exist_ok=True)
    rows = sizes.catchup_rows
    txs = transactions(sizes)
    tables = list(events.SCHEMAS.values())
    names = ("transaction", "requests", "outcomes")
    broker.create_topics([*(f"{PREFIX}.{t}" for t in tables), *(f"{PREFIX}.{n}" for n in names)])
    n_events = rows * len(tables) + EVENTS_PER_TX * len(txs)
    say(
        f"CatchUp: a snapshot of {len(tables)} x {rows:,} rows + {len(txs):,} source "
        f"transactions of {EVENTS_PER_TX} events ({n_events:,} events) → {PREFIX}.*"
    )
    count, produce_seconds = produce(broker.bootstrap, records(PREFIX, rows, txs))
    say(f"CatchUp: produced {count:,} records in {produce_seconds:.1f}s (not timed)")

    ws = Workspace(root / "ours", events.DATASET, events.YAML)
    config_file = ws.root / "cdc.yaml"
    settings = config(broker, PREFIX, sizes.catchup_driver_memory)
    config_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    layout = Layout(str(ws.root / "warehouse"), str(ws.root / "checkpoints"))
    ours_tables = {s: layout.table(events.DATASET, s) for s in events.SCHEMAS}
    plain_tables = {s: str(root / "plain" / s) for s in events.SCHEMAS}
    plain_args = root / "plain-args.json"
    plain_args.write_text(
        json.dumps(
            {
                "bootstrap": broker.bootstrap,
                "tables": {
                    s: [f"{PREFIX}.{t}", plain_tables[s]] for s, t in events.SCHEMAS.items()
                },
            }
        )
    )

    say("CatchUp: ours, `cdc run --once` in a fresh process, empty warehouse")
    ours = launch("ours", root, ws.root, config_file)
    ours["statuses"] = _statuses_or_none(layout.outcomes)
    say(f"CatchUp: ours {_summary(ours)} {ours['statuses']}")
    say("CatchUp: plain in a fresh process (Kafka batch read, last per key, a MERGE per table)")
    plain = launch("catchup-plain", root, root, config_file, str(plain_args))
    say(f"CatchUp: plain {_summary(plain)} {plain.get('per_table', {})}")
    checked = check(ours_tables, plain_tables, rows, txs)
    say(f"CatchUp: check {_check_summary(checked)}")
    result: dict[str, Any] = {
        "table_rows": rows,
        "tables": len(tables),
        "transactions": len(txs),
        "events_per_transaction": EVENTS_PER_TX,
        "events": n_events,
        "records": count,
        "produce_seconds": round(produce_seconds, 1),
        "driver_memory": sizes.catchup_driver_memory
        or f"{SPARK_DEFAULT_DRIVER_MEMORY} (Spark's default)",
        "ours": _trim(ours),
        "plain": _trim(plain),
        "check": checked,
        "ratios": _ratios(ours, plain),
    }
    ws.remove()
    shutil.rmtree(root / "plain", ignore_errors=True)  # the logs stay (until the workspace goes)
    return result


def _statuses_or_none(outcomes: str) -> dict[str, int] | None:
    if not (Path(outcomes) / "_delta_log").is_dir():
        return None
    try:
        return _statuses(outcomes)
    except Exception:  # a table the failed run left unreadable: reported as none
        return None


def _trim(entry: dict[str, Any]) -> dict[str, Any]:
    """A process's entry without the log's path; the log's tail only for a failure."""
    return {k: v for k, v in entry.items() if k != "log"}


def _ratios(ours: Mapping[str, Any], plain: Mapping[str, Any]) -> dict[str, float | None]:
    def ratio(key: str) -> float | None:
        a, b = float(ours.get(key) or 0), float(plain.get(key) or 0)
        return round(a / b, 2) if a > 0 and b > 0 else None

    return {
        "time": ratio("seconds"),
        "peak_python": ratio("peak_python_mb"),
        "peak_jvm": ratio("peak_jvm_mb"),
    }


def _summary(entry: Mapping[str, Any]) -> str:
    state = f"FAILED (exit {entry['exit_code']}) " if entry["failed"] else ""
    error = f": {entry['error']}" if entry.get("error") else ""
    return (
        f"{state}{entry['seconds']:.1f}s, peak RSS driver {entry['peak_python_mb']:,.0f} MiB, "
        f"JVM {entry['peak_jvm_mb']:,.0f} MiB{error}"
    )


def _check_summary(checked: Mapping[str, Any]) -> str:
    parts = []
    for schema, counts in checked["rows"].items():
        ok = [side for side in ("ours", "plain") if checked[side][schema].get("ok") is True]
        parts.append(
            f"{schema} expected {counts['expected']:,}, ours {_n(counts['ours'])}, plain "
            f"{_n(counts['plain'])} (as expected: {', '.join(ok) or 'neither'})"
        )
    same = "same ids and values" if checked["same_rows"] else "ours and plain DIFFER"
    return "; ".join(parts) + f"; {same}"


def _n(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


SPLIT = (
    ("python-session", "Python up → SparkSession"),
    ("session-tables", "→ tables prepared"),
    ("tables-batch", "→ first batch done"),
    ("session-run", "→ MERGEs done"),
    ("batch-run", "→ query ended"),
    ("run-exit", "→ exit"),
)
"""The phases shown (``bench.cold.PHASES``' names; plain's ``session-run``)."""


def _split_text(phases: Mapping[str, float]) -> str:
    return "; ".join(f"{label} {phases[k]:.1f}s" for k, label in SPLIT if k in phases)


def render_lines(r: dict[str, Any]) -> list[str]:
    """CatchUp's lines of the results table."""
    lines = [
        f"CatchUp: a Debezium snapshot of {r['tables']} x {r['table_rows']:,} rows + "
        f"{r['transactions']:,} source transactions of {r['events_per_transaction']} events "
        f"({r['events']:,} events, {r['records']:,} records, produced in "
        f"{r['produce_seconds']:.1f}s, not timed); one `cdc run --once` into an empty warehouse, "
        f"a fresh process each, launch → exit, spark.driver.memory {r['driver_memory']}",
    ]
    for key, label in (
        ("ours", "ours (cdc run --once)"),
        ("plain", "plain, last per key, MERGE per table"),
    ):
        e = r[key]
        state = f"  FAILED, exit {e['exit_code']}" if e["failed"] else ""
        lines.append(
            f"{'CatchUp':<8} {label:<38} {e['seconds']:>8.1f}s  peak RSS driver "
            f"{e['peak_python_mb']:>7,.0f} MiB, JVM {e['peak_jvm_mb']:>7,.0f} MiB{state}"
        )
        split = _split_text(e.get("phases", {}))
        if split:
            lines.append(f"CatchUp    {key}: {split}")
        if e.get("error"):
            lines.append(f"CatchUp    {key}: {e['error']}")
        if e.get("out_of_memory"):
            lines.append(f"CatchUp    {key}, in its log: {e['out_of_memory'][:400]}")
    ratios = r["ratios"]

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    lines.append(
        f"CatchUp  ours / plain: time {fmt(ratios['time'])}"
        + (" (ours failed)" if r["ours"]["failed"] else "")
        + f", peak RSS driver {fmt(ratios['peak_python'])}, JVM {fmt(ratios['peak_jvm'])}"
    )
    statuses = r["ours"].get("statuses")
    lines.append(
        f"CatchUp  rows checked: {_check_summary(r['check'])}; ours' outcomes "
        f"{statuses if statuses is not None else '-'}"
    )
    return lines
