"""Cutting a batch into segments and waves (core.steps): reads must see earlier writes."""

from __future__ import annotations

from dataclasses import dataclass

from streaming.core.steps import segments, waves


@dataclass(frozen=True)
class L:
    writes: str
    reads: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Tx:
    name: str
    loads: tuple[L, ...]


def names(cut: list[list[Tx]]) -> list[list[str]]:
    return [[tx.name for tx in segment] for segment in cut]


def test_loads_that_only_write_share_one_wave() -> None:
    assert waves([L("dog"), L("cat"), L("dog")]) == [[L("dog"), L("cat"), L("dog")]]


def test_a_load_reading_a_table_written_in_the_wave_starts_a_new_wave() -> None:
    merge = L("dog", frozenset({"dog", "changes"}))
    assert waves([L("changes"), merge, L("dog")]) == [[L("changes")], [merge, L("dog")]]


def test_file_loads_of_many_transactions_are_one_segment() -> None:
    txs = [Tx("a", (L("dog"),)), Tx("b", (L("dog"), L("cat"))), Tx("c", (L("cat"),))]
    assert names(segments(txs)) == [["a", "b", "c"]]


def test_reading_what_an_earlier_transaction_wrote_starts_a_segment() -> None:
    upsert_changes = Tx("setup", (L("changes"),))
    copy = Tx("copy", (L("dog", frozenset({"changes"})),))
    later = Tx("later", (L("cat"),))
    assert names(segments([upsert_changes, copy, later])) == [["setup"], ["copy", "later"]]


def test_a_merge_after_a_write_to_its_target_starts_a_segment() -> None:
    write = Tx("write", (L("audit"),))
    merge = Tx("merge", (L("audit", frozenset({"audit", "stats"})),))
    assert names(segments([write, merge])) == [["write"], ["merge"]]


def test_a_transaction_reading_its_own_writes_is_a_segment_of_its_own() -> None:
    """Its later waves are checked after its first is written: alone, its failure harms no one."""
    before = Tx("before", (L("cat"),))
    inner = Tx("inner", (L("changes"), L("dog", frozenset({"changes"}))))
    after = Tx("after", (L("fish"),))
    assert names(segments([before, inner, after])) == [["before"], ["inner"], ["after"]]
