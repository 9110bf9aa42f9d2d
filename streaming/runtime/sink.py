"""The foreachBatch sink: the entry that gates, retries and stops a batch, whose steps
(``runtime.batch``: triage → plan → apply → SCD2 → record → progress) do the work.

Every step decides per transaction. The batch is cut into segments and waves (``core.steps``)
so that reads see earlier writes; each wave writes each of its tables once (tables in path
order, each commit idempotent per batch, step and checkpoint). A failure while applying a
segment restores the tables it changed and isolates the failing transaction (FAILED); the
outcomes are still recorded, so the stream goes on. A store's trouble fails the batch, which is
retried here; a JVM out of memory fails it and stops the job (``OUT_OF_MEMORY``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession

from streaming.core.batch import RawRequest, RequestDecoder, decode_json_request
from streaming.core.catalog import Dataset
from streaming.core.changefeed import Decode, Feed
from streaming.core.config import StorageRetryConfig
from streaming.core.errors import CdcError, LeaseLost, StorageUnavailable
from streaming.core.failures import (
    cause,
    retry_delay,
    storage_retry_line,
    storage_unavailable,
    store_trouble,
)
from streaming.core.layout import Layout
from streaming.core.outcomes import Outcome
from streaming.platform.exceptions import java_text
from streaming.runtime.batch import apply, progress, run, triage, wiring
from streaming.runtime.batch.state import SinkState, checkpoint_id
from streaming.runtime.batch.wiring import SinkWiring, log
from streaming.runtime.lease import Lease
from streaming.runtime.metrics import Metrics
from streaming.runtime.parallel import Sessions
from streaming.runtime.stopping import (
    BatchGate,
    BatchInterrupted,
    StopRequested,
    interruption,
    stop_interrupt,
)
from streaming.runtime.upkeep import Upkeep
from streaming.storage import ledger

__all__ = ["Applied", "Publisher", "Sink"]

Applied = apply.Applied
"""What a batch's segments did (``runtime.batch.apply``)."""
Publisher = wiring.Publisher
"""Sends a batch's outcomes (``runtime.batch.wiring``)."""


def _now() -> datetime:
    return datetime.now(UTC)


