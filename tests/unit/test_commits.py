"""Finding a replayed batch's commits in a table's latest commits (``tables.scan_commits``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from streaming.storage.commits import BatchCommit, scan_commits

AT = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def meta(query: str, batch_id: int, step: int) -> str:
    return BatchCommit(query=query, batch_id=batch_id, step=step, at=AT).metadata()


def test_the_batch_commits_are_found_and_an_earlier_batch_settles_the_search() -> None:
    commits = [
        (12, meta("q@c1", 7, 2)),
        (11, None),  # OPTIMIZE by cdc maintain: no user metadata
        (10, meta("q@c1", 7, 1)),
        (9, meta("other@c9", 8, 1)),  # another query's batch 8 is not ours
        (8, meta("q@c1", 6, 1)),
        (7, "not json"),
    ]
    found, settled = scan_commits(commits, "q@c1", 7)
    assert found == {2: (12, AT), 1: (10, AT)}
    assert settled


def test_without_an_earlier_batch_of_the_query_the_search_is_not_settled() -> None:
    """The batch's commits might be older than the commits read: read further back."""
    commits = [(5, meta("q@c1", 7, 1)), (4, meta("other@c9", 3, 1)), (3, json.dumps({"x": 1}))]
    found, settled = scan_commits(commits, "q@c1", 7)
    assert found == {1: (5, AT)}
    assert not settled


def test_a_later_batch_does_not_settle_it() -> None:
    """Only a commit of an earlier batch bounds where this batch's commits can be."""
    found, settled = scan_commits([(3, meta("q@c1", 9, 1))], "q@c1", 7)
    assert (found, settled) == ({}, False)
