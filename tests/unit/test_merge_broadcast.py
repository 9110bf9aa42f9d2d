"""When a large batch broadcasts its MERGE source (``apply.broadcasts``): the held keys' rows,
estimated from the materialised fold's size in memory, within the limit."""

from __future__ import annotations

from streaming.apply.objects import MERGE_BROADCAST_MAX_BYTES, broadcasts

MIB = 1 << 20


def test_the_held_keys_share_of_the_fold_decides() -> None:
    # A fold of 116 MiB holding 160,000 wide rows, 44,000 of them the held keys': ~32 MiB.
    assert broadcasts(116 * MIB, 44_000, 160_000, MERGE_BROADCAST_MAX_BYTES)
    # Every wide row a held key's: the whole 116 MiB would be broadcast.
    assert not broadcasts(116 * MIB, 160_000, 160_000, MERGE_BROADCAST_MAX_BYTES)
    assert broadcasts(64 * MIB, 10, 10, 64 * MIB)  # the limit itself is allowed
    assert not broadcasts(64 * MIB + 1, 10, 10, 64 * MIB)


def test_an_unknown_size_or_broadcasts_turned_off_never_broadcast() -> None:
    assert not broadcasts(None, 10, 100, MERGE_BROADCAST_MAX_BYTES)
    assert not broadcasts(1, 1, 100, -1)  # spark.sql.autoBroadcastJoinThreshold = -1
