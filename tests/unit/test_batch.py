"""Ordering and de-duplication of a micro-batch's raw requests."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from streaming.core.batch import (
    Admitted,
    Committed,
    RawRequest,
    Refused,
    Repeated,
    SourcePosition,
    split_landing_file,
    triage,
)

AT = datetime(2024, 5, 1, tzinfo=UTC)


def req(tid: str, location: str = "./data/a") -> bytes:
    action = {"operation": "UPSERT", "locationUri": location}
    return json.dumps({"transactionId": tid, "dataset": "petstore", "actions": [action]}).encode()


def kafka(offset: int, payload: bytes, partition: int = 0) -> RawRequest:
    return RawRequest(SourcePosition("kafka", "t", partition, offset), payload, AT)


def test_landing_file_lines_are_numbered_and_blank_lines_skipped() -> None:
    raws = split_landing_file("file:/l/f.jsonl", AT, req("a") + b"\n\n" + req("b") + b"\r\n", AT)
    assert [(r.position.offset, r.payload) for r in raws] == [(1, req("a")), (3, req("b"))]
    assert str(raws[0].position) == "file:/l/f.jsonl:1"


def test_order_is_files_by_mtime_then_name_then_line_then_kafka_offsets() -> None:
    late = split_landing_file("/l/a.jsonl", datetime(2024, 6, 1, tzinfo=UTC), req("late"), AT)
    early = split_landing_file("/l/z.jsonl", AT, req("early1") + b"\n" + req("early2"), AT)
    raws = [kafka(5, req("k5")), kafka(2, req("k2")), *late, *early]
    verdicts = triage(raws, {}, batch_id=0)
    assert [v.request.transaction_id for v in verdicts if isinstance(v, Admitted)] == [
        "early1",
        "early2",
        "late",
        "k2",
        "k5",
    ]


def test_same_id_same_content_is_repeated_and_different_content_is_refused() -> None:
    verdicts = triage(
        [kafka(0, req("a")), kafka(1, req("a")), kafka(2, req("a", "./data/other"))], {}, 0
    )
    assert [type(v) for v in verdicts] == [Admitted, Repeated, Refused]
    refused = verdicts[2]
    assert isinstance(refused, Refused) and refused.error.code == "TRANSACTION_ID_REUSED"


def test_ledger_entries_make_duplicates_except_those_of_a_replayed_batch() -> None:
    admitted = triage([kafka(0, req("a"))], {}, 0)[0]
    assert isinstance(admitted, Admitted)
    earlier = Committed(admitted.content_hash, "{}", batch_id=3)
    assert isinstance(triage([kafka(0, req("a"))], {"a": earlier}, 4)[0], Repeated)
    assert isinstance(triage([kafka(0, req("a"))], {"a": earlier}, 3)[0], Admitted)


def test_unparseable_request_keeps_what_can_be_read_of_its_id() -> None:
    bad = b'{"transactionId": "x1", "dataset": "p", "actions": []}'
    truncated = b'{"transactionId": "x\\"2", "dataset": "p", "actions": ['
    verdict = triage([kafka(0, bad), kafka(1, b"{nope"), kafka(2, truncated)], {}, 0)
    assert [(type(v), v.transaction_id) for v in verdict if isinstance(v, Refused)] == [
        (Refused, "x1"),
        (Refused, None),
        (Refused, 'x"2'),
    ]


def test_the_same_batch_id_of_another_checkpoint_is_not_a_replay() -> None:
    """A new checkpoint starts at batch 0 again: its batch 0 is not the old one replayed."""
    admitted = triage([kafka(0, req("a"))], {}, 0)[0]
    assert isinstance(admitted, Admitted)
    old = Committed(admitted.content_hash, "{}", batch_id=0, query="cdc@old-checkpoint")
    again = triage([kafka(0, req("a"))], {"a": old}, 0, query="cdc@new-checkpoint")
    assert isinstance(again[0], Repeated)
    replay = triage([kafka(0, req("a"))], {"a": old}, 0, query="cdc@old-checkpoint")
    assert isinstance(replay[0], Admitted)
