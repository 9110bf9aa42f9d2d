"""``python -m bench [--quick] [--workloads W1,Batch,W2,Scale,Cold] [--output bench/results.json]``.

W1K (W1 over a local Kafka broker) and Latency (publish → outcome at a steady rate) are not in
the default set: ``--workloads W1K,Latency``."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from bench.run import render, run
from bench.sizes import FULL, QUICK

WORKLOADS = ("W1", "Batch", "W1K", "W2", "Scale", "Sweep", "Cold", "Latency")
DEFAULT = ("W1", "Batch", "W2", "Scale", "Cold")


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
    parser.add_argument(
        "--latency-rate", type=float, help="Latency: transactions published per second (50)"
    )
    parser.add_argument(
        "--latency-seconds",
        type=float,
        help="Latency: seconds of publishing (60; quick: 20)",
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
    if args.no_cold_plain:
        sizes = replace(sizes, cold_plain=False)
    latency = {
        "latency_rate": args.latency_rate,
        "latency_seconds": args.latency_seconds,
        "latency_drain": args.latency_drain,
        "latency_trigger": args.latency_trigger,
        "latency_max_per_batch": args.latency_max_per_batch,
    }
    sizes = replace(sizes, **{k: v for k, v in latency.items() if v is not None})
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


if __name__ == "__main__":
    raise SystemExit(main())
