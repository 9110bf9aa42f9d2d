"""The ``cdc`` command line (docs/interface.md, "The command line")."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from streaming.core.codes import Code
from streaming.core.config import MIN_RETENTION_SECONDS, AppConfig, load_config
from streaming.core.errors import CdcError, ConfigError
from streaming.core.layout import CURRENT_FILE_MIB, Layout
from streaming.core.outcomes import Outcome
from streaming.runtime.logs import configure_logging

if TYPE_CHECKING:
    from connectors.avro import AvroCodec

__all__ = [
    "DEFAULT_CONFIG",
    "RESULT_COLUMNS",
    "build_parser",
    "cmd_config_reference",
    "cmd_demo",
    "cmd_maintain",
    "cmd_publish",
    "cmd_results",
    "cmd_run",
    "cmd_show",
    "cmd_status",
    "main",
]

DEFAULT_CONFIG = "cdc.yaml"


def _config(args: argparse.Namespace) -> AppConfig:
    """The config of ``--config`` (else $CDC_CONFIG, else ./cdc.yaml); logging set up by it."""
    chosen = args.config or os.environ.get("CDC_CONFIG")
    looked = Path.cwd() / DEFAULT_CONFIG
    if chosen is None and looked.exists():
        chosen = DEFAULT_CONFIG
    try:
        cfg = load_config(chosen)
    except ConfigError as e:
        if chosen is not None:
            raise
        raise ConfigError(
            f"no {DEFAULT_CONFIG} found (looked in {looked}); give one with --config FILE or "
            f"$CDC_CONFIG, or the whole config in CDC_* variables (these are not one: "
            f"{e.message})"
        ) from None
    configure_logging(cfg.log, verbose=args.verbose)
    return cfg


def cmd_run(args: argparse.Namespace) -> int:
    from streaming.core.failures import storage_failure
    from streaming.platform.exceptions import java_text
    from streaming.runtime.job import Job, end_now, storage_of
    from streaming.runtime.session import build_session

    cfg = _config(args)
    spark = build_session(cfg.spark, verbose=args.verbose)
    try:
        job = Job.create(spark, cfg)  # CHECKPOINT_HELD: another runner holds the checkpoint
    except Exception as e:  # a warehouse that cannot be written: its code, not a traceback
        failed = storage_failure(java_text(e), storage_of(cfg))
        if failed is None or isinstance(e, CdcError):
            raise
        raise failed from None
    try:
        stop = job.run(once=args.once, signals=True)
    finally:
        job.close()
    if stop is not None and stop.error is not None:  # the job stopped itself (refused, lease lost)
        if not stop.clean:  # a batch left to the replay: say why, then end as a crash would
            _print_error(stop.error)
            end_now(spark, 2)
        raise stop.error
    if stop is not None and not stop.clean:  # a batch left to the replay: end as a crash would
        end_now(spark, 0)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from streaming.cli.demo import run_demo

    run_demo(workspace=Path(args.workspace) if args.workspace else None, verbose=args.verbose)
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    from connectors.avro import codec_for
    from connectors.kafka_check import check_client
    from connectors.kafka_io import produce
    from connectors.kafka_topics import require_topic

    cfg = _config(args)
    if cfg.kafka is None:
        raise CdcError("kafka: not configured; cannot publish", code=Code.CONFIG_ERROR)
    codec = codec_for(cfg.kafka)
    records = []
    for file in args.files:
        for number, line in enumerate(Path(file).read_bytes().splitlines(), start=1):
            if line.strip():
                records.append(_request_record(line, f"{file}:{number}", codec))
    known = check_client(cfg.kafka)  # refused credentials: nothing is sent
    topic = cfg.kafka.transactions_topic
    if known is not None and topic not in known:  # created now, or KAFKA_TOPIC_MISSING
        require_topic(cfg.kafka, topic, "the requests topic, kafka.transactions_topic")
    count = produce(cfg.kafka, topic, records)
    print(f"published {count} request(s) to {cfg.kafka.transactions_topic} ({cfg.kafka.format})")
    return 0


def _request_record(line: bytes, where: str, codec: AvroCodec | None) -> tuple[str, bytes]:
    """(key = dataset, value) of one JSON request line. As JSON, an invalid line is published
    as is (the job rejects it with its code); as Avro it cannot be encoded: nothing is sent."""
    from streaming.core.requests import decode_json

    try:
        value = decode_json(line)
    except CdcError as e:
        if codec is not None:
            raise CdcError(f"{where}: {e.message}", code=e.code) from e
        print(f"warning: {where} is not a valid request", file=sys.stderr)
        return "", line
    key = str(value.get("dataset", "")) if isinstance(value, dict) else ""
    if codec is None:
        return key, line
    if not isinstance(value, dict):
        raise CdcError(f"{where}: a request must be a JSON object", code=Code.NOT_AN_OBJECT)
    try:
        return key, codec.encode_request(value)
    except (ValueError, TypeError) as e:
        raise CdcError(
            f"{where}: does not fit the Avro request schema: {str(e)[:300]}",
            code=Code.INVALID_REQUEST,
        ) from e


RESULT_COLUMNS = ["transactionId", "status", "batch", "actions", "error"]


def _result_row(outcome: Outcome) -> list[object]:
    counts = "; ".join(
        f"{a.target} +{a.inserted} ~{a.updated} -{a.deleted} ={a.unchanged} skip {a.skipped}"
        for a in outcome.actions
    )
    error = f"{outcome.error.code}: {outcome.error.message}" if outcome.error else ""
    return [outcome.transaction_id, outcome.status.value, outcome.batch_id, counts, error]


def cmd_results(args: argparse.Namespace) -> int:
    from streaming.cli.display import format_table

    cfg = _config(args)
    source: Iterable[Outcome]
    if cfg.kafka is not None:
        from connectors.kafka_check import check_client
        from connectors.kafka_io import read_outcomes

        check_client(cfg.kafka)
        source = read_outcomes(cfg.kafka, follow=args.follow)
    else:
        source = _outcomes_from_delta(cfg, args.verbose)
    chosen = (o for o in source if not args.transaction or o.transaction_id == args.transaction)
    if args.json:
        for outcome in chosen:
            print(outcome.to_json(), flush=True)
    elif args.follow:
        for number, outcome in enumerate(chosen):
            lines = format_table(RESULT_COLUMNS, [_result_row(outcome)]).splitlines()
            print("\n".join(lines if number == 0 else lines[2:]), flush=True)
    else:
        print(format_table(RESULT_COLUMNS, [_result_row(o) for o in chosen]))
    return 0


def _outcomes_from_delta(cfg: AppConfig, verbose: bool) -> list[Outcome]:
    from streaming.runtime.session import build_session
    from streaming.storage.tables import read_table

    spark = build_session(cfg.spark, verbose=verbose)
    layout = Layout(cfg.warehouse, cfg.checkpoints, cfg.query_name)
    rows = read_table(spark, layout.outcomes).orderBy("batch_id").select("outcome").collect()
    return [Outcome.from_json(r["outcome"]) for r in rows]


def cmd_show(args: argparse.Namespace) -> int:
    from streaming.cli.display import format_table
    from streaming.runtime.session import build_session
    from streaming.storage.tables import read_table

    if args.consistent and (args.history or args.version is not None):
        raise CdcError(
            "--consistent reads the current table at the ledger's version: "
            "not with --version or --history",
            code=Code.USAGE_ERROR,
        )
    if args.history and args.scd2:
        raise CdcError("--history and --scd2 name two tables: give one", code=Code.USAGE_ERROR)
    at = _as_of(args.as_of) if args.as_of is not None else None
    if at is not None and (args.history or args.scd2 or args.version is not None):
        raise CdcError(
            "--as-of reads the rows valid at a time (from the SCD2 table, else history): "
            "not with --history, --scd2 or --version",
            code=Code.USAGE_ERROR,
        )
    cfg = _config(args)
    layout = Layout(cfg.warehouse, cfg.checkpoints, cfg.query_name)
    if args.history:
        path = layout.history(args.dataset, args.schema)
    elif args.scd2:
        path = layout.scd2(args.dataset, args.schema)
    else:
        path = layout.table(args.dataset, args.schema)
    spark = build_session(cfg.spark, verbose=args.verbose)
    version = args.version
    if at is not None:
        from streaming.runtime.job import load_datasets
        from streaming.storage.scd2 import as_of

        defined = load_datasets(cfg).get(args.dataset)
        schema = defined.get(args.schema) if defined is not None else None
        valid_from = schema.scd2_valid_from() if schema is not None else None
        df = as_of(spark, layout, args.dataset, args.schema, at, valid_from=valid_from)
        print(f"{args.schema} as of {at.isoformat()}", file=sys.stderr)
    else:
        if args.consistent:
            from streaming.storage.consistent import CREATED_VERSION, consistent_versions

            known = consistent_versions(spark, layout)
            version = known.get(path, None if args.scd2 else CREATED_VERSION)
            shown = "latest" if version is None else version
            print(f"{args.schema} at version {shown} (the ledger's last batch)", file=sys.stderr)
        df = read_table(spark, path, version)
    order = ["id", "version"] if "version" in df.columns else df.columns[:1]
    if "__start_at" in df.columns:
        order = ["id", "__start_at"]
    ordered = df.orderBy(*order)
    limit = args.limit if args.limit is not None else _screenful()
    # The first rows only (Spark keeps the top ``limit + 1`` per task), never the whole table.
    rows = ordered.limit(limit + 1).collect() if limit else ordered.collect()
    more = bool(limit) and len(rows) > limit
    rows = rows[:limit] if more else rows
    if args.json:
        for row in rows:
            print(json.dumps(row.asDict(recursive=True), default=str))
    else:
        print(format_table(df.columns, [list(r) for r in rows]))
    if more:
        print(
            f"(the first {limit} rows by {', '.join(order)}; "
            "--limit N for more, --limit 0 for all)",
            file=sys.stderr,
        )
    return 0


def _as_of(text: str) -> datetime:
    """An ``--as-of`` ISO 8601 time; without a zone, UTC."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError as e:
        raise CdcError(
            f"--as-of {text!r}: not an ISO 8601 time (e.g. 2026-01-31T12:00:00Z)",
            code=Code.USAGE_ERROR,
        ) from e
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _screenful() -> int:
    """Rows that fit the terminal (at least 20; 20 where there is none)."""
    return max(shutil.get_terminal_size((80, 24)).lines - 4, 20)


