"""The Kafka workloads, against a real local broker (``tests.support.kafka_broker``) that the runner
starts on 127.0.0.1 (free ports) and stops at the end:

- **W1K** — W1 over Kafka: W1's transactions (the same generator, the same data files under
  ``./data``) published as JSON requests (key = dataset, like ``cdc publish``) to a topic, then
  our job (``run(once=True)``: Spark's available-now trigger) reads the topic with
  ``kafka.max_offsets_per_trigger`` = W1's transactions per micro-batch. Measured: the first
  publish → the last outcome event on the outcomes topic (its Kafka timestamp).
- **Latency** — our job runs continuously (processing-time trigger, ``trigger.interval``) while
  W1-style transactions (1-5 rows) are published at a steady rate. Per transaction: its request
  record's timestamp → its outcome event's timestamp (stamped by the sink's producer once the
  batch is committed), matched by transaction id. Transactions still without an outcome when
  the job is stopped count as lower bounds (``censored``): the percentiles say ``>=`` then.

Neither changes anything in ``streaming/`` or ``connectors/``: the job is ``Job.create(spark,
cfg)`` with a ``kafka:`` section (and ``trigger.interval``) in its config.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from pyspark.sql import SparkSession

from bench import data
from bench.common import SHUFFLE_PARTITIONS, rate, say, seed_tables
from bench.ours import Workspace, run_job
from bench.plain import PlainSink, kafka_payloads, kafka_stream
from bench.sizes import Sizes
from connectors.kafka_io import produce
from streaming.core.config import KafkaConfig
from streaming.core.outcomes import Outcome
from streaming.runtime.job import Job
from tests.support.kafka_broker import LocalKafkaBroker


def start_broker(base: Path) -> LocalKafkaBroker:
    """A fresh single-node broker in ``base/kafka`` on 127.0.0.1, free ports (not timed)."""
    broker = LocalKafkaBroker(base / "kafka")
    started = time.perf_counter()
    broker.start()
    say(f"Kafka broker on {broker.bootstrap} in {time.perf_counter() - started:.1f}s")
    return broker


def _workspace(
    spark: SparkSession,
    sizes: Sizes,
    base: Path,
    name: str,
    broker: LocalKafkaBroker,
    txs: Sequence[data.SmallTx],
    per_batch: int,
    **overrides: Any,
) -> tuple[Workspace, Job]:
    """W1's dataset and data files, a ``kafka:`` config on topics ``<name>.transactions`` and
    ``<name>.outcomes`` (created, one partition each), and the three tables seeded."""
    ws = Workspace(base / name, data.W1_DATASET, data.W1_YAML)
    data.write_w1_data(ws.root, txs)
    topics = {"transactions_topic": f"{name}.transactions", "outcomes_topic": f"{name}.outcomes"}
    broker.create_topics(topics.values())
    kafka = {"bootstrap": broker.bootstrap, **topics, "max_offsets_per_trigger": per_batch}
    cfg = ws.config(kafka=kafka, spark={"shuffle_partitions": SHUFFLE_PARTITIONS}, **overrides)
    job = Job.create(spark, cfg)
    say(f"{name}: seeding 3 x {sizes.w1_table_rows:,} rows")
    seed_tables(spark, job, data.W1_DATASET, data.W1_SCHEMAS, sizes.w1_table_rows, sizes)
    return ws, job


def _kafka(job: Job) -> KafkaConfig:
    assert job.cfg.kafka is not None
    return job.cfg.kafka


# -- outcome events ----------------------------------------------------------------------------
@dataclass
class OutcomeEvents:
    """The outcomes topic read from the beginning: transaction id → the first event's Kafka
    timestamp (seconds since the epoch), status and batch (a replayed batch publishes again;
    the first event is the one a client saw first)."""

    bootstrap: str
    topic: str
    times: dict[str, float] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)
    batches: dict[str, int] = field(default_factory=dict)
    events: int = 0

    def __post_init__(self) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"bench-{self.topic}",
                "enable.auto.commit": False,
            }
        )
        meta = self._consumer.list_topics(self.topic, timeout=30).topics[self.topic]
        self._consumer.assign(
            [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in meta.partitions]
        )

    def read_until(
        self,
        wanted: set[str],
        deadline: float,
        *,
        stop: Callable[[], bool] = lambda: False,
    ) -> bool:
        """Read events until every id of ``wanted`` has one (True), ``time.time()`` passes
        ``deadline`` or ``stop()`` says so (False)."""
        while not wanted <= self.times.keys():
            if time.time() >= deadline or stop():
                return False
            msg = self._consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(f"reading {self.topic}: {error}")
            value = msg.value()
            if value is None:
                continue
            self.events += 1
            outcome = Outcome.from_json(value)
            tid = outcome.transaction_id or ""
            if tid not in self.times:
                self.times[tid] = msg.timestamp()[1] / 1000
                self.statuses[tid] = outcome.status.value
                self.batches[tid] = outcome.batch_id
        return True

    def close(self) -> None:
        self._consumer.close()


def _count(values: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items()))


# -- W1K ---------------------------------------------------------------------------------------
def w1_kafka(
    spark: SparkSession, sizes: Sizes, base: Path, broker: LocalKafkaBroker
) -> dict[str, Any]:
    """W1's transactions through the Kafka source; see the module docstring."""
    txs = data.w1_transactions(sizes.w1_transactions, sizes.w1_table_rows)
    rows = sum(len(tx.rows) for tx in txs)
    per_batch = sizes.w1_lines_per_file * sizes.w1_files_per_trigger
    ws, job = _workspace(spark, sizes, base, "w1k", broker, txs, per_batch)
    kafka = _kafka(job)
    say(
        f"W1K: ours, {len(txs):,} transactions ({rows:,} rows) published to "
        f"{kafka.transactions_topic}, {per_batch:,} per batch"
    )
    records = [(data.W1_DATASET, tx.request().encode()) for tx in txs]  # key: like cdc publish
    first_publish = time.time()
    produce(kafka, kafka.transactions_topic, records)
    published = time.time()
    ours = run_job(spark, job)
    events = OutcomeEvents(broker.bootstrap, kafka.outcomes_topic)
    try:
        complete = events.read_until({tx.transaction_id for tx in txs}, time.time() + 60)
    finally:
        events.close()
    if not complete:
        raise RuntimeError(
            f"W1K: {len(txs) - len(events.times)} of {len(txs)} transactions have no outcome "
            "event after the run"
        )
    seconds = max(events.times.values()) - first_publish
    say(
        f"W1K: published in {published - first_publish:.2f}s; the job ran {ours.seconds:.1f}s; "
        f"first publish → last outcome {seconds:.1f}s {ours.statuses}"
    )
    ws.remove()
    return {
        "transactions": len(txs),
        "rows": rows,
        "table_rows": sizes.w1_table_rows,
        "per_batch": per_batch,
        "publish_seconds": round(published - first_publish, 3),
        "ours": {
            **ours.as_json(),
            "seconds": round(seconds, 3),
            "job_seconds": round(ours.seconds, 3),
            "outcome_events": events.events,
            "transactions_per_s": round(rate(len(txs), seconds), 2),
            "rows_per_s": round(rate(rows, seconds), 2),
        },
    }


