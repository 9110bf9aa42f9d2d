"""The job's metrics without Spark (streaming/runtime/metrics.py): what a batch's outcomes count,
the clock gauges, the Kafka lag, the landing backlog at scrape time, the HTTP endpoint and its
port, the ``metrics`` config keys; and the file source's log as the backlog reads it
(connectors/sources.py)."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from connectors.sources import _comparable, source_log_files, source_log_paths
from streaming.core.config import MetricsConfig, parse_config
from streaming.core.errors import CdcError, ConfigError
from streaming.core.outcomes import ActionOutcome, ErrorInfo, Outcome, Status
from streaming.runtime.job import Job
from streaming.runtime.metrics import Metrics, serve
from tests.support.ports import HOST, free_port, retry_on_port_clash


def outcome(status: Status, *actions: ActionOutcome, dataset: str = "petstore") -> Outcome:
    error = ErrorInfo(code="X", message="x") if status in (Status.REJECTED, Status.FAILED) else None
    return Outcome(
        transaction_id="t",
        dataset=dataset,
        status=status,
        error=error,
        actions=list(actions),
        batch_id=0,
        source="file:a:1",
    )


def dog(**counts: int) -> ActionOutcome:
    return ActionOutcome(index=0, operation="UPSERT", target="petstore.Dog", **counts)


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_batch_counts_transactions_by_status_and_rows_of_committed_ones() -> None:
    metrics = Metrics()
    cat = ActionOutcome(index=1, operation="UPSERT", target="petstore.Cat", inserted=1)
    metrics.batch(
        [
            outcome(Status.COMMITTED, dog(inserted=2, updated=1, unchanged=3), cat),
            outcome(Status.COMMITTED, dog(deleted=1, stale=2, skipped=1)),
            outcome(Status.REJECTED),
            # A DUPLICATE repeats its original's counts: it changed nothing.
            outcome(Status.DUPLICATE, dog(inserted=2, updated=1)),
        ],
        spark_jobs=7,
        delta_commits=5,
    )
    metrics.batch(
        [outcome(Status.FAILED), outcome(Status.COMMITTED, dog(inserted=4))],
        spark_jobs=3,
        delta_commits=2,
    )

    statuses = {s.value: value(metrics, "cdc_transactions_total", status=s.value) for s in Status}
    assert statuses == {"COMMITTED": 3, "REJECTED": 1, "FAILED": 1, "DUPLICATE": 1}
    rows = {
        (s.labels["table"], s.labels["action"]): s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == "cdc_rows_total"
    }
    assert rows == {
        ("petstore.Dog", "inserted"): 6,
        ("petstore.Dog", "updated"): 1,
        ("petstore.Dog", "unchanged"): 3,
        ("petstore.Dog", "deleted"): 1,
        ("petstore.Dog", "stale"): 2,
        ("petstore.Dog", "skipped"): 1,
        ("petstore.Cat", "inserted"): 1,
    }
    assert (
        value(
            metrics, "cdc_rows_total", dataset="petstore", table="petstore.Cat", action="inserted"
        )
        == 1
    )
    assert value(metrics, "cdc_spark_jobs_total") == 10
    assert value(metrics, "cdc_delta_commits_total") == 7


def test_every_status_is_there_at_zero_before_the_first_batch() -> None:
    metrics = Metrics()
    for status in Status:
        assert value(metrics, "cdc_transactions_total", status=status.value) == 0


def test_finished_batches_feed_the_histogram_and_the_clock_gauges() -> None:
    clock = Clock(1000.0)
    metrics = Metrics(clock=clock)
    clock.now = 1030.0
    assert value(metrics, "cdc_last_batch_timestamp_seconds") == 1000.0  # the start
    assert value(metrics, "cdc_seconds_since_last_batch") == 30.0

    metrics.batch_finished(2.5)
    clock.now = 1042.0
    metrics.batch_finished(12.0)
    clock.now = 1050.0

    assert value(metrics, "cdc_batch_duration_seconds_count") == 2
    assert value(metrics, "cdc_batch_duration_seconds_sum") == 14.5
    assert value(metrics, "cdc_batch_duration_seconds_bucket", le="5.0") == 1
    assert value(metrics, "cdc_batch_duration_seconds_bucket", le="20.0") == 2
    assert value(metrics, "cdc_last_batch_timestamp_seconds") == 1042.0
    assert value(metrics, "cdc_seconds_since_last_batch") == 8.0


def test_progress_sets_the_kafka_lag_per_topic() -> None:
    metrics = Metrics()
    metrics.progress({"batchId": 0, "lag": {"a": 5, "b": 0}})
    metrics.progress({"batchId": 1, "lag": {"a": 2}})
    metrics.progress({"batchId": 2})  # a batch of a file source only: the lag stays
    assert value(metrics, "cdc_kafka_lag_records", topic="a") == 2
    assert value(metrics, "cdc_kafka_lag_records", topic="b") == 0


def test_a_change_feed_s_waiting_records_are_counted_with_the_oldest_arrival() -> None:
    metrics = Metrics()
    metrics.waiting({"pg": (3, 1000.5), "mysql": (0, None)})
    assert value(metrics, "cdc_change_feed_waiting_events", feed="pg") == 3
    assert value(metrics, "cdc_change_feed_oldest_waiting_timestamp_seconds", feed="pg") == 1000.5
    assert value(metrics, "cdc_change_feed_waiting_events", feed="mysql") == 0
    metrics.waiting({"pg": (0, None), "mysql": (0, None)})  # all applied since
    assert value(metrics, "cdc_change_feed_oldest_waiting_timestamp_seconds", feed="pg") == 0


def test_the_landing_backlog_is_asked_at_each_scrape_and_a_failure_leaves_it_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answers: list[Any] = [{"transactions": 3, "dms": 0}, {"transactions": 1}, OSError("gone")]

    def backlog() -> dict[str, int]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)

    def unread(metrics: Metrics) -> dict[str, float]:
        """One scrape's ``cdc_landing_unread_files`` by source."""
        return {
            s.labels["source"]: s.value
            for family in metrics.registry.collect()
            for s in family.samples
            if s.name == "cdc_landing_unread_files"
        }

    metrics = Metrics(backlog)
    assert unread(metrics) == {"transactions": 3, "dms": 0}
    assert unread(metrics) == {"transactions": 1}
    assert unread(metrics) == {}
    assert "landing backlog unknown: gone" in caplog.text
    assert value(metrics, "cdc_transactions_total", status="COMMITTED") == 0  # still scraped


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=10) as response:
        text = response.read().decode("utf-8")
    return {
        s.name + str(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_served_over_http_until_closed_then_the_port_is_free() -> None:
    metrics = Metrics()
    metrics.batch([outcome(Status.REJECTED)], spark_jobs=1, delta_commits=3)
    exporter = retry_on_port_clash(lambda: serve(metrics, HOST, free_port()))
    port = exporter.port
    try:
        samples = _scrape(port)
        assert samples["cdc_transactions_total[('status', 'REJECTED')]"] == 1
        assert samples["cdc_delta_commits_total[]"] == 3
    finally:
        exporter.close()
    with socket.socket() as s:  # nothing listens there any more
        assert s.connect_ex((HOST, port)) != 0
    serve(metrics, HOST, port).close()  # and a new job's endpoint can take the port


def test_a_port_in_use_stops_the_job_at_startup_saying_what_to_do() -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = parse_config(
            {
                "warehouse": "w",
                "checkpoints": "c",
                "metrics": {"enabled": True, "host": HOST, "port": port},
            },
            base=Path("/tmp"),
            environ={},
        )
        with pytest.raises(CdcError) as raised:
            Job.create(None, cfg)  # type: ignore[arg-type]  # stops before it uses Spark
    assert raised.value.code == "METRICS_PORT_IN_USE"
    assert f"metrics.port {port} on {HOST} is in use" in raised.value.message
    assert "CDC_METRICS__PORT" in raised.value.message


def test_an_address_that_cannot_be_bound_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"metrics\.host '192\.0\.2\.1'"):
        serve(Metrics(), "192.0.2.1", free_port())  # TEST-NET-1: no interface has it


# -- config ----------------------------------------------------------------------------------


def test_metrics_are_off_by_default_and_one_key_turns_them_on(tmp_path: Any) -> None:
    base = {"warehouse": "w", "checkpoints": "c"}
    assert parse_config(base, base=tmp_path, environ={}).metrics == MetricsConfig()
    assert MetricsConfig().enabled is False
    assert (MetricsConfig().host, MetricsConfig().port) == ("0.0.0.0", 9464)
    on = parse_config(base, base=tmp_path, environ={"CDC_METRICS__ENABLED": "true"}).metrics
    assert on.enabled is True
    port = parse_config(base, base=tmp_path, environ={"CDC_METRICS__PORT": "9100"}).metrics.port
    assert port == 9100
    with pytest.raises(ConfigError, match=r"metrics\.prot: unknown key"):
        parse_config({**base, "metrics": {"prot": 1}}, base=tmp_path, environ={})
    with pytest.raises(ConfigError, match=r"metrics\.port"):
        parse_config({**base, "metrics": {"port": 70000}}, base=tmp_path, environ={})


# -- the file source's log (connectors/sources.py) -------------------------------------------


def test_the_log_is_read_from_its_latest_compaction_on() -> None:
    names = ["0", "1", "9.compact", "10", "11", ".12.tmp", "12.crc", "19.compact", "20", "x"]
    assert source_log_files(names) == ["19.compact", "20"]
    assert source_log_files(["0", "1", "2"]) == ["0", "1", "2"]
    assert source_log_files([]) == []


def test_paths_are_the_entries_of_a_file_source_not_kafka_offsets() -> None:
    texts = {
        "0": 'v1\n{"path":"file:///l/a.jsonl","timestamp":1,"batchId":0}\n'
        '{"path":"file:///l/b%20c.jsonl","timestamp":2,"batchId":0}\n',
        "1": 'v1\n{"path":"s3a://bucket/l/d.json","timestamp":3,"batchId":1}\nnot json\n',
        "kafka": 'v1\n{"cdc.transactions":{"0":0}}',
    }
    assert source_log_paths(texts) == [
        "file:///l/a.jsonl",
        "file:///l/b%20c.jsonl",
        "s3a://bucket/l/d.json",
    ]


def test_a_path_compares_whatever_way_its_uri_is_spelt() -> None:
    assert _comparable("file:/l/b c.json") == _comparable("file:///l/b%20c.json")
    assert _comparable("s3a://bucket/l/a.json") != _comparable("s3a://other/l/a.json")