class Sink:
    """The query's ``foreachBatch``: ``wiring`` (what it was built with) and ``state`` (what it
    keeps between batches) are handed to a batch's steps (``runtime.batch.run``)."""

    def __init__(
        self,
        spark: SparkSession,
        datasets: Mapping[str, Dataset],
        layout: Layout,
        base_dir: str,
        allowed_locations: list[str],
        shuffle_partitions: int = 4,
        dms_zone: str | None = None,
        publish: Publisher | None = None,
        decode: RequestDecoder = decode_json_request,
        clock: Callable[[], datetime] = _now,
        run_id: str | None = None,
        history: deque[dict[str, object]] | None = None,
        writers: int = 4,
        metrics: Metrics | None = None,
        lease: Lease | None = None,
        feeds: Sequence[Feed] = (),
        decode_change: Decode | None = None,
        upkeep: Upkeep | None = None,
        storage_retry: StorageRetryConfig | None = None,
        refusal: Callable[[BaseException], CdcError | None] | None = None,
    ) -> None:
        self.wiring = SinkWiring(
            spark,
            layout,
            base_dir,
            allowed_locations,
            Sessions(spark, writers),
            shuffle_partitions,
            dms_zone,
            decode,
            feeds,
            publish,
            metrics,
            lease,
        )
        self.state = SinkState.start(
            spark, layout, datasets, feeds, decode_change, upkeep, history, run_id
        )
        self.clock = clock
        """The batches' time (a change feed's batch keeps its first run's)."""
        self.storage_retry = StorageRetryConfig() if storage_retry is None else storage_retry
        """How a batch failed by a store's trouble is retried (``storage_retry:``)."""
        self.refusal = refusal
        """The coded error a failure of a batch stands for, if any (the job's Kafka clients
        refused: ``connectors.kafka_check.refusal_in``)."""
        self.gate = BatchGate()
        """Whether a batch runs now; closed by a stopping job (``runtime.stopping``)."""

    # -- the foreachBatch entry point ------------------------------------------------------
    def __call__(self, df: DataFrame, batch_id: int) -> None:
        try:
            self.gate.enter(batch_id)
        except StopRequested as refused:
            log.info(
                "batch %s not started: the job is stopping (replayed at the next start)", batch_id
            )
            interrupted = stop_interrupt(self.wiring.spark)
            if interrupted is not None:
                refused.args = (f"{refused.args[0]}; interrupted by the stop: {interrupted}",)
            raise refused from None
        done = False
        started = time.monotonic()
        lost: LeaseLost | None = None
        state = self.state
        try:
            if state.run_id is None:
                state.run_id = checkpoint_id(self.wiring.spark, self.wiring.layout.checkpoint)
            raws, changes = self._run_retrying(df, batch_id)
            state.finished = batch_id
            done = True
            if self.metrics is not None:
                self.metrics.batch_finished(time.monotonic() - started)
            if state.upkeep is not None and (raws or changes):
                progress.upkeep(self.wiring, state, batch_id, stopping=lambda: self.gate.closed)
        except LeaseLost as e:
            lost = e
        except CdcError as e:  # the query fails with it: ``Job.run`` ends with its code
            state.failure = e
            raise
        except Exception as e:
            interrupted = interruption(e)
            if interrupted is not None:  # the query's stop, not a failure: replayed at start
                log.info("batch %s: interrupted by the stop; replayed at the next start", batch_id)
                raise BatchInterrupted(batch_id, interrupted) from None
            coded = self.refusal(e) if self.refusal is not None else None
            if coded is None:
                raise
            state.failure = coded  # e.g. the broker refused Spark's Kafka source reading the batch
            raise coded from None
        finally:
            self.gate.leave(done=done)
        if lost is not None:
            # Out of the gate, the job's stop goes on: raised once it interrupts this thread, so
            # that Spark takes it for the stop (as a refused batch, above), not for a failure.
            log.info("batch %s stopped before its next commit: the lease was lost", batch_id)
            interrupted = stop_interrupt(self.wiring.spark)
            message = lost.message
            if interrupted is not None:
                message = f"{message}; interrupted by the stop: {interrupted}"
            raise LeaseLost(message) from None

    def _run_retrying(self, df: DataFrame, batch_id: int) -> tuple[list[RawRequest], bool]:
        """Read the batch's records and process them; a batch failed by a store's trouble
        (``core.failures.store_trouble``: not its data's fault) is run again from its records,
        as its replay after a restart would run it, after a wait that doubles each time
        (``storage_retry``), one line logged per retry. After the last attempt the batch fails
        with ``STORAGE_UNAVAILABLE``. Returns the batch's requests and whether it had change
        records."""
        policy = self.storage_retry
        first = time.monotonic()
        for attempt in range(1, policy.attempts + 1):
            try:
                return self._run(df, batch_id, replay=attempt > 1)
            except Exception as e:
                if isinstance(e, CdcError) and not isinstance(e, StorageUnavailable):
                    raise
                if interruption(e) is not None:
                    raise
                if self.refusal is not None and self.refusal(e) is not None:
                    raise  # the broker refused the job's credentials: KAFKA_AUTH_FAILED
                text = e.message if isinstance(e, StorageUnavailable) else java_text(e)
                what = store_trouble(text)
                if what is None:
                    raise
                if attempt == policy.attempts:
                    seconds = time.monotonic() - first
                    raise storage_unavailable(batch_id, attempt, seconds, text) from None
                delay = retry_delay(attempt, policy.first_delay_seconds, policy.max_delay_seconds)
                log.debug("batch %s: the store's error", batch_id, exc_info=True)
                log.warning(
                    "%s", storage_retry_line(batch_id, attempt, policy.attempts, cause(text), delay)
                )
                self.state.forget()
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _run(self, df: DataFrame, batch_id: int, *, replay: bool) -> tuple[list[RawRequest], bool]:
        """One attempt of the batch: its records read (``df``, again on a retry) and processed.
        Requests are collected; a change feed's records stay in Spark (``inputs.changefeeds``)."""
        raws, changes = triage.read_requests(self.wiring, df, batch_id)
        if raws or changes is not None:
            self.process(raws, batch_id, changes, replay=replay)
        return raws, changes is not None

    def process(
        self,
        raws: Sequence[RawRequest],
        batch_id: int,
        changes: DataFrame | None = None,
        *,
        replay: bool = False,
    ) -> list[Outcome]:
        """Apply a batch's requests and change records (``kind, name, partition, offset,
        mtime, key, payload`` of the change feeds' topics); ``replay``: it may have run (in
        part) before in this process (a retried attempt), as it may after any restart."""
        return run.run_batch(
            self.wiring, self.state, raws, batch_id, changes, replay=replay, clock=self.clock
        )

    def release(self) -> None:
        """Let go what a batch left cached: its release interrupted by the job's stop (called
        once the query has ended)."""
        self.state.release()

    # -- what the job, the tests and the bench read ----------------------------------------
    @property
    def feeds(self) -> Sequence[Feed]:
        return self.wiring.feeds

    @property
    def publish(self) -> Publisher | None:
        return self.wiring.publish

    @property
    def metrics(self) -> Metrics | None:
        return self.wiring.metrics

    @property
    def upkeep(self) -> Upkeep | None:
        return self.state.upkeep

    @property
    def history(self) -> deque[dict[str, object]]:
        """Progress of the last 100 batches (also logged)."""
        return self.state.history

    @property
    def committed_ids(self) -> ledger.HeldIds:
        return self.state.committed_ids

    @property
    def failure(self) -> CdcError | None:
        """The coded error that failed the last failed batch (``Job.run`` ends with it)."""
        return self.state.failure

    @failure.setter
    def failure(self, value: CdcError | None) -> None:
        self.state.failure = value
