"""Key spans (``streaming.core.spans``): files' id ranges → disjoint spans → the spans of a
batch's keys → the ranges a predicate names."""

from __future__ import annotations

import random

from streaming.core.spans import covering, keys_spans, span_of, spans


def test_files_in_id_order_are_one_span_each_in_order() -> None:
    files = [("c000", "c099"), ("a000", "a099"), ("b000", "b099")]
    assert spans(files) == [("a000", "a099"), ("b000", "b099"), ("c000", "c099")]


def test_overlapping_files_share_a_span_and_random_order_makes_one() -> None:
    files = [("a", "f"), ("e", "h"), ("g", "k"), ("m", "p"), ("n", "o")]
    assert spans(files) == [("a", "k"), ("m", "p")]
    shuffled = [("k000", "k999")] * 5  # every file spans the whole range
    assert spans(shuffled) == [("k000", "k999")]


def test_many_spans_are_grouped_neighbours_together_up_to_the_limit() -> None:
    files = [(f"k{i:04d}0", f"k{i:04d}9") for i in range(10)]
    grouped = spans(files, limit=4)
    assert grouped == [("k00000", "k00029"), ("k00030", "k00059"), ("k00060", "k00089"),
                       ("k00090", "k00099")]  # fmt: skip
    assert len(spans(files, limit=10)) == 10


def test_a_key_is_in_the_span_whose_range_holds_it_or_in_none() -> None:
    ordered = [("b", "d"), ("f", "h")]
    assert [span_of(ordered, k) for k in ("a", "b", "c", "d", "e", "f", "h", "i")] == [
        None, 0, 0, 0, None, 1, 1, None,
    ]  # fmt: skip
    assert span_of(ordered, "d0") is None  # after "d", before "f"
    assert keys_spans(ordered, ["c", "e", "g", "z"]) == {0, 1}


def test_covering_joins_consecutive_spans_and_is_none_when_all_are_touched() -> None:
    ordered = [("a", "b"), ("c", "d"), ("e", "f"), ("g", "h")]
    assert covering(ordered, {0, 1, 3}) == [("a", "d"), ("g", "h")]
    assert covering(ordered, {2}) == [("e", "f")]
    assert covering(ordered, set()) == []  # no key can have a stored row
    assert covering(ordered, {0, 1, 2, 3}) is None  # nothing to skip


def test_every_key_with_a_stored_row_lies_in_the_covering_spans() -> None:
    """The property the predicate relies on, over random tables (files in id order or not, and
    spans grouped or not): every key of the batch that some file holds lies in one of the
    covering spans, and a span is covered only if a key of the batch lies in it."""
    rng = random.Random(11)
    for _ in range(300):
        ids = sorted({f"k{rng.randrange(10_000):05d}" for _ in range(rng.randint(1, 200))})
        files: list[list[str]] = [[] for _ in range(rng.randint(1, 12))]
        ordered_layout = rng.random() < 0.5
        for n, key in enumerate(ids):
            at = n * len(files) // len(ids) if ordered_layout else rng.randrange(len(files))
            files[at].append(key)
        ranges = [(min(f), max(f)) for f in files if f]
        ordered = spans(ranges, limit=rng.choice([2, 3, 256]))
        batch = rng.sample(ids, min(len(ids), rng.randint(1, 30)))
        batch += [f"k{rng.randrange(10_000):05d}" for _ in range(5)]  # maybe new keys
        chosen = covering(ordered, keys_spans(ordered, batch))
        if chosen is None:
            continue
        stored = set(ids) & set(batch)
        assert all(any(low <= k <= high for low, high in chosen) for k in stored)
        # and no more: a span is chosen exactly when one of the batch's keys lies in it
        for low, high in ordered:
            chosen_span = any(c[0] <= low and high <= c[1] for c in chosen)
            assert chosen_span == any(low <= k <= high for k in batch)
        # every file lies within one span
        assert all(any(s[0] <= f[0] and f[1] <= s[1] for s in ordered) for f in ranges)
