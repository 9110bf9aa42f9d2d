"""The error hierarchy. Every error a user can see carries a stable ``code``.

``RejectedError``  a request that is wrong in itself (bad JSON, unknown schema, ...): nothing of its
                   transaction is applied; the outcome is REJECTED and the raw input is quarantined.
``FailedError``    a valid request whose application failed (I/O, Delta): nothing applied, FAILED.
``ConfigError``    a wrong configuration or dataset definition: the job refuses to start.
``CheckpointHeld`` another runner holds the checkpoint (``core.lease``): the job refuses to start.
``LeaseLost``      another runner took this one's lease: the job stops before its next commit.
``StorageFull``, ``StorageNotWritable``, ``OutOfMemory``, ``QueryFailed``
                   a running job's failure, told apart by ``core.failures``: exit 2.
``StorageUnavailable``
                   the store did not answer or refused a read or write for a moment
                   (``core.failures.store_trouble``): the batch fails and is retried; after the
                   last attempt the job ends with it (exit 2).
"""

from __future__ import annotations

from streaming.core.codes import Code

__all__ = [
    "CdcError",
    "CheckpointHeld",
    "ConfigError",
    "FailedError",
    "LeaseLost",
    "OutOfMemory",
    "QueryFailed",
    "RejectedError",
    "StorageFull",
    "StorageNotWritable",
    "StorageUnavailable",
    "UnsupportedPlatform",
]


class CdcError(Exception):
    """Base class: a message for humans and a stable code for machines."""

    code: str = Code.INTERNAL_ERROR

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


class RejectedError(CdcError):
    """The request is invalid; ``code`` names why (INVALID_JSON, UNKNOWN_SCHEMA, ...)."""

    code = Code.INVALID_REQUEST


class FailedError(CdcError):
    """Applying a valid request failed; nothing of its transaction was applied."""

    code = Code.APPLY_FAILED


class ConfigError(CdcError):
    """Configuration or dataset definition error, raised at startup. The message names the key."""

    code = Code.CONFIG_ERROR


class CheckpointHeld(CdcError):
    """Another live runner holds the checkpoint's lease (``core.lease``): this one does not start.
    The message names the holder (host, pid, since) and when its lease expires."""

    code = Code.CHECKPOINT_HELD


class LeaseLost(CdcError):
    """This runner's lease was taken by another (it was not renewed in time: the process was
    frozen, or cut off from the store): the job stops before its next commit."""

    code = Code.LEASE_LOST


class StorageFull(CdcError):
    """The warehouse or checkpoints' storage is full (``core.failures``)."""

    code = Code.STORAGE_FULL


class StorageNotWritable(CdcError):
    """The warehouse or checkpoints cannot be written (``core.failures``)."""

    code = Code.STORAGE_NOT_WRITABLE


class OutOfMemory(CdcError):
    """A JVM of the job (the driver's; in local mode it runs the executors' work too) or an
    executor ran out of memory in a batch (``core.failures.out_of_memory``): not the
    transactions' fault, so none of them is FAILED; the batch fails and the job stops."""

    code = Code.OUT_OF_MEMORY


class QueryFailed(CdcError):
    """The streaming query failed for another reason (``core.failures``)."""

    code = Code.QUERY_FAILED


class StorageUnavailable(CdcError):
    """A store (the warehouse, the checkpoints, a landing zone, a load's data) did not answer or
    refused a request, which may pass (``core.failures.store_trouble``): not the data's fault.
    The batch fails and the sink retries it (``storage_retry``); after the last attempt the job
    ends with this code."""

    code = Code.STORAGE_UNAVAILABLE


class UnsupportedPlatform(CdcError):
    """The running Spark or Delta is not a version this code supports (``core.versions``): the
    job refuses to start. The message names what runs, what is supported and what to do."""

    code = Code.UNSUPPORTED_PLATFORM
