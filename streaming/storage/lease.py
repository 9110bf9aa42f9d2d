"""The lease's files (``core.lease``): ``<checkpoint>/lease/<epoch>.json``, read and written on the
driver — local paths with Python's own calls, any other URI (s3a://, hdfs://, …) through Hadoop's
``FileSystem`` in the JVM.

Taking an epoch *creates* its file, and must fail when the file exists:

- a local path: the record is written to a temporary file, then hard-linked to its name —
  ``link(2)`` fails if the name exists, atomically (Hadoop's local ``create(overwrite=false)``
  checks, then creates: two processes can both pass the check);
- a store that declares conditional creates (the path capability
  ``fs.option.create.conditional.overwrite``; S3A since Hadoop 3.4.2 with
  ``fs.s3a.create.conditional.enabled``, the default): the file is created with
  ``createFile(…).must(fs.option.create.conditional.overwrite)``, a PUT with ``If-None-Match: *``
  that S3 refuses (412) when the object exists — atomic on AWS S3 and on stores that honour it;
- any other store: ``create(path, overwrite=false)``: atomic on HDFS; on a store whose check and
  write are two requests (S3A without conditional writes) two runners starting within the same
  moment may both create it — ``atomic`` is False there, and the caller reads the record back
  after a pause to catch the loser (``runtime.lease``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from streaming.core.lease import FOLDER, epoch_of, file_name
from streaming.platform.hadoop import HadoopFolder

__all__ = ["CONDITIONAL_CREATE", "EXISTS", "HadoopFiles", "LeaseFiles", "LocalFiles", "lease_files"]

log = logging.getLogger(__name__)

CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite"
"""Hadoop's createFile() option (and path capability): write in close() only if nothing is there."""
EXISTS = (
    "org.apache.hadoop.fs.FileAlreadyExistsException",
    "org.apache.hadoop.fs.s3a.RemoteFileChangedException",  # S3's 412 to If-None-Match
)


class LeaseFiles(Protocol):
    """The epoch files of one checkpoint's lease."""

    where: str
    atomic: bool
    """Whether ``create`` fails for all but one of several runners creating the same epoch."""

    def epochs(self) -> list[int]:
        """The epochs that have a file, in order."""
        ...

    def read(self, epoch: int) -> str | None:
        """An epoch's record as written; None if the file is not there (any more)."""
        ...

    def create(self, epoch: int, text: str) -> bool:
        """Create the epoch's file; False if it exists (another runner created it)."""
        ...

    def write(self, epoch: int, text: str) -> None:
        """Write (or overwrite) the epoch's file: a renewal of one's own epoch."""
        ...

    def delete(self, epoch: int) -> None:
        """Remove an epoch's file if it is there."""
        ...


def lease_files(spark: SparkSession, checkpoint: str) -> LeaseFiles:
    """The lease files of the checkpoint at ``checkpoint`` (a local path or a Hadoop URI)."""
    folder = f"{checkpoint.rstrip('/')}/{FOLDER}"
    if "://" not in folder:
        return LocalFiles(Path(folder))
    parts = urlsplit(folder)
    if parts.scheme == "file":
        return LocalFiles(Path(parts.path))
    return HadoopFiles(spark, folder)


class LocalFiles:
    """On a local file system: each write lands whole (a temporary file renamed or linked)."""

    atomic = True

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.where = str(folder)

    def epochs(self) -> list[int]:
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        return sorted(e for e in map(epoch_of, names) if e is not None)

    def read(self, epoch: int) -> str | None:
        try:
            return (self.folder / file_name(epoch)).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def _temporary(self, text: str) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        temporary = self.folder / f".{uuid.uuid4().hex}.tmp"
        with temporary.open("w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        return temporary

    def create(self, epoch: int, text: str) -> bool:
        temporary = self._temporary(text)
        try:
            os.link(temporary, self.folder / file_name(epoch))
        except FileExistsError:
            return False
        finally:
            temporary.unlink()
        return True

    def write(self, epoch: int, text: str) -> None:
        os.replace(self._temporary(text), self.folder / file_name(epoch))

    def delete(self, epoch: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.folder / file_name(epoch)).unlink()


class HadoopFiles:
    """Through Hadoop's ``FileSystem`` of the URI (s3a://, hdfs://, abfs://, …):
    ``platform.hadoop.HadoopFolder``."""

    def __init__(self, spark: SparkSession, folder: str) -> None:
        self.where = folder
        self.files = HadoopFolder(spark, folder)
        self.conditional = self.files.has_capability(CONDITIONAL_CREATE)
        self.atomic = self.conditional or self.files.scheme == "hdfs"
        if not self.atomic:
            log.warning(
                "%s: the store does not declare conditional creates (%s): a lease is taken by "
                "create, then read back after a pause",
                folder,
                CONDITIONAL_CREATE,
            )

    def epochs(self) -> list[int]:
        names = self.files.names() or []
        return sorted(e for e in map(epoch_of, names) if e is not None)

    def read(self, epoch: int) -> str | None:
        return self.files.read(file_name(epoch))

    def create(self, epoch: int, text: str) -> bool:
        must = CONDITIONAL_CREATE if self.conditional else None
        return self.files.create(file_name(epoch), text, must=must, exists=EXISTS)

    def write(self, epoch: int, text: str) -> None:
        self.files.write(file_name(epoch), text)

    def delete(self, epoch: int) -> None:
        self.files.delete(file_name(epoch))