# -- Latency -----------------------------------------------------------------------------------
class _Gate:
    """Wraps the sink's ``process`` so that, once closed, batches that start are skipped (Spark
    still commits their offsets): the query is then stopped between batches, never inside one
    (stopping inside one cancels its Spark jobs and sends the sink into its failure path)."""

    def __init__(self, process: Callable[..., Any]) -> None:
        self._process = process
        self.closed = threading.Event()
        self.idle = threading.Event()
        self._lock = threading.Lock()
        self.idle.set()
        self.skipped = 0
        self.last_batch = -1

    def close(self) -> None:
        with self._lock:
            self.closed.set()

    def __call__(self, raws: Sequence[Any], batch_id: int) -> Any:
        with self._lock:
            if self.closed.is_set():
                self.skipped += len(raws)
                return []
            self.idle.clear()
            self.last_batch = batch_id
        try:
            return self._process(raws, batch_id)
        finally:
            self.idle.set()


def quantile(exact: Sequence[float], censored: Sequence[float], q: float) -> tuple[float, bool]:
    """The nearest-rank ``q``-quantile of all latencies, where ``censored`` ones are lower
    bounds; returns (value, exact?). The true quantile is >= the value; it equals it when every
    latency up to that rank is exact."""
    values = sorted([(v, True) for v in exact] + [(v, False) for v in censored])
    if not values:
        return 0.0, False
    rank = max(1, math.ceil(q * len(values)))
    return values[rank - 1][0], all(ok for _, ok in values[:rank])


