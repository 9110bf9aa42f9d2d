"""The driver's memory does not grow with the events of a batch (issue 48).

Two runs of ``cdc run --once``, each a fresh process (``python -m streaming.cli.main``, this
checkout's code) on its own empty warehouse and topic prefix of the session's broker, a change
feed (Debezium's Postgres JSON, no schema wrapper, transaction metadata) whose whole backlog is
one batch (no ``kafka.max_offsets_per_trigger``):

- *small*: a snapshot of two tables of ``SMALL_ROWS`` rows (``tests/support/snapshot.py``, the
  CatchUp benchmark's generator) and ``TRANSACTIONS`` three-event source transactions after it:
  50,000 events;
- *large*: the same with ``LARGE_ROWS`` = 250,000 rows a table: 503,000 events, ten times the
  small run's (2,003,000 until 2026-11-29, 1,003,000 until 2026-12-07: the driver's peak was
  182 MiB in both runs whatever the size, and the large run cost the suite 100+ s; a driver
  that held each event would hold ~0.5 GB more at this size, the bound stops it at ~50 MiB).

The driver's Python process's peak RSS (``VmHWM``, polled every 0.2 s from here:
``tests/support/memory.py``) of the large run must be at most ``BOUND`` times the small run's;
both runs exit 0 and leave the rows expected. The JVM's peak RSS is printed, not asserted (in
local mode it holds the executors' work too, and its heap grows towards ``DRIVER_MEMORY`` as
Spark pleases).

Today's code collects a feed's records on the driver (docs/deploy.md): this test fails on it
(the JVM runs out of heap collecting 1M records to Python, or the driver's RSS grows with them).
It is the acceptance test of the change-feed path that reads them as Spark data instead.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
import yaml

from streaming.core.layout import Layout
from tests.support.cdc import cdc_env, kill_group, start_cdc
from tests.support.debezium import Topics
from tests.support.memory import PeakWatch
from tests.support.snapshot import key, produce, snapshot_records, triples

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

DATASET = "ledger"
SCHEMAS = {"ledger.Account": "public.accounts", "ledger.Payment": "public.payments"}
YAML = "".join(
    f"{schema}:\n"
    "  properties:\n"
    "    owner: {type: string}\n"
    "    balance: {type: integer}\n"
    "    status: {type: string}\n"
    "    sourcePosition: {type: string}\n"
    "  watermark: [sourcePosition]\n"
    for schema in SCHEMAS
)
TRANSACTIONS = 1_000
"""Three-event source transactions after the snapshot, in both runs."""
SMALL_ROWS = (50_000 - 3 * TRANSACTIONS) // 2
"""23,500 rows a table: 50,000 events in the small run's batch."""
LARGE_ROWS = 250_000
BOUND = 1.25
"""Peak RSS of the driver's Python process: large run <= BOUND x small run."""
DRIVER_MEMORY = "4g"
"""``spark.driver.memory`` of both runs (the JVM's heap; local mode: the executors' too), as
docs/deploy.md says to start with change feeds. With 2g (until 2026-12-07) the large run's JVM
ran out of heap about one run in three (its 1M staged rows' check: "Not enough memory to build
and broadcast the table"), which then failed each source transaction alone for 20 minutes; the
job now stops at once with ``OUT_OF_MEMORY`` (tests/integration/test_isolation.py)."""
TIMEOUT = 1200.0


def transactions(prefix: str, rows: int) -> list[Any]:
    """``TRANSACTIONS`` source transactions after a snapshot of ``rows`` rows a table, each
    BEGIN, three events over both tables, END: transaction ``i`` updates account ``i``, inserts
    payment ``rows + i`` and deletes payment ``i`` (``i`` even) or updates it (``i`` odd)."""
    topics = Topics(prefix=prefix)  # its LSNs start after the snapshot's (SNAPSHOT_LSN)
    accounts, payments = SCHEMAS["ledger.Account"], SCHEMAS["ledger.Payment"]
    for i in range(TRANSACTIONS):
        row = {"owner": f"tx-{i}", "balance": i, "status": "active"}
        topics.transaction(
            f"{100_000 + i}:{i}",
            [
                (accounts, "u", {"id": key(i), **row}),
                (payments, "c", {"id": key(rows + i), **row}),
                (payments, "d" if i % 2 == 0 else "u", {"id": key(i), **row}),
            ],
        )
    return topics.records


