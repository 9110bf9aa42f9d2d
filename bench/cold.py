"""Workload **Cold**: what a ``cdc run --once`` user pays for the first batch of a process.

A workspace with W1's dataset, its three tables seeded (``Sizes.batch_rows`` rows each, and every
table the job writes already created: a warehouse the job has run on before) and **one
transaction of one row** waiting in the landing folder. Then, in a subprocess (a fresh Python
and JVM), ``bench.cold_driver ours``: ``cli.main.main(["run", "--once", "--config", ...])``,
what the ``cdc`` entry point runs, with timestamps around its phases. Measured: wall time from
launching the process to its exit, split into process start → SparkSession ready → tables
prepared (``Job.create``) → first batch done (the foreachBatch function returned) → query ended
(``cdc run`` returned) → exit.

With ``Sizes.cold_plain`` the plain baseline's first batch in a fresh process too (same config,
same session settings, its own copy of the tables, the same landing file).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import deltalake
import yaml
from pyspark.sql import SparkSession

from bench import data
from bench.common import say, seed_tables
from bench.ours import Workspace
from bench.sizes import Sizes
from streaming.core.config import load_config
from streaming.runtime.job import Job

PROJECT = Path(__file__).resolve().parents[1]
PHASES = (
    ("launch", "python", "process start (Python up)"),
    ("python", "session", "→ SparkSession ready"),
    ("session", "tables", "→ tables prepared (Job.create)"),
    ("tables", "batch", "→ first batch done"),
    ("batch", "run", "→ query ended"),
    ("run", "exit", "→ process exit"),
)
"""(from, to, label) of the reported split; plain has no ``tables`` phase."""


def _transaction() -> data.SmallTx:
    """One UPSERT of one existing row."""
    row = {"id": data.key("c", 42), "name": "cold", "qty": 7, "price": 1.5, "status": "active"}
    return data.SmallTx("cold-000001", "UPSERT", "shop.Customer", [row], "./data/cold/cold-000001")


def _workspace(spark: SparkSession, sizes: Sizes, root: Path) -> tuple[Workspace, Path, Job]:
    ws = Workspace(root, data.W1_DATASET, data.W1_YAML)
    tx = _transaction()
    data.write_w1_data(ws.root, [tx])
    data.write_requests(ws.landing, [tx], 1)
    config = ws.root / "cdc.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "warehouse": "./warehouse",
                "checkpoints": "./checkpoints",
                "datasets": {data.W1_DATASET: f"{data.W1_DATASET}.yaml"},
                "landing": {"transactions": "./landing/transactions"},
                "allowed_locations": ["./data"],
            }
        )
    )
    job = Job.create(spark, load_config(config, environ={}))
    say(f"Cold: seeding 3 x {sizes.batch_rows:,} rows (tables created in this process)")
    seed_tables(spark, job, data.W1_DATASET, data.W1_SCHEMAS, sizes.batch_rows, sizes)
    job.close()  # its lease released: the fresh process's `cdc run` takes the checkpoint
    return ws, config, job


def _child(mode: str, root: Path, config: Path, *extra: str) -> dict[str, float]:
    """Run the driver in a fresh process; its stamps plus ``launch`` and ``exit``."""
    stamps = root / f"stamps-{mode}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDC_")}
    env["PYTHONPATH"] = str(PROJECT)
    command = [sys.executable, "-m", "bench.cold_driver", mode, str(stamps), str(config), *extra]
    with (root / f"{mode}.log").open("w") as log:
        launch = time.time()
        done = subprocess.run(command, cwd=root, env=env, stdout=log, stderr=log, timeout=900)
        exit_ = time.time()
    if done.returncode != 0:
        tail = (root / f"{mode}.log").read_text()[-3000:]
        raise RuntimeError(f"Cold {mode}: exit code {done.returncode}\n{tail}")
    return {"launch": launch, **json.loads(stamps.read_text()), "exit": exit_}


def _split(stamps: dict[str, float]) -> dict[str, Any]:
    out: dict[str, Any] = {"seconds": round(stamps["exit"] - stamps["launch"], 3), "phases": {}}
    for start, end, _label in PHASES:
        if start in stamps and end in stamps:
            out["phases"][f"{start}-{end}"] = round(stamps[end] - stamps[start], 3)
    if "tables" not in stamps and "session" in stamps and "batch" in stamps:
        out["phases"]["session-batch"] = round(stamps["batch"] - stamps["session"], 3)
    return out


def cold(spark: SparkSession, sizes: Sizes, base: Path) -> dict[str, Any]:
    root = base / "cold"
    ws, config, job = _workspace(spark, sizes, root)
    plain_args = root / "plain-args.json"
    if sizes.cold_plain:
        tables = {
            s: shutil.copytree(job.layout.table(data.W1_DATASET, s), root / "plain" / s)
            for s in data.W1_SCHEMAS
        }
        plain_args.write_text(
            json.dumps(
                {
                    "root": str(ws.root),
                    "landing": str(ws.landing),
                    "tables": {s: str(p) for s, p in tables.items()},
                }
            )
        )
    say("Cold: ours, `cdc run --once` (streaming.cli.main.main) in a fresh process")
    ours = _split(_child("ours", root, config))
    statuses = _statuses(job.layout.outcomes)
    say(f"Cold: ours {ours['seconds']:.1f}s {ours['phases']} {statuses}")
    result: dict[str, Any] = {
        "table_rows": sizes.batch_rows,
        "ours": {**ours, "statuses": statuses},
    }
    if sizes.cold_plain:
        say("Cold: plain's first batch in a fresh process")
        result["plain"] = _split(_child("plain", root, config, str(plain_args)))
        say(f"Cold: plain {result['plain']['seconds']:.1f}s {result['plain']['phases']}")
        result["ratio"] = round(ours["seconds"] / result["plain"]["seconds"], 2)
    ws.remove()
    return result


def _statuses(outcomes: str) -> dict[str, int]:
    """Outcomes by status (delta-rs, after the run)."""
    counts: dict[str, int] = {}
    for status in deltalake.DeltaTable(outcomes).to_pyarrow_table(columns=["status"])["status"]:
        counts[str(status)] = counts.get(str(status), 0) + 1
    return counts


def render_lines(result: dict[str, Any]) -> list[str]:
    lines = [
        "Cold: `cdc run --once` in a fresh process (Python + JVM), one transaction of one row "
        f"waiting, 3 tables x {result['table_rows']:,} rows already there; launch → exit",
        f"{'workload':<8} {'contender':<30} {'seconds':>8}  split",
    ]
    for key, label in (("ours", "ours (cdc run --once)"), ("plain", "plain, first batch")):
        if key not in result:
            continue
        entry = result[key]
        phases = entry["phases"]
        parts = []
        for start, end, name in PHASES:
            if f"{start}-{end}" in phases:
                parts.append(f"{name} {phases[f'{start}-{end}']:.1f}s")
            elif start == "session" and "session-batch" in phases:
                parts.append(f"→ first batch done {phases['session-batch']:.1f}s")
        shown = "; ".join(parts)
        lines.append(f"{'Cold':<8} {label:<30} {entry['seconds']:>8.1f}  {shown}")
    if "ratio" in result:
        lines.append(f"Cold     ours / plain {result['ratio']:.2f}x (launch → exit)")
    return lines
