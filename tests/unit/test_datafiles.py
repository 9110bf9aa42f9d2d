"""What a landed data file must be (``core.datafiles``): the Parquet frame checked before Spark
reads a file, and the DMS ``Op`` values. Pure: no Spark (pyarrow only writes the test files)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streaming.core.datafiles import (
    DMS_OPERATIONS,
    PARQUET_TAIL,
    invalid_dms_operation,
    parquet_frame_error,
)

WHERE = "DMS data at /zone/x.parquet"


def _parquet() -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"ID": ["o1", "o2"], "Op": ["I", "U"]}), sink)
    return bytes(sink.getvalue().to_pybytes())


def _error(content: bytes) -> tuple[str, str] | None:
    error = parquet_frame_error(WHERE, len(content), content[:4], content[-PARQUET_TAIL:])
    return None if error is None else (error.code, error.message)


def test_a_parquet_file_passes() -> None:
    assert _error(_parquet()) is None


@pytest.mark.parametrize(
    ("content", "code", "said"),
    [
        (b"", "EMPTY_FILE", "the file is empty (0 bytes)"),
        (b"ID,Op\no1,I\n", "UNREADABLE_DATA", "not a Parquet file (11 bytes; it does not start"),
        (b"PAR", "UNREADABLE_DATA", "not a Parquet file (3 bytes"),
        (b"PAR1", "TRUNCATED_FILE", "truncated Parquet file (4 bytes)"),
        (b"PAR1PAR1", "TRUNCATED_FILE", "truncated Parquet file (8 bytes)"),
        (b"PAR1 this is not parquet PAR1", "UNREADABLE_DATA", "its footer would be"),
    ],
)
def test_broken_frames_are_refused_with_their_code(content: bytes, code: str, said: str) -> None:
    found = _error(content)
    assert found is not None and found[0] == code, found
    assert found[1].startswith(f"{WHERE}: ") and said in found[1], found


@pytest.mark.parametrize("keep", [0.5, 0.9])
def test_a_file_cut_short_is_truncated(keep: float) -> None:
    whole = _parquet()
    found = _error(whole[: int(len(whole) * keep)])
    assert found is not None and found[0] == "TRUNCATED_FILE", found
    assert "still being written" in found[1]


def test_an_invalid_dms_operation_names_the_row_the_value_and_how_many() -> None:
    assert DMS_OPERATIONS == ("I", "U", "D")
    one = invalid_dms_operation(WHERE, 3, "X", 1)
    assert (one.code, one.message) == (
        "INVALID_DMS_OPERATION",
        f"{WHERE}: row 3: Op 'X' is not I, U or D",
    )
    more = invalid_dms_operation(WHERE, 1, None, 2)
    assert more.message == (
        f"{WHERE}: row 1: Op NULL is not I, U or D (2 rows have an Op that is not I, U or D)"
    )
