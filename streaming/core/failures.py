"""What a failure of the running job means to an operator: the text of an error the job cannot
handle itself (a failed streaming query, a startup step that raised) told apart by its cause, as
one coded ``CdcError`` with a line saying what to do (docs/troubleshooting.md, "Job failures").

Storage errors are recognised by the operating system's and the object store's own words, which
Hadoop and Delta pass on in the Java exception's text: a full disk (``ENOSPC``), a file system
mounted read-only, a permission refused locally or by S3 (``AccessDenied``, HTTP 403), a folder
Hadoop could not create (it does not say why; Delta's ``DELTA_CANNOT_CREATE_LOG_PATH``). Anything
else is ``QUERY_FAILED``. Every one of them ends ``cdc run`` with exit 2; started again, the job
replays the batch that failed, and nothing is applied twice.

A store that did not answer, or refused a request for a moment, is told apart from data that
cannot be read (issue 47): ``store_trouble`` finds, in an error's text (its Java causes
included), the words of the network (a connection refused, reset or timed out, a host not
found), of the AWS SDK and s3a (``SdkClientException``, a throttled request: S3's 503
``SlowDown``, a 500), or of an access refused that may be given back (``AccessDeniedException``,
S3's 403, ``Permission denied``). Such a failure is not the data's: the sink fails the batch,
not its transactions, and runs it again after ``retry_delay`` (``storage_retry``); only after
the last attempt does the job stop, with ``STORAGE_UNAVAILABLE`` (``storage_unavailable``).
Content errors — a path that does not exist, a file that is not Parquet or is cut short, a
schema Spark cannot infer — have none of these words and are REJECTED as before.

A JVM that ran out of memory (``out_of_memory``: Java's ``OutOfMemoryError``, Spark's
``SparkOutOfMemoryError`` and its refusal to build a broadcast table or to acquire memory for a
task) is not the data's fault either, and running the batch again in the same JVM would meet it
again: the batch fails, none of its transactions is FAILED, and the job stops with
``OUT_OF_MEMORY`` (``memory_failure``), saying which memory to raise or how to make batches
smaller.
"""

from __future__ import annotations

import re

from streaming.core.errors import (
    CdcError,
    OutOfMemory,
    QueryFailed,
    StorageFull,
    StorageNotWritable,
    StorageUnavailable,
)

__all__ = [
    "REPLAY",
    "cause",
    "memory_failure",
    "out_of_memory",
    "query_failure",
    "retry_delay",
    "storage_failure",
    "storage_retry_line",
    "storage_unavailable",
    "store_trouble",
]

_FULL = re.compile(r"No space left on device|Disk quota exceeded")
_NOT_WRITABLE = re.compile(
    r"Read-only file system|Permission denied|AccessDeniedException|Access Denied"
    r"|403 Forbidden|status code: 403|\(403\)"
    # Hadoop's mkdirs answers false, without the reason, and Delta says so:
    r"|DELTA_CANNOT_CREATE_LOG_PATH|Mkdirs failed to create"
)
_CAUSE_LINES = 3
_RETRY_WHAT = 500
"""The most characters of the error a retry's line shows (``cdc -v run`` logs it whole)."""
_PY4J_CALL = re.compile(r"An error occurred while calling o\d+\.\w+\.$")
"""py4j's first line of a Java exception: which call, nothing of why."""
_TROUBLE = re.compile(
    # The network, as Java and the HTTP clients say it (java.net.ConnectException,
    # SocketTimeoutException, SocketException, UnknownHostException; Apache HttpClient's).
    r"Connection refused|Connection reset|Connection timed out|connect timed out|Read timed out"
    r"|timed out waiting for connection|Broken pipe|NoHttpResponseException"
    r"|failed to respond|UnknownHostException|SocketTimeoutException|ConnectTimeoutException"
    # The AWS SDK (v1 and v2) and s3a's translations of its exceptions (S3AUtils).
    r"|SdkClientException|AWSClientIOException|AWSNoResponseException|ApiCallTimeoutException"
    r"|ApiCallAttemptTimeoutException"
    r"|Unable to execute HTTP request|AWSServiceThrottledException|AWSStatus500Exception"
    r"|SlowDown|Please reduce your request rate|503 Service Unavailable|Service Unavailable"
    r"|Status Code: 5\d\d|status code: 5\d\d|Throttl\w*"
    # An access refused, which its owner may give back (a rotated key, a bucket policy edited).
    r"|AccessDeniedException|Access Denied|403 Forbidden|Status Code: 403|status code: 403"
    r"|Permission denied"
    # An I/O interrupted by a time limit (s3a's, the SDK's): InterruptedIOException and kin.
    r"|InterruptedIOException"
)


