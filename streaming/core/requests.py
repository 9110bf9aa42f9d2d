"""Transaction requests: the pydantic models of the wire format and the parser of raw bytes.

A request is one JSON object (docs/interface.md, "Transaction requests"; actions as in seed 000)::

    {"transactionId": "tx-0001", "dataset": "petstore",
     "actions": [{"operation": "UPSERT", "locationUri": "./data/ingest1", "format": "JSON"}]}

``parse_request`` turns raw bytes into a ``TransactionRequest`` or raises ``RejectedError`` with a
specific code. It never touches Spark: it is the first, pure step of every micro-batch.
"""

from __future__ import annotations

import hashlib
import json
import re
from enum import StrEnum
from typing import Any
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from streaming.core.codes import Code
from streaming.core.columns import ColumnFormat
from streaming.core.errors import RejectedError

__all__ = [
    "MAX_DEPTH",
    "MAX_REQUEST_BYTES",
    "Action",
    "DataFormat",
    "Operation",
    "TransactionRequest",
    "decode_json",
    "parse_request",
    "salvage_transaction_id",
    "transaction_id_of",
    "validate_request",
]

MAX_REQUEST_BYTES = 1_000_000
"""A request names its data by location; a message this large is a mistake (MESSAGE_TOO_LARGE)."""
MAX_DEPTH = 64
"""Objects and arrays nested deeper than this are refused (TOO_DEEPLY_NESTED): no request needs
it, and Python's JSON parser would otherwise fail with a RecursionError."""


class Operation(StrEnum):
    UPSERT = "UPSERT"
    PATCH = "PATCH"
    DELETE = "DELETE"
    MERGE = "MERGE"
    REPLACE = "REPLACE"
    INSERT_IGNORE = "INSERT_IGNORE"
    INSERT_RECORD = "INSERT_RECORD"
    DELETE_RECORD = "DELETE_RECORD"
    REFRESH = "REFRESH"


class DataFormat(StrEnum):
    JSON = "JSON"
    PARQUET = "PARQUET"
    DMS = "DMS"
    EXTENDED = "EXTENDED"
    """Seed 003: ``$change_type`` (0 write, 1 delete), ``$value:col`` and ``$flags:col``."""


