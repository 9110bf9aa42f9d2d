"""core.failures: a failed job's error text told apart by its cause."""

from __future__ import annotations

from streaming.core.failures import query_failure, storage_failure

WHERE = "the warehouse /w or the checkpoints /c"


def test_a_full_disk_and_a_refused_write_are_named_with_what_to_do() -> None:
    full = storage_failure(
        "Job aborted ...\nCaused by: org.apache.hadoop.fs.FSError: java.io.IOException: "
        "No space left on device\n\tat org.apache.hadoop.fs.RawLocalFileSystem...",
        WHERE,
    )
    assert full is not None and full.code == "STORAGE_FULL"
    assert full.message.startswith(f"the job could not write to {WHERE}: No space left on device")
    assert "free space" in full.message and "replays the batch" in full.message
    for text in (
        "java.io.IOException: Read-only file system",
        "java.nio.file.AccessDeniedException: /w/_delta_log: Permission denied",
        "s3a://b/w: getFileStatus on s3a://b/w: com.amazonaws...: Access Denied (403 Forbidden)",
        "DeltaIOException: [DELTA_CANNOT_CREATE_LOG_PATH] Cannot create file:/w/t/_delta_log",
    ):
        refused = storage_failure(text, WHERE)
        assert refused is not None and refused.code == "STORAGE_NOT_WRITABLE", text
        assert "write access" in refused.message
    assert storage_failure("java.lang.ArithmeticException: / by zero", WHERE) is None


def test_any_other_query_failure_is_query_failed_with_its_cause_without_stack_frames() -> None:
    failed = query_failure(
        "[STREAM_FAILED] Query terminated with exception: boom\n"
        "\tat org.apache.spark.sql.Foo.bar(Foo.scala:1)\n"
        "Caused by: java.lang.IllegalStateException: the cause\n"
        "\tat org.apache.spark.sql.Foo.baz(Foo.scala:2)\n",
        WHERE,
    )
    assert failed.code == "QUERY_FAILED"
    first = failed.message.splitlines()[0]
    assert first == (
        "the streaming query failed: [STREAM_FAILED] Query terminated with exception: boom | "
        "Caused by: java.lang.IllegalStateException: the cause"
    )
    assert "replays the batch" in failed.message and "cdc -v run" in failed.message