_MEMORY = re.compile(
    r"java\.lang\.OutOfMemoryError[^\n]*|SparkOutOfMemoryError[^\n]*"
    r"|Not enough memory to build and broadcast the table|UNABLE_TO_ACQUIRE_MEMORY[^\n]*"
    r"|GC overhead limit exceeded|Java heap space"
)
"""A JVM out of memory, as Java and Spark say it (``QueryExecutionErrors``: a broadcast table
that could not be built, a task's memory not acquired)."""

REPLAY = "started again, the job replays the batch that failed; nothing is applied twice"


def cause(text: str) -> str:
    """The first lines of an error's text that say something (no stack frames), joined."""
    lines = [line.strip().removeprefix(": ") for line in text.splitlines()]
    said = [
        line
        for line in lines
        if line and not line.startswith(("at ", "...", "File ")) and not _PY4J_CALL.match(line)
    ]
    return " | ".join(said[:_CAUSE_LINES])[:1500]


def storage_failure(text: str, storage: str) -> CdcError | None:
    """``STORAGE_FULL`` or ``STORAGE_NOT_WRITABLE`` when ``text`` (an error's) says so, else
    None; ``storage`` names where the job writes (its warehouse and checkpoint), for the
    message."""
    full = _FULL.search(text)
    if full is not None:
        return StorageFull(
            f"the job could not write to {storage}: {full.group(0)}\n"
            f"  free space (or grow the volume or quota) there; {REPLAY}"
        )
    refused = _NOT_WRITABLE.search(text)
    if refused is not None:
        return StorageNotWritable(
            f"the job could not write to {storage}: {refused.group(0)}\n"
            "  give the job's user write access there (s3a: the bucket policy's s3:PutObject and "
            f"s3:DeleteObject for its credentials); {REPLAY}"
        )
    return None


def out_of_memory(text: str) -> str | None:
    """The words of ``text`` (an error's, its causes included) saying that a JVM ran out of
    memory; None for any other error."""
    found = _MEMORY.search(text)
    return found.group(0).strip() if found is not None else None


def memory_failure(text: str) -> OutOfMemory | None:
    """``OUT_OF_MEMORY`` when ``text`` (an error's) says a JVM ran out of memory, else None."""
    what = out_of_memory(text)
    if what is None:
        return None
    return OutOfMemory(
        f"a batch needed more memory than the JVM had ({what})\n"
        "  raise spark.driver.memory (in local mode the driver's JVM runs the executors' work "
        "too) or spark.executor.memory, or make batches smaller "
        "(kafka.max_offsets_per_trigger, landing.max_files_per_trigger); none of the batch's "
        f"transactions was FAILED; {REPLAY}"
    )


def query_failure(text: str, storage: str) -> CdcError:
    """The coded error a failed streaming query ends the job with: a storage failure, a JVM out
    of memory, else ``QUERY_FAILED`` with the first lines of its cause."""
    return (
        storage_failure(text, storage)
        or memory_failure(text)
        or QueryFailed(
            f"the streaming query failed: {cause(text)}\n"
            f"  {REPLAY}; if it fails again, run `cdc -v run` for the whole error and see "
            "docs/troubleshooting.md"
        )
    )


def store_trouble(text: str) -> str | None:
    """The words of ``text`` (an error's, its causes included) saying that a store did not
    answer or refused the request — trouble that may pass, not the data's fault; None for any
    other error (bad content, a missing path, a bug)."""
    found = _TROUBLE.search(text)
    return found.group(0) if found is not None else None


def retry_delay(attempt: int, first: float, most: float) -> float:
    """Seconds to wait after the ``attempt``-th (1-based) failed attempt: ``first``, doubled
    after each further attempt, at most ``most``."""
    return float(min(most, first * 2 ** (attempt - 1)))


def storage_retry_line(batch: int, attempt: int, attempts: int, what: str, delay: float) -> str:
    """The one line logged when a batch failed on a store's trouble and is tried again."""
    if len(what) > _RETRY_WHAT:
        what = what[: _RETRY_WHAT - 3] + "..."
    return (
        f"{StorageUnavailable.code}: batch {batch}, attempt {attempt} of {attempts}: the store "
        f"failed ({what}); nothing of the batch is rejected: trying it again in {delay:g} s"
    )


def storage_unavailable(batch: int, attempts: int, seconds: float, text: str) -> CdcError:
    """What the job stops with when the last of ``attempts`` of a batch, over ``seconds``,
    failed on a store's trouble (``text``: the last error's)."""
    what = store_trouble(text) or "error"
    return StorageUnavailable(
        f"batch {batch} failed {attempts} times over {seconds:.0f} s on the store's trouble "
        f"({what}): {cause(text)}\n"
        "  check that the store answers (the S3 endpoint, the network) and that the job's "
        "credentials may read and write there (s3a: the bucket policy), or raise "
        f"storage_retry.attempts; {REPLAY}"
    )