def cmd_status(args: argparse.Namespace) -> int:
    from streaming.cli.status import collect_status, format_status
    from streaming.runtime.job import load_datasets
    from streaming.runtime.session import build_session
    from streaming.storage.maintain import all_tables

    cfg = _config(args)
    spark = build_session(cfg.spark, verbose=args.verbose)
    layout = Layout(cfg.warehouse, cfg.checkpoints, cfg.query_name)
    tables = [*all_tables(layout, load_datasets(cfg)), layout.pending]
    status = collect_status(
        spark,
        layout,
        batches=args.batches,
        tables=tables,
        small_file_mib=cfg.upkeep.small_file_mib,
    )
    print(json.dumps(status, indent=2) if args.json else format_status(status))
    return 0


def cmd_config_reference(args: argparse.Namespace) -> int:
    from streaming.cli.config_reference import render

    text = render()
    if args.check:
        path = Path(args.output or "docs/config.md")
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            print(f"{path} is out of date: run `make docs`", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
    elif args.output:
        path = Path(args.output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    else:
        sys.stdout.write(text)
    return 0


def cmd_maintain(args: argparse.Namespace) -> int:
    from streaming.runtime.job import load_datasets
    from streaming.runtime.session import build_session
    from streaming.storage.maintain import all_tables, current_tables, maintain

    if not args.optimize and not args.cluster and args.vacuum is None:
        args.optimize = True
    cfg = _config(args)
    layout = Layout(cfg.warehouse, cfg.checkpoints, cfg.query_name)
    datasets = load_datasets(cfg)
    spark = build_session(cfg.spark, verbose=args.verbose)
    tables = list(all_tables(layout, datasets))
    width = max((len(t) for t in tables), default=5)

    def line(cells: Sequence[object]) -> None:
        print(f"| {cells[0]!s:<{width}} | {cells[1]!s:>12} | {cells[2]!s:>11} |", flush=True)

    line(["table", "files before", "files after"])
    maintain(
        spark,
        tables,
        optimize=args.optimize,
        vacuum_hours=args.vacuum,
        current=current_tables(layout, datasets),
        cluster=args.cluster,
        current_file_mib=args.file_mib,
        done=lambda m: line([m.path, m.files_before, m.files_after]),
    )
    return 0


def _retention_hours(text: str) -> float:
    """``--vacuum``'s hours: no less than the config's retention floor (``upkeep.retention``)."""
    hours = float(text)
    if hours * 3600 < MIN_RETENTION_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text}: at least {MIN_RETENTION_SECONDS // 3600} hour — a shorter one lets VACUUM "
            "remove files a running reader or writer may still need"
        )
    return hours


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def _config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="config file (default: $CDC_CONFIG, then ./cdc.yaml)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdc",
        description="Spark Structured Streaming CDC processor: transactions and DMS changes "
        "applied to Delta Lake exactly once.",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="debug logging, and Spark's own log lines (by default only its errors and the "
        "warnings that matter)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="start the streaming job")
    _config_option(run)
    run.add_argument(
        "--once", action="store_true", help="process everything present (availableNow), then exit"
    )
    run.set_defaults(func=cmd_run)

    demo = sub.add_parser("demo", help="run the petstore demo in a temporary workspace")
    demo.add_argument("--workspace", help="keep the demo workspace here instead of a temp dir")
    demo.set_defaults(func=cmd_demo)

    pub = sub.add_parser(
        "publish",
        help="publish transaction requests (JSON lines) to Kafka, as Avro with kafka.format: avro",
    )
    pub.add_argument("files", nargs="+", help="files with one JSON request per line")
    _config_option(pub)
    pub.set_defaults(func=cmd_publish)

    res = sub.add_parser("results", help="read outcome events")
    _config_option(res)
    res.add_argument("--follow", action="store_true", help="keep waiting for new outcomes")
    res.add_argument("--transaction", metavar="ID", help="only this transaction")
    res.add_argument("--json", action="store_true", help="one JSON event per line")
    res.set_defaults(func=cmd_results)

    show = sub.add_parser("show", help="print a table")
    show.add_argument("dataset", help="dataset name, e.g. petstore")
    show.add_argument("schema", help="fully-qualified schema name, e.g. petstore.Dog")
    _config_option(show)
    show.add_argument("--version", type=int, help="Delta version to read (time travel)")
    show.add_argument("--history", action="store_true", help="the version history table")
    show.add_argument(
        "--scd2", action="store_true", help="the SCD type 2 table (schemas with scd2:)"
    )
    show.add_argument(
        "--as-of",
        metavar="TIME",
        help="the rows valid at an ISO 8601 time (UTC unless it says): from the SCD2 table "
        "(read at the ledger's version), else from history",
    )
    show.add_argument(
        "--consistent",
        action="store_true",
        help="read the table at the version the ledger recorded for the last completed batch "
        "(consistent with every other table read this way)",
    )
    show.add_argument("--json", action="store_true", help="one JSON row per line")
    show.add_argument(
        "--limit",
        type=int,
        metavar="N",
        help="the first N rows by id (default: a screenful; 0: every row, all to this process)",
    )
    show.set_defaults(func=cmd_show)

    stat = sub.add_parser(
        "status", help="last batches, outcomes by status and the ledger's latest table versions"
    )
    _config_option(stat)
    stat.add_argument(
        "--batches", type=int, default=10, metavar="N", help="how many batches (default 10)"
    )
    stat.add_argument("--json", action="store_true", help="one JSON document")
    stat.set_defaults(func=cmd_status)

    ref = sub.add_parser(
        "config-reference", help="print the reference of every config key (docs/config.md)"
    )
    ref.add_argument("--output", metavar="FILE", help="write it to FILE instead of stdout")
    ref.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if FILE (default docs/config.md) differs from the generated text",
    )
    ref.set_defaults(func=cmd_config_reference)

    maint = sub.add_parser("maintain", help="OPTIMIZE / VACUUM every table (default: OPTIMIZE)")
    _config_option(maint)
    maint.add_argument("--optimize", action="store_true", help="compact small files")
    maint.add_argument(
        "--cluster",
        action="store_true",
        help="as --optimize, and Z-order every current table by id (rewrites all its files; "
        "each then holds a narrow id range, so a MERGE rewrites only the files of its keys)",
    )
    maint.add_argument(
        "--file-mib",
        type=_positive_int,
        default=CURRENT_FILE_MIB,
        metavar="MIB",
        help=f"file size OPTIMIZE aims at in current tables (default {CURRENT_FILE_MIB})",
    )
    maint.add_argument(
        "--vacuum",
        type=_retention_hours,
        metavar="HOURS",
        help="remove files unreferenced for HOURS (at least 1, as upkeep.retention)",
    )
    maint.set_defaults(func=cmd_maintain)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(verbose=args.verbose)  # until a config says otherwise (log.*)
    try:
        return int(args.func(args))
    except CdcError as e:
        _print_error(e)
        return 2


def _print_error(error: CdcError) -> None:
    print(f"cdc: error [{error.code}]: {error.message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
