"""Observability of the streaming query: a StreamingQueryListener that logs every progress event.

Per micro-batch it logs the input rate (rows/s read and processed), the batch duration and, per
Kafka source, the lag: ``latestOffset - endOffset`` summed over the partitions of each topic
(how many records the broker holds that this batch did not reach). The sink logs its own
per-batch line (transactions by status, rows changed); this one is Spark's view of the query.
Both carry structured fields for ``log.format: json`` (``extra={"cdc": {...}}``).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

__all__ = ["ProgressListener", "describe", "progress_entry", "source_lag"]

log = logging.getLogger(__name__)


def _partition_offsets(value: Any) -> dict[str, dict[str, int]] | None:
    """``{"topic": {"0": 42, ...}}`` (Kafka's offset JSON), or None for any other source."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict) or not value:
        return None
    offsets: dict[str, dict[str, int]] = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, dict):
            return None
        offsets[topic] = {}
        for partition, offset in partitions.items():
            if not isinstance(offset, int) or isinstance(offset, bool):
                return None
            offsets[topic][str(partition)] = offset
    return offsets


def source_lag(source: Mapping[str, Any]) -> dict[str, int] | None:
    """Records behind per topic: ``latestOffset - endOffset`` summed over partitions (a
    partition missing from ``endOffset`` counts from 0). None when the source does not report
    Kafka offsets (file sources, or no ``latestOffset`` yet)."""
    end = _partition_offsets(source.get("endOffset"))
    latest = _partition_offsets(source.get("latestOffset"))
    if end is None or latest is None:
        return None
    return {
        topic: sum(
            max(0, offset - end.get(topic, {}).get(p, 0)) for p, offset in partitions.items()
        )
        for topic, partitions in latest.items()
    }


def progress_entry(progress: Mapping[str, Any]) -> dict[str, Any]:
    """The fields we log of one progress event (Spark's ``StreamingQueryProgress.json``)."""
    lag: dict[str, int] = {}
    for source in progress.get("sources") or []:
        lag.update(source_lag(source) or {})
    durations = progress.get("durationMs") or {}
    entry: dict[str, Any] = {
        "query": progress.get("name"),
        "batchId": progress.get("batchId"),
        "inputRows": progress.get("numInputRows", 0),
        "inputRowsPerSecond": _rate(progress.get("inputRowsPerSecond")),
        "processedRowsPerSecond": _rate(progress.get("processedRowsPerSecond")),
        "batchDurationMs": progress.get("batchDuration", durations.get("triggerExecution")),
        "addBatchMs": durations.get("addBatch"),
    }
    if lag:
        entry["lag"] = lag
    return entry


def _rate(value: Any) -> float:
    """Spark reports NaN/Infinity for rates of empty or instant batches: 0.0 then."""
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return 0.0
    return round(rate, 2) if rate == rate and rate not in (float("inf"), float("-inf")) else 0.0


def describe(entry: Mapping[str, Any]) -> str:
    text = (
        f"query {entry['query']} batch {entry['batchId']}: {entry['inputRows']} input rows, "
        f"{entry['inputRowsPerSecond']} rows/s in, {entry['processedRowsPerSecond']} rows/s "
        f"processed, {entry['batchDurationMs']} ms"
    )
    lag = entry.get("lag")
    if lag:
        text += ", lag " + ", ".join(f"{topic} {n}" for topic, n in sorted(lag.items()))
    return text


class ProgressListener(StreamingQueryListener):
    """Logs the progress of the query named ``query_name`` (other queries of the session are
    ignored), keeps its last 100 entries and hands each to ``on_progress``. ``terminated`` is
    set when the query ends: every progress event of the query has been delivered by then (the
    listener bus keeps order)."""

    def __init__(
        self, query_name: str, on_progress: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        self.query_name = query_name
        self.on_progress = on_progress
        """Also given each entry (the job's metrics: ``Metrics.progress``)."""
        self.entries: deque[dict[str, Any]] = deque(maxlen=100)
        self.terminated = threading.Event()
        self._ids: set[str] = set()

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        if event.name == self.query_name:
            self._ids.add(str(event.id))
            self.terminated.clear()
            log.info("query %s started (id %s, run %s)", event.name, event.id, event.runId)

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        if event.progress.name != self.query_name:
            return
        entry = progress_entry(json.loads(event.progress.json))
        self.entries.append(entry)
        if self.on_progress is not None:
            self.on_progress(entry)
        log.info("%s", describe(entry), extra={"cdc": {"event": "query_progress", **entry}})

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        if str(event.id) not in self._ids:
            return
        if event.exception:
            # One line: ``cdc run`` ends with the whole error (a coded one with its code line).
            first, _, rest = str(event.exception).partition("\n")
            log.error("query %s failed: %s", self.query_name, first)
            if rest:
                log.debug("query %s failed: %s", self.query_name, event.exception)
        else:
            log.info("query %s terminated", self.query_name)
        self.terminated.set()
