"""What a failure of the running job means to an operator: the text of an error the job cannot
handle itself (a failed streaming query, a startup step that raised) told apart by its cause, as
one coded ``CdcError`` with a line saying what to do (docs/troubleshooting.md, "Job failures").

Storage errors are recognised by the operating system's and the object store's own words, which
Hadoop and Delta pass on in the Java exception's text: a full disk (``ENOSPC``), a file system
mounted read-only, a permission refused locally or by S3 (``AccessDenied``, HTTP 403), a folder
Hadoop could not create (it does not say why; Delta's ``DELTA_CANNOT_CREATE_LOG_PATH``). Anything
else is ``QUERY_FAILED``. Every one of them ends ``cdc run`` with exit 2; started again, the job
replays the batch that failed, and nothing is applied twice.
"""

from __future__ import annotations

import re

from streaming.core.errors import CdcError, QueryFailed, StorageFull, StorageNotWritable

_FULL = re.compile(r"No space left on device|Disk quota exceeded")
_NOT_WRITABLE = re.compile(
    r"Read-only file system|Permission denied|AccessDeniedException|Access Denied"
    r"|403 Forbidden|status code: 403|\(403\)"
    # Hadoop's mkdirs answers false, without the reason, and Delta says so:
    r"|DELTA_CANNOT_CREATE_LOG_PATH|Mkdirs failed to create"
)
_CAUSE_LINES = 3


REPLAY = "started again, the job replays the batch that failed; nothing is applied twice"


def cause(text: str) -> str:
    """The first lines of an error's text that say something (no stack frames), joined."""
    lines = [line.strip() for line in text.splitlines()]
    said = [line for line in lines if line and not line.startswith(("at ", "...", "File "))]
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


def query_failure(text: str, storage: str) -> CdcError:
    """The coded error a failed streaming query ends the job with: a storage failure, else
    ``QUERY_FAILED`` with the first lines of its cause."""
    return storage_failure(text, storage) or QueryFailed(
        f"the streaming query failed: {cause(text)}\n"
        f"  {REPLAY}; if it fails again, run `cdc -v run` for the whole error and see "
        "docs/troubleshooting.md"
    )