def expected_rows(rows: int) -> dict[str, int]:
    """Current rows per schema after the snapshot and ``transactions``."""
    return {"ledger.Account": rows, "ledger.Payment": rows + TRANSACTIONS - TRANSACTIONS // 2}


@dataclass
class Run:
    events: int
    code: int
    seconds: float
    python_mb: float
    jvm_mb: float
    rows: dict[str, int | None]
    error: str | None

    def line(self, name: str) -> str:
        return (
            f"{name}: {self.events:,} events, exit {self.code} in {self.seconds:.0f}s, peak RSS "
            f"driver (Python) {self.python_mb:,.0f} MiB, JVM {self.jvm_mb:,.0f} MiB, rows "
            f"{self.rows}" + (f", {self.error}" if self.error else "")
        )


def current_count(path: Path) -> int | None:
    """Live rows of a Delta table (delta-rs); None when there is no table."""
    if not (path / "_delta_log").is_dir():
        return None
    query = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(str(path)))
    return int(pa.table(query.execute("SELECT COUNT(*) AS n FROM t").read_all())["n"][0].as_py())


def run_once(root: Path, bootstrap: str, broker: Any, prefix: str, rows: int) -> Run:
    """Produce a snapshot of ``rows`` rows a table and the transactions to ``prefix``; then
    ``cdc run --once`` on a fresh warehouse in a fresh process, its memory watched."""
    root.mkdir(parents=True)
    tables = list(SCHEMAS.values())
    broker.create_topics(
        [*(f"{prefix}.{t}" for t in tables), f"{prefix}.transaction", f"{prefix}.outcomes"]
    )
    produce(
        bootstrap,
        chain(snapshot_records(prefix, tables, rows), triples(transactions(prefix, rows))),
    )
    (root / f"{DATASET}.yaml").write_text(YAML)
    config = {
        "warehouse": "./warehouse",
        "checkpoints": "./checkpoints",
        "datasets": {DATASET: f"{DATASET}.yaml"},
        "landing": {},
        "upkeep": {"enabled": False},
        "kafka": {
            "bootstrap": bootstrap,
            "transactions_topic": f"{prefix}.requests",
            "outcomes_topic": f"{prefix}.outcomes",
            "change_feeds": [
                {"name": "pg", "dataset": DATASET, "topic_prefix": prefix, "tables": SCHEMAS}
            ],
        },
        "spark": {"conf": {"spark.driver.memory": DRIVER_MEMORY}},
    }
    (root / "cdc.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    log = root / "cdc.log"
    started = time.monotonic()
    # A large batch: the JVM's default compilers (tests/support/cdc.py, ``SHORT_LIVED_JVM``).
    env = cdc_env(short_lived=False)
    process = start_cdc(
        "run", "--once", "--config", str(root / "cdc.yaml"), cwd=root, log=log, env=env
    )
    watch = PeakWatch(process.pid).start()
    try:
        code = process.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        code = kill_group(process)
    seconds = time.monotonic() - started
    peaks = watch.stop()
    text = log.read_text(errors="replace")
    error = next((ln for ln in text.splitlines() if ln.startswith("cdc: error")), None)
    layout = Layout(str(root / "warehouse"), str(root / "checkpoints"))
    return Run(
        2 * rows + 3 * TRANSACTIONS,
        code,
        seconds,
        peaks["python_mb"],
        peaks["jvm_mb"],
        {s: current_count(Path(layout.table(DATASET, s))) for s in SCHEMAS},
        None if error is None else error[:300],
    )


def test_the_driver_memory_does_not_grow_with_the_events_of_a_batch(
    kafka_broker: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    small = run_once(tmp_path / "small", bootstrap, kafka_broker, "drvmem-small", SMALL_ROWS)
    print(small.line("small"))
    large = run_once(tmp_path / "large", bootstrap, kafka_broker, "drvmem-large", LARGE_ROWS)
    print(large.line("large"))
    ratio = large.python_mb / small.python_mb if small.python_mb else float("inf")
    summary = f"driver peak RSS large / small: {ratio:.2f} (bound {BOUND})"
    print(summary)
    both = f"{small.line('small')}\n{large.line('large')}\n{summary}"
    assert small.code == 0 and large.code == 0, both
    assert small.rows == expected_rows(SMALL_ROWS), both
    assert large.rows == expected_rows(LARGE_ROWS), both
    assert large.python_mb <= BOUND * small.python_mb, both