class SteadyPublisher:
    """Publishes W1 requests (key = dataset, like ``cdc publish``), one at a time, and keeps each
    one's Kafka timestamp (the producer's CreateTime) by transaction id."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.published: dict[str, float] = {}
        self.errors: list[str] = []
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
            }
        )

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        self.published[json.loads(msg.value())["transactionId"]] = msg.timestamp()[1] / 1000

    def send(self, tx: data.SmallTx) -> None:
        self._producer.produce(
            self.topic,
            key=data.W1_DATASET.encode(),
            value=tx.request().encode(),
            on_delivery=self._delivered,
        )
        self._producer.poll(0)

    def flush(self, timeout: float) -> int:
        return int(self._producer.flush(timeout))

    def steady(self, txs: Sequence[data.SmallTx], per_second: float, label: str) -> float:
        """Publish ``txs`` at ``per_second``; returns the last one's timestamp."""
        start = time.time() + 0.1
        for i, tx in enumerate(txs):
            target = start + i / per_second
            while (wait := target - time.time()) > 0:
                self._producer.poll(wait)
            self.send(tx)
        remaining = self.flush(60)
        if remaining or self.errors:
            raise RuntimeError(f"{label}: {remaining} not delivered; errors {self.errors[:3]}")
        return max(self.published[tx.transaction_id] for tx in txs)

    def achieved_rate(self, txs: Sequence[data.SmallTx]) -> float:
        firsts = [self.published[tx.transaction_id] for tx in txs]
        return rate(len(firsts) - 1, max(firsts) - min(firsts))


def latency_stats(exact: Sequence[float], censored: Sequence[float]) -> dict[str, Any]:
    """p50, p99 and max of the latencies (``exact`` and lower bounds ``censored``)."""
    stats = {}
    for name, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
        value, is_exact = quantile(exact, censored, q)
        stats[name] = {"seconds": round(value, 3), "exact": is_exact}
    return stats


def _latency_stream(
    sizes: Sizes,
) -> tuple[list[data.SmallTx], data.SmallTx, list[data.SmallTx], list[data.SmallTx]]:
    """Latency's transactions (the same for every contender): all of them, the one that warms
    the query up, those published steadily before the measured ones (untimed), the measured."""
    count = max(1, round(sizes.latency_rate * sizes.latency_seconds))
    steady = round(sizes.latency_rate * sizes.latency_warm_seconds)
    txs = data.w1_transactions(1 + steady + count, sizes.w1_table_rows)
    return txs, txs[0], txs[1 : 1 + steady], txs[1 + steady :]


