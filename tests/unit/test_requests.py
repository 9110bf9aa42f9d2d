"""Parsing raw requests: valid requests, and a specific code for each kind of bad input."""

from __future__ import annotations

import json

import pytest

from streaming.core.errors import RejectedError
from streaming.core.requests import MAX_DEPTH, Operation, parse_request, salvage_transaction_id

SEED_UPSERT = {
    "transactionId": "tx-0001",
    "dataset": "petstore",
    "actions": [{"operation": "UPSERT", "locationUri": "s3://petstore/ingest1", "format": "JSON"}],
}


def test_parses_the_design_example() -> None:
    request = parse_request(json.dumps(SEED_UPSERT).encode())
    assert request.transaction_id == "tx-0001"
    assert request.actions[0].operation is Operation.UPSERT
    assert request.actions[0].location_uri == "s3://petstore/ingest1"


def test_content_hash_ignores_whitespace_and_key_order() -> None:
    a = parse_request(json.dumps(SEED_UPSERT).encode())
    b = parse_request(json.dumps(SEED_UPSERT, indent=2, sort_keys=True).encode())
    c = parse_request(json.dumps({**SEED_UPSERT, "dataset": "other"}).encode())
    assert a.content_hash() == b.content_hash() != c.content_hash()


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b'{"transactionId": "t", "actions": [', "INVALID_JSON"),
        (b"\xff\xfe{}", "INVALID_ENCODING"),
        (b"[1, 2]", "NOT_AN_OBJECT"),
        (b'{"dataset": "petstore", "actions": []}', "MISSING_TRANSACTION_ID"),
        (b'{"transactionId": 7, "dataset": "p", "actions": []}', "INVALID_TRANSACTION_ID"),
        (b'{"transactionId": "t", "actions": [{"operation": "UPSERT"}]}', "MISSING_DATASET"),
        (b'{"transactionId": "t", "dataset": "p", "actions": []}', "EMPTY_ACTIONS"),
        (b'{"transactionId": "t", "dataset": "p"}', "MISSING_ACTIONS"),
        (
            b'{"transactionId": "t", "dataset": "p", "actions": [{"operation": "UPSERTT", '
            b'"locationUri": "x"}]}',
            "UNKNOWN_OPERATION",
        ),
        (
            b'{"transactionId": "t", "dataset": "p", "actions": [{"operation": "UPSERT", '
            b'"locationUri": "x", "format": "CSV"}]}',
            "UNKNOWN_FORMAT",
        ),
        (
            b'{"transactionId": "t", "dataset": "p", "actions": [{"operation": "UPSERT", '
            b'"locationUri": "x", "colour": 1}]}',
            "UNKNOWN_FIELD",
        ),
        (
            b'{"transactionId": "t", "dataset": "p", "actions": [{"operation": "UPSERT"}]}',
            "MISSING_FIELD",
        ),
        (
            b'{"transactionId": "t", "dataset": "p", "actions": [{"operation": "UPSERT", '
            b'"locationUri": ""}]}',
            "INVALID_LOCATION",
        ),
        (
            b'{"transactionId": "t", "dataset": "p", "actions": [{"operation": "UPSERT", '
            b'"locationUri": " \\t "}]}',
            "INVALID_LOCATION",
        ),
        (
            b'{"transactionId": "t", "dataset": "p", "actions": [{"operation": "UPSERT", '
            b'"locationUri": "./data\\u0000/x"}]}',
            "INVALID_LOCATION",
        ),
        (
            b'{"transactionId": "t", "dataset": "p", "actions": [{"operation": "UPSERT", '
            b'"locationUri": "s3a://[bucket/x"}]}',
            "INVALID_LOCATION",
        ),
        (b'{"transactionId": "t", "x": ' + b"[" * 65 + b"]" * 65 + b"}", "TOO_DEEPLY_NESTED"),
        (b"[" * 100_000 + b"]" * 100_000, "TOO_DEEPLY_NESTED"),
        (
            b'{"transactionId": "t", "dataset": "p", "actions": [{"operation": "UPSERT", '
            b'"locationUri": "x", "arguments": {"a": "\\udc00"}}]}',
            "INVALID_ENCODING",
        ),
        (b'{"transactionId": "t", "dataset": "p", "actions": "x"}', "INVALID_FIELD"),
        (b"{" + b'"a": "' + b"x" * 1_000_001 + b'"}', "MESSAGE_TOO_LARGE"),
    ],
)
def test_bad_requests_are_rejected_with_a_specific_code(payload: bytes, code: str) -> None:
    with pytest.raises(RejectedError) as caught:
        parse_request(payload)
    assert caught.value.code == code


def _with_argument(value: bytes) -> bytes:
    return (
        b'{"transactionId": "t", "dataset": "p", "actions": [{"operation": "UPSERT", '
        b'"locationUri": "x", "arguments": {"a": ' + value + b"}}]}"
    )


def test_nesting_up_to_the_limit_is_fine_and_one_more_level_is_not() -> None:
    levels = MAX_DEPTH - 4  # under request > actions > action > arguments
    deep = b"[" * levels + b"]" * levels
    assert parse_request(_with_argument(deep)).actions[0].arguments == {"a": json.loads(deep)}
    with pytest.raises(RejectedError) as caught:
        parse_request(_with_argument(b"[" + deep + b"]"))
    assert caught.value.code == "TOO_DEEPLY_NESTED"


@pytest.mark.parametrize(
    ("payload", "tid"),
    [
        (b'{"transactionId": "ok", "actions": [', "ok"),
        (b'{"transactionId": "ok", "x": ' + b"[" * 100_000, "ok"),
        (b'{"transactionId": "ok", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "ok"),
        (b'{"transactionId": "bad-\\ud800", "dataset": "p"}', None),
        (b'{"transactionId": "bad-\\ud800", "actions": [', None),
        (b'{"transactionId": 7}', None),
    ],
)
def test_the_id_of_a_rejected_request_is_salvaged_only_when_it_is_text(
    payload: bytes, tid: str | None
) -> None:
    """The outcome of a rejected request carries its id when it can be read; never a string that
    cannot be written as UTF-8 (the outcome would not serialize and the batch would fail)."""
    assert salvage_transaction_id(payload) == tid
