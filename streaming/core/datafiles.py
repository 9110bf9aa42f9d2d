"""What a landed data file must be before its rows are applied — pure.

- A Parquet file is framed by the magic ``PAR1`` at its start and, at its end, its footer's
  length (4 bytes, little-endian) and ``PAR1`` again. ``parquet_frame_error`` says from a file's
  size and those bytes whether it is empty, not Parquet or cut short, before Spark is asked to
  read it (Spark would fail a task and log its stack trace).
- An AWS DMS change file's ``Op`` column says what each row is: ``I`` insert, ``U`` update,
  ``D`` delete (read in any case). Any other value, NULL included, rejects the file's
  transaction (``invalid_dms_operation``).
"""

from __future__ import annotations

from streaming.core.codes import Code
from streaming.core.errors import RejectedError

__all__ = [
    "DMS_DELETE",
    "DMS_OP",
    "DMS_OPERATIONS",
    "PARQUET_MAGIC",
    "PARQUET_TAIL",
    "invalid_dms_operation",
    "parquet_frame_error",
]

DMS_OP = "Op"
"""The operation column of a DMS file (its name is matched in any case)."""
DMS_OPERATIONS = ("I", "U", "D")
DMS_DELETE = "D"

PARQUET_MAGIC = b"PAR1"
PARQUET_TAIL = 8
"""The bytes at a Parquet file's end that frame it: the footer's length, then ``PAR1``."""
_SMALLEST = len(PARQUET_MAGIC) + PARQUET_TAIL


def invalid_dms_operation(where: str, row: int, value: str | None, rows: int) -> RejectedError:
    """The error of a DMS file whose ``row`` (1-based) is the first of ``rows`` rows whose
    ``Op`` is ``value`` or another value that is not a DMS operation."""
    shown = "NULL" if value is None else repr(value)
    more = f" ({rows} rows have an Op that is not I, U or D)" if rows > 1 else ""
    return RejectedError(
        f"{where}: row {row}: Op {shown} is not I, U or D{more}", code=Code.INVALID_DMS_OPERATION
    )


def parquet_frame_error(where: str, size: int, head: bytes, tail: bytes) -> RejectedError | None:
    """Why a file of ``size`` bytes that starts with ``head`` (its first 4 bytes, or fewer) and
    ends with ``tail`` (its last 8, or fewer) cannot be read as Parquet; None when its frame is
    Parquet's (its footer itself is left to the reader)."""
    if size == 0:
        return RejectedError(
            f"{where}: the file is empty (0 bytes): was it listed while it was still being "
            "written? Land files complete (write elsewhere, then rename or copy them in)",
            code=Code.EMPTY_FILE,
        )
    if head[: len(PARQUET_MAGIC)] != PARQUET_MAGIC:
        return RejectedError(
            f"{where}: not a Parquet file ({size} bytes; it does not start with 'PAR1')",
            code=Code.UNREADABLE_DATA,
        )
    if size < _SMALLEST or tail[-len(PARQUET_MAGIC) :] != PARQUET_MAGIC:
        return RejectedError(
            f"{where}: truncated Parquet file ({size} bytes): it starts as Parquet does but does "
            "not end with a Parquet footer: was it read while it was still being written?",
            code=Code.TRUNCATED_FILE,
        )
    footer = int.from_bytes(tail[-PARQUET_TAIL : -len(PARQUET_MAGIC)], "little")
    if footer > size - _SMALLEST:
        return RejectedError(
            f"{where}: not a valid Parquet file ({size} bytes): its footer would be {footer} "
            "bytes long",
            code=Code.UNREADABLE_DATA,
        )
    return None