def latency(
    spark: SparkSession, sizes: Sizes, base: Path, broker: LocalKafkaBroker
) -> dict[str, Any]:
    """Steady-rate publishing while the job runs continuously; see the module docstring."""
    txs, warm, steady, measured = _latency_stream(sizes)
    per_batch = sizes.latency_max_per_batch or sizes.w1_lines_per_file * sizes.w1_files_per_trigger
    trigger = sizes.latency_trigger
    ws, job = _workspace(
        spark, sizes, base, "latency", broker, txs, per_batch, trigger={"interval": trigger}
    )
    kafka = _kafka(job)
    gate = _Gate(job.sink.process)
    setattr(job.sink, "process", gate)  # noqa: B010 - an instance attribute, on purpose
    events = OutcomeEvents(broker.bootstrap, kafka.outcomes_topic)
    publisher = SteadyPublisher(broker.bootstrap, kafka.transactions_topic)
    published = publisher.published

    query = job.start(once=False)
    try:
        say(f"Latency: query started (trigger {trigger}, <= {per_batch} per batch); warm-up")
        publisher.send(warm)
        publisher.flush(30)
        if not events.read_until({warm.transaction_id}, time.time() + 600, stop=_dead(query)):
            raise RuntimeError(f"Latency: no outcome for the warm-up transaction {_why(query)}")
        warm_batch = events.batches[warm.transaction_id]
        say(
            f"Latency: warm-up outcome after "
            f"{events.times[warm.transaction_id] - published[warm.transaction_id]:.1f}s; "
            f"publishing {len(steady):,} untimed, then {len(measured):,} measured transactions "
            f"at {sizes.latency_rate:g} tx/s"
        )
        last_publish = publisher.steady([*steady, *measured], sizes.latency_rate, "Latency")
        wanted = {tx.transaction_id for tx in measured}
        say(
            f"Latency: published; waiting up to {sizes.latency_drain:g}s for the outcomes "
            "(new batches start until then)"
        )
        events.read_until(wanted, last_publish + sizes.latency_drain, stop=_dead(query))
        gate.close()
        if not wanted <= events.times.keys():
            say("Latency: no new batches; waiting for the batch in flight to finish")
            events.read_until(wanted, time.time() + 900, stop=gate.idle.is_set)
        stopped_at = time.time()
        _await_progress(query, gate.last_batch, time.time() + 60)
        query.stop()
        events.read_until(wanted, time.time() + 10)
        job.listener.terminated.wait(10)
    finally:
        if query.isActive:
            query.stop()
        job.spark.streams.removeListener(job.listener)
        events.close()
    error = query.exception()
    if error is not None:
        say(f"Latency: the query ended with {error}")

    done = sorted(wanted & events.times.keys())
    exact = [events.times[t] - published[t] for t in done]
    censored = [stopped_at - published[t] for t in sorted(wanted - events.times.keys())]
    stats = latency_stats(exact, censored)
    achieved = publisher.achieved_rate(measured)
    batches = _batches(query, job, events, published, done, warm_batch)
    starts = {b["batchId"]: b["started"] for b in batches}
    queued = [starts[events.batches[t]] - published[t] for t in done if events.batches[t] in starts]
    inside = [
        events.times[t] - starts[events.batches[t]] for t in done if events.batches[t] in starts
    ]
    say(
        f"Latency: {len(exact)} of {len(wanted)} measured; p50 {_fmt(stats['p50'])}, "
        f"p99 {_fmt(stats['p99'])}, max {_fmt(stats['max'])}"
    )
    ws.remove()
    return {
        "published": len(wanted),
        "measured": len(exact),
        "censored": len(censored),
        "rate": sizes.latency_rate,
        "achieved_rate": round(achieved, 2),
        "publish_seconds": sizes.latency_seconds,
        "warm_seconds": sizes.latency_warm_seconds,
        "drain_seconds": sizes.latency_drain,
        "stopped_after_last_publish": round(stopped_at - last_publish, 1),
        "trigger": trigger,
        "per_batch": per_batch,
        "skipped_after_close": gate.skipped,
        "statuses": _count([events.statuses[t] for t in done]),
        "latency": stats,
        "latency_measured_only": {
            name: round(quantile(exact, [], q)[0], 3)
            for name, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))
        },
        "median_queued_seconds": round(quantile(queued, [], 0.5)[0], 3),
        "median_in_batch_seconds": round(quantile(inside, [], 0.5)[0], 3),
        "batches": batches,
    }


def latency_plain(
    spark: SparkSession, sizes: Sizes, base: Path, broker: LocalKafkaBroker
) -> dict[str, Any]:
    """The plain baseline (``bench.plain``) under the same load as ``latency``: the same
    transactions (and warm-up) published at the same rate to a topic of its own, read with the
    same trigger and cap per batch, applied to its own copy of the same seeded tables. Per
    transaction: its request record's timestamp → the end of the MERGEs of its micro-batch."""
    txs, warm, steady, measured = _latency_stream(sizes)
    per_batch = sizes.latency_max_per_batch or sizes.w1_lines_per_file * sizes.w1_files_per_trigger
    trigger = sizes.latency_trigger
    ws, job = _workspace(spark, sizes, base, "latency-plain", broker, txs, per_batch)
    topic = _kafka(job).transactions_topic
    tables = {s: job.layout.table(data.W1_DATASET, s) for s in data.W1_SCHEMAS}
    sink = PlainSink(spark, ws.root, tables, payloads=kafka_payloads)
    publisher = SteadyPublisher(broker.bootstrap, topic)
    query = (
        kafka_stream(spark, broker.bootstrap, topic, per_batch)
        .writeStream.queryName("plain-latency")
        .foreachBatch(sink)
        .option("checkpointLocation", str(ws.root / "checkpoints" / "plain"))
        .trigger(processingTime=trigger)
        .start()
    )
    done: dict[str, float] = {}
    try:
        say(f"Latency plain: query started (trigger {trigger}, <= {per_batch} per batch); warm-up")
        publisher.send(warm)
        publisher.flush(30)
        if not _wait_plain(sink, done, {warm.transaction_id}, time.time() + 600, query):
            raise RuntimeError(
                f"Latency plain: the warm-up transaction was not applied {_why(query)}"
            )
        warm_batch = max(b.batch_id for b in sink.batches)
        say(
            f"Latency plain: publishing {len(steady):,} untimed, then {len(measured):,} measured "
            f"at {sizes.latency_rate:g} tx/s"
        )
        last_publish = publisher.steady([*steady, *measured], sizes.latency_rate, "Latency plain")
        wanted = {tx.transaction_id for tx in measured}
        _wait_plain(sink, done, wanted, last_publish + sizes.latency_drain, query)
        sink.close()
        if not wanted <= done.keys():
            say("Latency plain: no new batches; waiting for the batch in flight to finish")
            sink.idle.wait(900)
            _wait_plain(sink, done, wanted, time.time(), query)
        stopped_at = time.time()
    finally:
        sink.close()
        sink.idle.wait(900)
        query.stop()
    published = publisher.published
    exact = [done[t] - published[t] for t in sorted(wanted & done.keys())]
    censored = [stopped_at - published[t] for t in sorted(wanted - done.keys())]
    stats = latency_stats(exact, censored)
    batches = [
        {
            "batchId": b.batch_id,
            "transactions": len(b.transaction_ids),
            "seconds": round(b.finished - b.started, 3),
        }
        for b in sink.batches
        if b.batch_id > warm_batch and not wanted.isdisjoint(b.transaction_ids)
    ]
    say(
        f"Latency plain: {len(exact)} of {len(wanted)} measured; p50 {_fmt(stats['p50'])}, "
        f"p99 {_fmt(stats['p99'])}, max {_fmt(stats['max'])}"
    )
    ws.remove()
    return {
        "published": len(wanted),
        "measured": len(exact),
        "censored": len(censored),
        "achieved_rate": round(publisher.achieved_rate(measured), 2),
        "latency": stats,
        "batches": batches,
    }


