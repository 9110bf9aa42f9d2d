"""``python -m bench [--quick] [--workloads W1,W2,Scale] [--output bench/results.json]``.

W1K (W1 over a local Kafka broker) and Latency (publish → outcome at a steady rate) are not in
the default set: ``--workloads W1K,Latency``."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from bench.run import render, run
from bench.sizes import FULL, QUICK

WORKLOADS = ("W1", "W1K", "W2", "Scale", "Sweep", "Latency")
DEFAULT = ("W1", "W2", "Scale")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the workloads scaled down (<5 min)")
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


if __name__ == "__main__":
    raise SystemExit(main())
