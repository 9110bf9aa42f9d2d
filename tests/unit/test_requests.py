"""Parsing raw requests: valid requests, and a specific code for each kind of bad input."""

from __future__ import annotations

import json

import pytest

from streaming.errors import RejectedError
from streaming.requests import Operation, parse_request

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
            "MISSING_FIELD",
        ),
        (b'{"transactionId": "t", "dataset": "p", "actions": "x"}', "INVALID_FIELD"),
        (b"{" + b'"a": "' + b"x" * 1_000_001 + b'"}', "MESSAGE_TOO_LARGE"),
    ],
)
def test_bad_requests_are_rejected_with_a_specific_code(payload: bytes, code: str) -> None:
    with pytest.raises(RejectedError) as caught:
        parse_request(payload)
    assert caught.value.code == code