def _wait_plain(
    sink: PlainSink, done: dict[str, float], wanted: set[str], deadline: float, query: Any
) -> bool:
    """Collect the plain sink's finished transactions into ``done`` until ``wanted`` are all
    there (True), ``deadline`` passes or the query dies (False)."""
    while True:
        for b in list(sink.batches):
            for tid in b.transaction_ids:
                done.setdefault(tid, b.finished)
        if wanted <= done.keys():
            return True
        if time.time() >= deadline or not query.isActive:
            return False
        time.sleep(0.2)


def _batches(
    query: Any,
    job: Job,
    events: OutcomeEvents,
    published: dict[str, float],
    done: Sequence[str],
    warm_batch: int,
) -> list[dict[str, Any]]:
    """The micro-batches of the measured transactions, from Spark's progress (trigger start,
    duration) and the sink's log (seconds in ``process``; absent for batches skipped after the
    gate closed), with the latencies of their transactions."""
    sink = {int(str(e["batchId"])): e for e in job.sink.history}
    latencies: dict[int, list[float]] = {}
    for t in done:
        latencies.setdefault(events.batches[t], []).append(events.times[t] - published[t])
    out = []
    for progress in query.recentProgress:
        entry = json.loads(progress.json)
        batch = int(entry["batchId"])
        if batch <= warm_batch or not entry.get("numInputRows"):
            continue
        mine = latencies.get(batch, [])
        if not mine:  # the untimed steady warm-up's batches
            continue
        started = datetime.fromisoformat(entry["timestamp"]).timestamp()
        out.append(
            {
                "batchId": batch,
                "started": round(started, 3),
                "inputRows": entry["numInputRows"],
                "spark_seconds": round(entry["batchDuration"] / 1000, 3),
                "add_batch_seconds": round(entry["durationMs"].get("addBatch", 0) / 1000, 3),
                "sink_seconds": sink[batch]["seconds"] if batch in sink else None,
                "measured": len(mine),
                "latency_min": round(min(mine), 3) if mine else None,
                "latency_max": round(max(mine), 3) if mine else None,
            }
        )
    return out


def _await_progress(query: Any, batch: int, deadline: float) -> None:
    """Wait until Spark has reported the progress of ``batch`` (after its offsets are committed),
    so that stopping the query does not cut it short."""
    while time.time() < deadline and query.isActive:
        last = query.lastProgress
        if last is not None and int(last.batchId) >= batch:
            return
        time.sleep(0.5)


def _dead(query: Any) -> Callable[[], bool]:
    return lambda: not query.isActive


def _why(query: Any) -> str:
    error = query.exception() if not query.isActive else None
    return f"(the query failed: {error})" if error else "(within the time allowed)"


def _fmt(entry: dict[str, Any]) -> str:
    return f"{'' if entry['exact'] else '>= '}{entry['seconds']:.1f}s"
