"""How many partitions a wave's JSON records are coalesced into (``jsonfiles.record_partitions``):
as many as the cores for small files, however many there are, and never more than
``RECORD_PARTITION_BYTES`` of files to a partition."""

from __future__ import annotations

from streaming.inputs.jsonfiles import RECORD_PARTITION_BYTES, record_partitions


def test_small_files_make_as_many_partitions_as_cores() -> None:
    assert record_partitions(0, 2) == 2
    assert record_partitions(1_500 * 300, 2) == 2  # a batch's 1,500 one-line files
    assert record_partitions(RECORD_PARTITION_BYTES * 2, 2) == 2
    assert record_partitions(10, 64) == 64  # a cluster's cores


def test_big_files_keep_a_partition_per_128_mb() -> None:
    assert record_partitions(RECORD_PARTITION_BYTES * 2 + 1, 2) == 3
    assert record_partitions(10 * 2**30, 2) == 80


def test_no_cores_known_still_one_partition() -> None:
    assert record_partitions(0, 0) == 1
