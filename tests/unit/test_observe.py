"""The query progress we log (rates, duration, Kafka lag) and structured JSON logging."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from streaming.core.config import LogConfig
from streaming.runtime.logs import configure_logging
from streaming.runtime.observe import describe, progress_entry, source_lag

# A progress event of a real run (landing folder + Kafka, maxOffsetsPerTrigger 2, 5 records).
PROGRESS = {
    "name": "cdc",
    "batchId": 0,
    "batchDuration": 48407,
    "numInputRows": 3,
    "inputRowsPerSecond": 0.0,
    "processedRowsPerSecond": 0.1,
    "durationMs": {"addBatch": 47263, "triggerExecution": 48403},
    "sources": [
        {
            "description": "FileStreamSource[file:/tmp/ws/landing/transactions]",
            "startOffset": None,
            "endOffset": {"logOffset": 0},
            "latestOffset": None,
            "numInputRows": 1,
        },
        {
            "description": "KafkaV2[Subscribe[p.tx]]",
            "startOffset": None,
            "endOffset": {"p.tx": {"0": 2}},
            "latestOffset": {"p.tx": {"0": 5}},
            "numInputRows": 2,
            "metrics": {"maxOffsetsBehindLatest": "3"},
        },
    ],
}


def test_progress_entry_has_rates_duration_and_kafka_lag() -> None:
    entry = progress_entry(PROGRESS)
    assert entry == {
        "query": "cdc",
        "batchId": 0,
        "inputRows": 3,
        "inputRowsPerSecond": 0.0,
        "processedRowsPerSecond": 0.1,
        "batchDurationMs": 48407,
        "addBatchMs": 47263,
        "lag": {"p.tx": 3},
    }
    assert describe(entry) == (
        "query cdc batch 0: 3 input rows, 0.0 rows/s in, 0.1 rows/s processed, 48407 ms, lag p.tx 3"
    )


def test_lag_sums_partitions_and_is_absent_for_file_sources() -> None:
    kafka = {
        "endOffset": json.dumps({"t": {"0": 10, "1": 7}}),  # older Sparks: offsets as JSON text
        "latestOffset": {"t": {"0": 12, "1": 7, "2": 4}},  # partition 2 not read yet
    }
    assert source_lag(kafka) == {"t": 6}
    assert source_lag(PROGRESS["sources"][0]) is None  # type: ignore[index]
    assert source_lag({"endOffset": {"t": {"0": 1}}, "latestOffset": None}) is None
    assert "lag" not in progress_entry({**PROGRESS, "sources": PROGRESS["sources"][:1]})  # type: ignore[index]


def test_nan_and_infinite_rates_are_zero() -> None:
    entry = progress_entry(
        {**PROGRESS, "inputRowsPerSecond": "NaN", "processedRowsPerSecond": None}
    )
    assert (entry["inputRowsPerSecond"], entry["processedRowsPerSecond"]) == (0.0, 0.0)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_logging_is_one_object_per_line_with_the_structured_fields(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(LogConfig(format="json", level="INFO"))
    log = logging.getLogger("streaming.runtime.observe")
    log.debug("not shown at INFO")
    log.info("batch %s done", 4, extra={"cdc": {"event": "query_progress", "lag": {"t": 2}}})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(e["level"], e["logger"], e["message"]) for e in lines] == [
        ("INFO", "streaming.runtime.observe", "batch 4 done"),
        ("ERROR", "streaming.runtime.observe", "failed"),
    ]
    assert lines[0]["event"] == "query_progress" and lines[0]["lag"] == {"t": 2}
    assert lines[0]["time"].endswith("+00:00")
    assert "ValueError: boom" in lines[1]["exception"]


def test_text_logging_and_levels(restore_logging: None, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(LogConfig(format="text", level="warning"))
    configure_logging(LogConfig(format="text", level="WARNING"))  # replaces, never duplicates
    logging.getLogger("cdc.test").info("hidden")
    logging.getLogger("cdc.test").warning("shown")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].endswith("WARNING cdc.test: shown")
    configure_logging(LogConfig(level="ERROR"), verbose=True)
    assert logging.getLogger().level == logging.DEBUG
    assert logging.getLogger("py4j").level == logging.WARNING
