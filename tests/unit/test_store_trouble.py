"""core.failures: a store's trouble (retried, the batch failed) told apart from data that cannot
be read (REJECTED), over real exception texts (issue 47, item 6); the retry's waits, its line,
the error after the last attempt; the ``storage_retry`` keys validated at startup."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.core.config import load_config
from streaming.core.errors import ConfigError
from streaming.core.failures import (
    retry_delay,
    storage_retry_line,
    storage_unavailable,
    store_trouble,
)

# -- the store's trouble ------------------------------------------------------------------------
# From a real run (tests/integration/test_storage_retry.py, hadoop-aws 3.5.0, AWS SDK 2.35.4):
# moto's S3 server stopped (connection refused), then frozen (the API call times out); the text
# as py4j gives it (``connectors.kafka_check.java_text``), ports and object ids as they were.
REFUSED = (
    "An error occurred while calling o396.getFileStatus.\n"
    ": java.net.ConnectException: getFileStatus on s3a://cdc-data/cats/petstore/Cat: "
    "software.amazon.awssdk.core.exception.SdkClientException: Unable to execute HTTP request: "
    "Connect to 127.0.0.1:33595 [/127.0.0.1] failed: Connection refused (SDK Attempt Count: 2)"
    ":    software.amazon.awssdk.core.exception.SdkClientException: Unable to execute HTTP "
    "request: Connect to 127.0.0.1:33595 [/127.0.0.1] failed: Connection refused (SDK Attempt "
    "Count: 2): Connection refused\n"
    "\tat org.apache.hadoop.fs.s3a.S3AUtils.translateException(S3AUtils.java:213)\n"
)
TIMED_OUT = (
    "An error occurred while calling o337.parquet.\n"
    ": org.apache.hadoop.fs.s3a.AWSApiCallTimeoutException: getFileStatus on "
    "s3a://cdc-data/dogs/petstore/Dog: software.amazon.awssdk.core.exception."
    "ApiCallTimeoutException: Client execution did not complete before the specified timeout "
    "configuration: 15000 millis\n"
    "Caused by: software.amazon.awssdk.core.exception.ApiCallTimeoutException: Client execution "
    "did not complete before the specified timeout configuration: 15000 millis\n"
)
# From hadoop-aws's own troubleshooting guide (troubleshooting_s3a.md): a 403 and a throttled
# request as s3a reports them.
FORBIDDEN = (
    "java.nio.file.AccessDeniedException: s3a://my-bucket/my-object: getFileStatus on "
    "s3a://my-bucket/my-object:\nS3Exception: Forbidden (Service: Amazon S3; Status Code: 403;\n"
    "Error Code: 403 Forbidden; Request ID: myshortreqid; S3 Extended Request ID: "
    "mylongreqid):403 Forbidden"
)
THROTTLED = (
    "org.apache.hadoop.fs.s3a.AWSServiceThrottledException: listFiles on "
    "s3a://bucket/10/d1/d2/d3:\ncom.amazonaws.services.dynamodbv2.model."
    "ProvisionedThroughputExceededException:\nThe level of configured provisioned throughput "
    "for the table was exceeded."
)
SLOW_DOWN = (  # S3's 503, as a Spark job's cause reads
    "Caused by: org.apache.hadoop.fs.s3a.AWSServiceThrottledException: \n"
    "  Slow Down (Service: Amazon S3; Status Code: 503)"
)

# -- content: REJECTED as before ----------------------------------------------------------------
# From a real local Spark 4 session (``spark.read.parquet`` / ``.json``), as py4j gives them.
MISSING = (
    "[PATH_NOT_FOUND] Path does not exist: file:/tmp/transient-texts/nothing-here. SQLSTATE: "
    "42K03\norg.apache.spark.sql.AnalysisException: [PATH_NOT_FOUND] Path does not exist: "
    "file:/tmp/transient-texts/nothing-here. SQLSTATE: 42K03"
)
NOT_PARQUET = (
    "An error occurred while calling o37.parquet.\n"
    ": org.apache.spark.SparkException: [FAILED_READ_FILE.CANNOT_READ_FILE_FOOTER] Encountered "
    "error while reading file file:/tmp/transient-texts/bad.parquet. Could not read footer. "
    "Please ensure that the file is in either ORC or Parquet format.\nIf not, please convert it "
    "to a valid format. If the file is in the valid format, please check if it is corrupt.\nIf "
    "it is, you can choose to either ignore it or fix the corruption. SQLSTATE: KD001\n"
    "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.cannotReadFooterForFileError("
    "QueryExecutionErrors.scala:1123)\n"
    "Caused by: java.lang.RuntimeException: file:/tmp/transient-texts/bad.parquet is not a "
    "Parquet file. Expected magic number at tail, but found [101, 114, 101, 10]\n"
)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (REFUSED, "SdkClientException"),
        (TIMED_OUT, "ApiCallTimeoutException"),
        (FORBIDDEN, "AccessDeniedException"),
        (THROTTLED, "AWSServiceThrottledException"),
        (SLOW_DOWN, "AWSServiceThrottledException"),
        ("java.net.SocketTimeoutException: Read timed out", "SocketTimeoutException"),
        ("java.net.SocketException: Connection reset", "Connection reset"),
        ("[Errno 13] Permission denied: '/landing/dms/x.parquet'", "Permission denied"),
    ],
)
def test_a_store_that_did_not_answer_or_refused_is_trouble_that_may_pass(
    text: str, said: str
) -> None:
    assert store_trouble(text) == said


@pytest.mark.parametrize(
    "text",
    [
        MISSING,
        NOT_PARQUET,
        "[UNABLE_TO_INFER_SCHEMA] Unable to infer schema for Parquet. It must be specified "
        "manually. SQLSTATE: 42KD9",
        "org.apache.hadoop.fs.FSError: java.io.IOException: No space left on device",
        "java.io.IOException: Read-only file system",
        "java.lang.ArithmeticException: / by zero",
    ],
)
def test_content_errors_and_other_failures_are_not_the_stores_trouble(text: str) -> None:
    assert store_trouble(text) is None


def test_the_waits_double_from_the_first_up_to_the_longest() -> None:
    assert [retry_delay(n, 1, 60) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert [retry_delay(n, 5, 12) for n in range(1, 4)] == [5, 10, 12]


def test_a_retry_is_one_line_with_the_code_what_failed_and_the_next_try() -> None:
    line = storage_retry_line(7, 2, 8, "cannot read PARQUET data at s3a://b/d: x" * 50, 2.0)
    assert "\n" not in line
    assert line.startswith("STORAGE_UNAVAILABLE: batch 7, attempt 2 of 8: the store failed (")
    assert line.endswith("...); nothing of the batch is rejected: trying it again in 2 s")
    assert len(line) < 700


def test_after_the_last_attempt_the_job_stops_with_storage_unavailable_and_what_to_do() -> None:
    error = storage_unavailable(3, 8, 123.4, REFUSED)
    assert error.code == "STORAGE_UNAVAILABLE"
    first, todo = error.message.splitlines()
    assert first.startswith("batch 3 failed 8 times over 123 s on the store's trouble ")
    assert "Connection refused" in first and "An error occurred while calling" not in first
    assert "storage_retry.attempts" in todo and "replays the batch" in todo


def _config(tmp_path: Path, retry: str) -> Path:
    path = tmp_path / "cdc.yaml"
    path.write_text(f"warehouse: w\ncheckpoints: c\nstorage_retry: {retry}\n")
    return path


def test_storage_retry_has_sane_defaults_and_takes_its_keys(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, "{}"), environ={})
    retry = cfg.storage_retry
    assert (retry.attempts, retry.first_delay_seconds, retry.max_delay_seconds) == (8, 1, 60)
    cfg = load_config(
        _config(tmp_path, "{attempts: 3, first_delay: 2 seconds, max_delay: 10 seconds}"),
        environ={"CDC_STORAGE_RETRY__ATTEMPTS": "5"},
    )
    retry = cfg.storage_retry
    assert (retry.attempts, retry.first_delay_seconds, retry.max_delay_seconds) == (5, 2, 10)


@pytest.mark.parametrize(
    ("retry", "key"),
    [
        ("{attempts: 0}", "storage_retry.attempts"),
        ("{first_delay: 0 seconds}", "storage_retry.first_delay"),
        ("{max_delay: soon}", "storage_retry.max_delay"),
        ("{first_delay: 1 minute, max_delay: 10 seconds}", "storage_retry"),
        ("{attempt: 3}", "storage_retry.attempt"),
    ],
)
def test_a_wrong_storage_retry_stops_the_job_at_startup_naming_the_key(
    tmp_path: Path, retry: str, key: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(_config(tmp_path, retry), environ={})
    assert key in str(raised.value)
