"""core.failures: a failed job's error text told apart by its cause."""

from __future__ import annotations

from streaming.core.failures import memory_failure, out_of_memory, query_failure, storage_failure

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


def test_a_jvm_out_of_memory_is_named_with_which_memory_to_raise() -> None:
    for text, words in (
        (
            # Spark 4.2, a broadcast built in a 2g local-mode driver (test_feed_driver_memory)
            "An error occurred while calling o1602.collectToPython.\n: java.util.concurrent."
            "ExecutionException: org.apache.spark.util.SparkFatalException: org.apache.spark."
            "SparkException: Not enough memory to build and broadcast the table to all worker "
            "nodes. As a workaround, you can either disable broadcast ...",
            "Not enough memory to build and broadcast the table",
        ),
        (
            "Caused by: java.lang.OutOfMemoryError: Java heap space\n\tat java.base/...",
            "java.lang.OutOfMemoryError: Java heap space",
        ),
        (
            "org.apache.spark.memory.SparkOutOfMemoryError: [UNABLE_TO_ACQUIRE_MEMORY] Unable to "
            "acquire 65536 bytes of memory, got 0.",
            "SparkOutOfMemoryError: [UNABLE_TO_ACQUIRE_MEMORY] Unable to acquire 65536 bytes of "
            "memory, got 0.",
        ),
        (
            "java.lang.OutOfMemoryError: GC overhead limit exceeded",
            "java.lang.OutOfMemoryError: GC overhead limit exceeded",
        ),
    ):
        assert out_of_memory(text) == words, text
        failure = query_failure(text, WHERE)
        assert failure.code == "OUT_OF_MEMORY"
        assert failure.message.startswith(f"a batch needed more memory than the JVM had ({words})")
        assert "spark.driver.memory" in failure.message
        assert "kafka.max_offsets_per_trigger" in failure.message
        assert "replays the batch" in failure.message
    for other in (
        "java.lang.ArithmeticException: / by zero",
        "org.apache.spark.SparkException: [DIVIDE_BY_ZERO] Division by zero",
        "the memory table of tx-1 is missing",  # the word alone says nothing
    ):
        assert out_of_memory(other) is None
        assert memory_failure(other) is None
        assert query_failure(other, WHERE).code == "QUERY_FAILED"
