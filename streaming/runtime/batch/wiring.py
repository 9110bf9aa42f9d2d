"""What the sink is built with and never changes: the session, the tables' layout, the
collaborators a batch's steps call (``SinkWiring``), and the sink's logger."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from streaming.core.batch import RequestDecoder
from streaming.core.changefeed import Feed
from streaming.core.layout import Layout
from streaming.core.outcomes import Outcome
from streaming.runtime.lease import Lease
from streaming.runtime.metrics import Metrics
from streaming.runtime.parallel import Sessions

__all__ = ["Publisher", "SinkWiring"]

log = logging.getLogger("streaming.runtime.sink")
"""The batch's log lines (progress, retries, rejections): every step logs through the sink's
logger, which operators' log configs, the tests and ``bench/soak`` name."""

Publisher = Callable[[Sequence[Outcome]], None]


@dataclass(frozen=True)
class SinkWiring:
    """The sink's construction-time collaborators and settings, read by the batch's steps."""

    spark: SparkSession
    layout: Layout
    base_dir: str
    allowed_locations: list[str]
    sessions: Sessions
    """Tables written side by side (``streaming.runtime.parallel``)."""
    shuffle_partitions: int
    dms_zone: str | None
    decode: RequestDecoder
    """Raw request → JSON-shaped value (Avro Kafka records with ``kafka.format: avro``)."""
    feeds: Sequence[Feed]
    """The change feeds the query reads (``kafka.change_feeds``; ``core.changefeed``)."""
    publish: Publisher | None
    metrics: Metrics | None
    """Fed after every batch (``metrics.enabled``; ``streaming.runtime.metrics``)."""
    lease: Lease | None
    """The job's lease on its checkpoint, checked before every commit (``runtime.lease``);
    None: no fence (a sink outside a job)."""

    def fence(self) -> None:
        """Before a commit: stop (``LeaseLost``) if another runner took the checkpoint."""
        if self.lease is not None:
            self.lease.check()
