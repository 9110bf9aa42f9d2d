"""Workload sizes: the full benchmark (issue 6) and the same workloads scaled down (``--quick``)."""

from __future__ import annotations

from dataclasses import dataclass

W2_BASELINES = ("naive", "plain", "append", "deltars_per_file", "deltars_all")
"""W2's baselines: naive MERGE per DMS file, plain one MERGE of all changes, blind append,
delta-rs MERGE per file, delta-rs MERGE of all changes at once."""


@dataclass(frozen=True)
class Sizes:
    name: str
    w1_transactions: int
    """W1: transactions of 1-5 UPSERT/PATCH/DELETE rows each."""
    w1_table_rows: int
    """W1: rows of each of the three object tables before the run."""
    w1_lines_per_file: int
    """W1: requests per landing file (JSON lines)."""
    w1_files_per_trigger: int
    """W1: ``landing.max_files_per_trigger`` (transactions per micro-batch = this x lines)."""
    w1_sample: int
    """W1: transactions the per-transaction baselines (naive MERGE, delta-rs) apply: the first
    ones of the same stream; their rate is per transaction, so a sample measures it."""
    w2_changes: int
    """W2: DMS changes (70% U, 20% I, 10% D)."""
    w2_table_rows: int
    """W2: rows of the target table before the run."""
    w2_files: int
    """W2: DMS files the changes are spread over (one transaction each)."""
    scale_rows: tuple[int, int]
    """Scale and ScaleRandom: W2's changes against tables of these sizes (ours only)."""
    rows_per_file: int = 250_000
    """Seeded tables are written as files of about this many rows."""
    sweep: tuple[int, ...] = (100, 500, 1000)
    """Sweep (optional workload): W1 transactions per micro-batch to time our path at (ours
    only, two batches each, on W1's table size)."""
    latency_rate: float = 50.0
    """Latency: transactions published per second (steady), while the job runs."""
    latency_seconds: float = 60.0
    """Latency: how long transactions are published for (rate x seconds transactions)."""
    latency_warm_seconds: float = 20.0
    """Latency: before the measured transactions, the same stream is published at the same
    rate for this long, untimed (for each contender): the batches of a process's first seconds
    run code the JIT has not compiled yet, and measuring them measured the warm-up (p50 ratios
    of 1.45x and 2.37x in two runs of the same code)."""
    latency_drain: float = 600.0
    """Latency: after the last publish, how long new micro-batches may still start; then the
    batch in flight finishes and the job stops (what has no outcome by then is censored)."""
    latency_trigger: str = "1 second"
    """Latency: the job's ``trigger.interval`` (processing-time trigger)."""
    latency_max_per_batch: int = 0
    """Latency: ``kafka.max_offsets_per_trigger``; 0 = W1's transactions per batch."""
    batch_rows: int = 100_000
    """Batch and Cold: rows of each of W1's three tables."""
    batch_runs: tuple[tuple[int, int], ...] = ((25, 12), (500, 6))
    """Batch: (transactions per micro-batch, micro-batches) per run; each contender's first
    batch of a run is left out of the medians."""
    batch_threads: bool = True
    """Batch: also run plain with the tables' MERGEs from threads."""
    cold_plain: bool = True
    """Cold: also time plain's first batch in a fresh process."""
    w2_baselines: tuple[str, ...] = W2_BASELINES
    """W2: the baselines run beside ours (``W2_BASELINES``; absent ones are reported "not run")."""
    full_load_rows: int = 1_000_000
    """FullLoad: rows of the one DMS full-load file (unique ids, ``Op`` = 'I') loaded into an
    empty table."""
    full_load_runs: int = 3
    """FullLoad: rounds of runs (ours, the blind append and our layout written plainly, each on
    a fresh table); medians reported."""
    scale_runs: int = 2
    """Scale, ScaleRandom, ScaleClustered: rounds of runs (each size on a fresh table, in turn
    the small one first and the large one first); the median run of each size reported."""
    w2_runs: int = 3
    """W2: pairs of runs (ours and plain's one MERGE, each on freshly seeded tables, in turn
    ours first and plain first); medians reported. The other baselines run once, in the last
    pair's workspace."""
    deletion_vectors: bool = False
    """Ours with ``tables.deletion_vectors`` on (the job's current tables; a fresh process's
    Cold run keeps the default)."""
    events_changes: int = 200_000
    """Events (issue 35): Debezium change events (in source transactions of 1-5) into two
    tables of ``w2_table_rows`` rows each."""
    decode_records: int = 1_000_000
    """Decode (issue 58): Debezium records decoded alone, each contender over the same ones."""
    events_max_per_batch: int = 0
    """Events: ours' ``kafka.max_offsets_per_trigger`` (0 = none: available-now takes every
    event in as few micro-batches as Spark takes)."""
    events_latency_transactions: int = 100
    """EventsLatency: Postgres transactions committed at ``events_latency_rate`` per second."""
    events_latency_rate: float = 5.0
    """EventsLatency: transactions committed per second (steady)."""
    soak_batches: int = 1000
    """Soak (issue 36): micro-batches the job runs under the steady load before it drains and
    is stopped (reported per tenth of them)."""
    soak_rate: float = 8.0
    """Soak: transactions (1-5 rows) published per second."""
    soak_keys: int = 5000
    """Soak: keys of its one object table."""
    soak_upkeep: bool = True
    """Soak: False writes ``upkeep: {enabled: false}`` into the job's config
    (``--soak-no-upkeep``); True leaves the key out (the job's default)."""
    catchup_rows: int = 1_000_000
    """CatchUp (issue 48): rows of each of the two tables of the Debezium snapshot (op ``r``
    reads) on Kafka before the one ``cdc run --once``."""
    catchup_transactions: int = 20_000
    """CatchUp: source transactions of 3 events (BEGIN, END on the transaction topic) after the
    snapshot."""
    catchup_driver_memory: str = ""
    """CatchUp: ``spark.driver.memory`` in the config of both processes; "" = none, Spark's
    default (1g), as the Events workload's config."""
    w2_extra_props: int = 0
    """W2 (and its warm-up) only: properties added to W2's four (owner, balance, status, ts),
    ``p01``, ``p02``, ... string and integer in turn, in the dataset, the seeded table, the DMS
    files and every baseline's MERGE (``bench.data.w2_properties``); 0 = W2 as it was. The
    Scale workloads and FullLoad keep the four (a wide W2's run is then not reused by Scale)."""
    scd2: bool = False
    """Batch and W2 also run ours with an SCD2 table on every object schema (``--scd2``):
    reported as ``ours_scd2`` and its time against ours without."""


FULL = Sizes(
    name="full",
    w1_transactions=10_000,
    w1_table_rows=100_000,
    w1_lines_per_file=100,
    w1_files_per_trigger=5,
    w1_sample=100,
    w2_changes=200_000,
    w2_table_rows=1_000_000,
    w2_files=20,
    scale_rows=(1_000_000, 10_000_000),
)

QUICK = Sizes(
    name="quick",
    w1_transactions=1_000,
    w1_table_rows=10_000,
    w1_lines_per_file=100,
    w1_files_per_trigger=5,
    w1_sample=10,
    w2_changes=50_000,
    w2_table_rows=100_000,
    w2_files=10,
    scale_rows=(100_000, 1_000_000),
    sweep=(100, 500),
    batch_runs=((25, 6), (500, 3)),
    latency_seconds=20.0,
    latency_warm_seconds=15.0,
    latency_drain=240.0,
    full_load_rows=100_000,
    events_changes=10_000,
    decode_records=100_000,
    events_latency_transactions=40,
    catchup_rows=100_000,
    catchup_transactions=2_000,
)