class Action(BaseModel):
    """One action of a transaction (seed 000). Which fields apply depends on ``operation``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    operation: Operation
    location_uri: str | None = Field(None, alias="locationUri")
    format: DataFormat | None = None
    source: str | None = None
    target: str | None = None
    query: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    column_format: ColumnFormat | None = Field(None, alias="columnFormat")
    column_mapping: dict[str, str] = Field(default_factory=dict, alias="columnMapping")
    source_dataset_id: str | None = Field(None, alias="sourceDatasetId")

    @field_validator("operation", "format", "column_format", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("location_uri")
    @classmethod
    def _location_syntax(cls, value: str | None) -> str | None:
        """INVALID_LOCATION: empty, control characters, or not a URI at all."""
        if value is None:
            return value
        if not value.strip():
            raise PydanticCustomError("invalid_location", "must not be empty")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise PydanticCustomError("invalid_location", "must not hold control characters")
        try:
            urlparse(value)
        except ValueError as e:
            raise PydanticCustomError(
                "invalid_location", "not a valid URI: {why}", {"why": str(e)}
            ) from e
        return value

    @model_validator(mode="after")
    def _has_a_source(self) -> Action:
        if self.operation in (Operation.DELETE_RECORD, Operation.REFRESH):
            if not self.target:
                raise ValueError(f"target: required for {self.operation}")
        elif self.location_uri is None and self.source is None:
            raise ValueError(f"{self.operation} needs a locationUri or a source")
        return self


class TransactionRequest(BaseModel):
    """A transaction: a dataset and its ordered actions, keyed by ``transactionId``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    transaction_id: str = Field(alias="transactionId", min_length=1, max_length=256)
    dataset: str = Field(min_length=1)
    actions: list[Action] = Field(min_length=1)

    def content_hash(self) -> str:
        """Hash of the request's meaning (whitespace/key order do not matter): detects id reuse."""
        canonical = json.dumps(
            self.model_dump(mode="json", by_alias=True, exclude_defaults=True),
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


_TOP_LEVEL_CODES = {
    "transactionId": Code.MISSING_TRANSACTION_ID,
    "dataset": Code.MISSING_DATASET,
    "actions": Code.MISSING_ACTIONS,
}


def _error_code(error: ValidationError) -> str:
    """The most specific code for the first problem pydantic found."""
    first = error.errors()[0]
    loc, kind = first["loc"], first["type"]
    field = str(loc[-1]) if loc else ""
    if kind == "missing" and len(loc) == 1:
        return _TOP_LEVEL_CODES.get(field, Code.MISSING_FIELD)
    if kind == "extra_forbidden":
        return Code.UNKNOWN_FIELD
    if kind == "invalid_location":
        return Code.INVALID_LOCATION
    if field == "operation" and kind == "enum":
        return Code.UNKNOWN_OPERATION
    if field == "format" and kind == "enum":
        return Code.UNKNOWN_FORMAT
    if field == "columnFormat" and kind == "enum":
        return Code.UNKNOWN_COLUMN_FORMAT
    if loc == ("actions",) and kind == "too_short":
        return Code.EMPTY_ACTIONS
    if loc == ("transactionId",):
        return Code.INVALID_TRANSACTION_ID
    if kind in ("value_error", "missing"):
        return Code.MISSING_FIELD
    return Code.INVALID_FIELD


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "request"
    return f"{where}: {first['msg']}"


def decode_json(payload: bytes) -> Any:
    """Bytes → JSON value, with the codes INVALID_ENCODING / INVALID_JSON / MESSAGE_TOO_LARGE."""
    if len(payload) > MAX_REQUEST_BYTES:
        raise RejectedError(
            f"request is {len(payload)} bytes; the limit is {MAX_REQUEST_BYTES}",
            code=Code.MESSAGE_TOO_LARGE,
        )
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RejectedError(f"request is not UTF-8: {e}", code=Code.INVALID_ENCODING) from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise RejectedError(f"request is not valid JSON: {e}", code=Code.INVALID_JSON) from e
    except RecursionError as e:
        raise _too_deep() from e


def _too_deep() -> RejectedError:
    return RejectedError(
        f"request nests objects/arrays deeper than {MAX_DEPTH} levels", code=Code.TOO_DEEPLY_NESTED
    )


def _is_unicode(text: str) -> bool:
    """False for a string holding a lone surrogate (JSON ``"\\ud800"``): not Unicode text, it
    cannot be written as UTF-8 (to the outcome, the ledger, Spark)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_structure(value: Any) -> None:
    """TOO_DEEPLY_NESTED beyond ``MAX_DEPTH``; INVALID_ENCODING for a key or string value that is
    not Unicode (an escaped lone surrogate). Iterative: no recursion on hostile input."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not _is_unicode(item):
                raise RejectedError(
                    "request holds a string that is not Unicode (a lone surrogate escape)",
                    code=Code.INVALID_ENCODING,
                )
            continue
        if not isinstance(item, (dict, list)):
            continue
        if depth > MAX_DEPTH:
            raise _too_deep()
        children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)


def parse_request(payload: bytes) -> TransactionRequest:
    """Parse and validate one request's syntax. Raises ``RejectedError`` with a specific code."""
    return validate_request(decode_json(payload))


def validate_request(value: Any) -> TransactionRequest:
    """Validate a decoded, JSON-shaped request (from JSON or Avro): the codes of ``parse_request``
    after decoding (NOT_AN_OBJECT, MISSING_TRANSACTION_ID, UNKNOWN_FIELD, ...)."""
    if not isinstance(value, dict):
        raise RejectedError("a request must be a JSON object", code=Code.NOT_AN_OBJECT)
    _check_structure(value)
    try:
        return TransactionRequest.model_validate(value)
    except ValidationError as e:
        raise RejectedError(_describe(e), code=_error_code(e)) from e


def transaction_id_of(value: Any) -> str | None:
    """The transactionId of a decoded request that may be invalid otherwise, if it has one."""
    tid = value.get("transactionId") if isinstance(value, dict) else None
    return tid if isinstance(tid, str) and tid and _is_unicode(tid) else None


_ID_PATTERN = re.compile(rb'"transactionId"\s*:\s*"((?:[^"\\]|\\.){1,256})"')


def salvage_transaction_id(payload: bytes) -> str | None:
    """Best effort: the transactionId of a request that failed to parse (even truncated JSON),
    so its REJECTED outcome can still be correlated by the sender."""
    try:
        value = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        match = _ID_PATTERN.search(payload)
        if match is None:
            return None
        try:
            found = json.loads(b'"' + match.group(1) + b'"')
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        return found if isinstance(found, str) and found and _is_unicode(found) else None
    return transaction_id_of(value)
