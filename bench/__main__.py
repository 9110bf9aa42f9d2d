"""``python -m bench [--quick] [--workloads W1,Batch,W2,Scale,FullLoad,Cold,Events,CatchUp]
[--output FILE]``; ``--workloads CatchUp`` runs one workload alone.

W1K (W1 over a local Kafka broker), Latency (publish → outcome at a steady rate), EventsLatency
(PostgreSQL commit → outcome through Debezium, issue 35), ScaleRandom (Scale with the tables'
rows in random id order), ScaleClustered (the same, then ``cdc maintain --cluster``),
ScaleLiquid (the same, then Delta's liquid clustering by id) and Sweep are not in the default
set: ``--workloads W1K,Latency,ScaleRandom``."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from bench.run import render, run
from bench.sizes import FULL, QUICK, W2_BASELINES

WORKLOADS = (
    "W1",
    "Batch",
    "W1K",
    "W2",
    "Scale",
    "ScaleRandom",
    "ScaleClustered",
    "ScaleLiquid",
    "FullLoad",
    "Sweep",
    "Cold",
    "Latency",
    "Events",
    "Decode",
    "EventsLatency",
    "CatchUp",
    "Soak",
)
DEFAULT = ("W1", "Batch", "W2", "Scale", "FullLoad", "Cold", "Events", "Decode", "CatchUp")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the workloads scaled down (<12 min)")
    parser.add_argument(
        "--workloads",
        default=",".join(DEFAULT),
        help=f"comma-separated subset of {', '.join(WORKLOADS)}",
    )
    parser.add_argument(
        "--output", type=Path, default=Path(__file__).parent / "results.json", help="JSON results"
    )
    parser.add_argument(
        "--w1-transactions",
        type=int,
        help="W1: apply only the first N transactions of the generated stream (same data)",
    )
    parser.add_argument("--w2-changes", type=int, help="W2 and the Scale workloads: DMS changes")
    parser.add_argument(
        "--w2-rows",
        type=int,
        help="W2: rows of the table before the run; the changes of W2 and the Scale workloads "
        "update and delete keys of this range",
    )
    parser.add_argument("--w2-files", type=int, help="W2 and the Scale workloads: DMS files")
    parser.add_argument(
        "--w2-baselines",
        metavar="NAME,...",
        help=f"W2: the baselines to run beside ours, of {','.join(W2_BASELINES)} "
        "('deltars' = both delta-rs ones, 'none' = ours only; default: all)",
    )
    parser.add_argument(
        "--w2-extra-props",
        type=int,
        metavar="N",
        help="W2 (not Scale or FullLoad): N properties p01, p02, ... (string and integer in "
        "turn) added to the table's 4, in the dataset, the seeded rows, the DMS files and the "
        "baselines' MERGEs (default 0: W2 as it is)",
    )
    parser.add_argument(
        "--w2-runs",
        type=int,
        help="W2: pairs of runs (ours, plain one MERGE), each on fresh tables, medians "
        "reported (3); the other baselines run once",
    )
    parser.add_argument(
        "--scale-rows",
        metavar="SMALL,LARGE",
        help="The Scale workloads: the two table sizes (default 1000000,10000000; "
        "quick: 100000,1000000)",
    )
    parser.add_argument(
        "--scale-runs",
        type=int,
        help="The Scale workloads: rounds of runs, each size on a fresh table, medians "
        "reported (2)",
    )
    parser.add_argument(
        "--rows-per-file",
        type=int,
        help="seeded tables: rows per data file (250,000; smaller to see several files in a "
        "tiny run)",
    )
    parser.add_argument(
        "--full-load-rows",
        type=int,
        help="FullLoad: rows of the DMS full-load file (1,000,000; quick: 100,000)",
    )
    parser.add_argument(
        "--full-load-runs",
        type=int,
        help="FullLoad: rounds of runs (ours, the append, our layout written plainly), "
        "medians reported (3)",
    )
    parser.add_argument(
        "--latency-rate", type=float, help="Latency: transactions published per second (50)"
    )
    parser.add_argument(
        "--latency-seconds",
        type=float,
        help="Latency: seconds of publishing (60; quick: 20)",
    )
    parser.add_argument(
        "--latency-warm-seconds",
        type=float,
        help="Latency: seconds of the same stream published before, untimed (20; quick: 15)",
    )
    parser.add_argument(
        "--latency-drain",
        type=float,
        help="Latency: seconds after the last publish during which new batches may start "
        "(600; quick: 240); then the batch in flight finishes and the job stops",
    )
    parser.add_argument(
        "--latency-trigger",
        help="Latency: the job's trigger.interval, e.g. '1 second' (the default)",
    )
    parser.add_argument(
        "--latency-max-per-batch",
        type=int,
        help="Latency: kafka.max_offsets_per_trigger (default: W1's transactions per batch)",
    )
    parser.add_argument(
        "--events", type=int, help="Events: Debezium change events (200,000; quick: 10,000)"
    )
    parser.add_argument(
        "--events-max-per-batch",
        type=int,
        help="Events: ours' kafka.max_offsets_per_trigger (default: none, available-now)",
    )
    parser.add_argument(
        "--events-latency-transactions",
        type=int,
        help="EventsLatency: Postgres transactions committed (100; quick: 40)",
    )
    parser.add_argument(
        "--events-latency-rate",
        type=float,
        help="EventsLatency: Postgres transactions committed per second (5)",
    )
    parser.add_argument(
        "--catchup-rows",
        type=int,
        help="CatchUp: rows of each of the snapshot's two tables (1,000,000; quick: 100,000)",
    )
    parser.add_argument(
        "--catchup-transactions",
        type=int,
        help="CatchUp: 3-event source transactions after the snapshot (20,000; quick: 2,000)",
    )
    parser.add_argument(
        "--catchup-driver-memory",
        metavar="SIZE",
        help="CatchUp: spark.driver.memory of both processes, e.g. 4g (default: none set, "
        "Spark's 1g)",
    )
    parser.add_argument(
        "--soak-batches",
        type=int,
        help="Soak: micro-batches the job runs under the steady load (1000; at least 10)",
    )
    parser.add_argument(
        "--soak-rate", type=float, help="Soak: transactions published per second (8)"
    )
    parser.add_argument(
        "--soak-no-upkeep",
        action="store_true",
        help="Soak: write 'upkeep: {enabled: false}' into the job's config (default: no "
        "upkeep key, the job's default)",
    )
    parser.add_argument(
        "--sweep",
        help="Sweep: comma-separated transactions per micro-batch (default: the size's list)",
    )
    parser.add_argument(
        "--batch",
        metavar="NxB,...",
        help="Batch: transactions per micro-batch x micro-batches per run "
        "(default 25x12,500x6; quick: 25x6,500x3)",
    )
    parser.add_argument(
        "--batch-rows", type=int, help="Batch and Cold: rows of each of the three tables (100,000)"
    )
    parser.add_argument(
        "--no-threads",
        action="store_true",
        help="Batch: skip the plain variant whose MERGEs run from threads",
    )
    parser.add_argument(
        "--no-cold-plain",
        action="store_true",
        help="Cold: skip the plain baseline's first batch in a fresh process",
    )
    parser.add_argument(
        "--deletion-vectors",
        action="store_true",
        help="ours with tables.deletion_vectors on (Cold's fresh process keeps the default)",
    )
    parser.add_argument(
        "--scd2",
        action="store_true",
        help="Batch and W2: also run ours with an SCD2 table on every object schema, reported "
        "as ours_scd2 and its time against ours without",
    )
    parser.add_argument("--keep", action="store_true", help="keep the /tmp workspace")
    parser.add_argument(
        "--render",
        type=Path,
        metavar="RESULTS",
        help="print the table of a results file, run nothing",
    )
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())))
        return 0
    chosen = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(chosen) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {WORKLOADS}")
    sizes = QUICK if args.quick else FULL
    if args.w1_transactions:
        sizes = replace(sizes, w1_transactions=args.w1_transactions)
    if args.sweep:
        sizes = replace(sizes, sweep=tuple(int(n) for n in args.sweep.split(",") if n.strip()))
    if args.batch:
        sizes = replace(sizes, batch_runs=_batch_runs(args.batch, parser))
    if args.batch_rows:
        sizes = replace(sizes, batch_rows=args.batch_rows)
    if args.no_threads:
        sizes = replace(sizes, batch_threads=False)
    if args.scd2:
        sizes = replace(sizes, scd2=True)
    if args.no_cold_plain:
        sizes = replace(sizes, cold_plain=False)
    if args.deletion_vectors:
        sizes = replace(sizes, deletion_vectors=True)
    for flag, field in (
        ("w2_changes", "w2_changes"),
        ("w2_rows", "w2_table_rows"),
        ("w2_files", "w2_files"),
        ("w2_runs", "w2_runs"),
        ("scale_runs", "scale_runs"),
        ("full_load_rows", "full_load_rows"),
        ("full_load_runs", "full_load_runs"),
        ("rows_per_file", "rows_per_file"),
        ("events", "events_changes"),
        ("events_max_per_batch", "events_max_per_batch"),
        ("events_latency_transactions", "events_latency_transactions"),
        ("catchup_rows", "catchup_rows"),
        ("catchup_transactions", "catchup_transactions"),
    ):
        value = getattr(args, flag)
        if value is not None:
            if value < 1:
                parser.error(f"--{flag.replace('_', '-')}: expected a positive number")
            sizes = replace(sizes, **{field: value})
    if args.w2_extra_props is not None:
        if args.w2_extra_props < 0:
            parser.error("--w2-extra-props: expected 0 or a positive number")
        sizes = replace(sizes, w2_extra_props=args.w2_extra_props)
    if args.w2_baselines is not None:
        sizes = replace(sizes, w2_baselines=_w2_baselines(args.w2_baselines, parser))
    if args.scale_rows:
        sizes = replace(sizes, scale_rows=_scale_rows(args.scale_rows, parser))
    latency = {
        "latency_rate": args.latency_rate,
        "latency_seconds": args.latency_seconds,
        "latency_warm_seconds": args.latency_warm_seconds,
        "latency_drain": args.latency_drain,
        "latency_trigger": args.latency_trigger,
        "latency_max_per_batch": args.latency_max_per_batch,
    }
    sizes = replace(sizes, **{k: v for k, v in latency.items() if v is not None})
    if args.events_latency_rate is not None:
        if args.events_latency_rate <= 0:
            parser.error("--events-latency-rate: expected a positive number")
        sizes = replace(sizes, events_latency_rate=args.events_latency_rate)
    if args.catchup_driver_memory:
        sizes = replace(sizes, catchup_driver_memory=args.catchup_driver_memory)
    if args.soak_batches is not None:
        if args.soak_batches < 10:
            parser.error("--soak-batches: expected at least 10 (reported per tenth)")
        sizes = replace(sizes, soak_batches=args.soak_batches)
    if args.soak_rate is not None:
        if args.soak_rate <= 0:
            parser.error("--soak-rate: expected a positive number")
        sizes = replace(sizes, soak_rate=args.soak_rate)
    if args.soak_no_upkeep:
        sizes = replace(sizes, soak_upkeep=False)
    run(sizes, chosen, args.output, keep=args.keep)
    return 0


def _batch_runs(text: str, parser: argparse.ArgumentParser) -> tuple[tuple[int, int], ...]:
    """``25x6,500x3`` → ((25, 6), (500, 3))."""
    runs = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        per_batch, _, batches = part.partition("x")
        if not (per_batch.isdigit() and batches.isdigit() and int(batches) >= 2):
            parser.error(f"--batch: expected N x B with B >= 2, e.g. 25x6, not {part!r}")
        runs.append((int(per_batch), int(batches)))
    return tuple(runs)


def _w2_baselines(text: str, parser: argparse.ArgumentParser) -> tuple[str, ...]:
    """``plain,append`` → ("plain", "append") in ``W2_BASELINES``' order; ``deltars`` = both
    delta-rs baselines, ``none`` = none."""
    names = {n.strip() for n in text.split(",") if n.strip()} - {"none"}
    if "deltars" in names:
        names = (names - {"deltars"}) | {"deltars_per_file", "deltars_all"}
    unknown = sorted(names - set(W2_BASELINES))
    if unknown:
        parser.error(f"--w2-baselines: unknown {unknown}; choose from {W2_BASELINES}")
    return tuple(n for n in W2_BASELINES if n in names)


def _scale_rows(text: str, parser: argparse.ArgumentParser) -> tuple[int, int]:
    """``20000,50000`` → (20000, 50000)."""
    parts = [p.strip().replace("_", "") for p in text.split(",") if p.strip()]
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        parser.error(f"--scale-rows: expected SMALL,LARGE, e.g. 20000,50000, not {text!r}")
    return int(parts[0]), int(parts[1])


if __name__ == "__main__":
    raise SystemExit(main())
