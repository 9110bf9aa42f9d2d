"""The pure first steps of a micro-batch: raw input → ordered, parsed, de-duplicated requests.

Order (docs/architecture.md, "Order"): Kafka offset order within a partition; landing and
DMS files by (modification time, name), then line order. Across sources and partitions the order
is undefined; we fix one (files first, then Kafka by topic/partition/offset) so a replay is
deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from streaming.core.codes import Code
from streaming.core.errors import RejectedError
from streaming.core.requests import (
    TransactionRequest,
    decode_json,
    salvage_transaction_id,
    transaction_id_of,
    validate_request,
)

__all__ = [
    "Admitted",
    "Committed",
    "RawRequest",
    "Refused",
    "Repeated",
    "RequestDecoder",
    "SourcePosition",
    "Verdict",
    "decode_json_request",
    "in_source_order",
    "split_landing_file",
    "transaction_ids",
    "triage",
]


@dataclass(frozen=True)
class SourcePosition:
    """Where a request came from: a Kafka record or a line of a landing file."""

    kind: Literal["landing", "dms", "kafka", "changes"]
    name: str
    """landing, dms: the file path; kafka: the topic; changes: the record that anchors a
    source transaction of a change feed (``core.changefeed``): ``kafka:<topic>[<p>]@<offset>``."""
    partition: int = 0
    offset: int = 0
    """kafka: the record offset; landing: the 1-based line number; changes: the place in the
    order ``tests/support/assembly.assemble`` (the reference model) gives (commit order)."""
    mtime: datetime | None = None

    def sort_key(self) -> tuple[int, float, str, int, int]:
        if self.kind in ("landing", "dms"):  # files: by modification time, name, line
            stamp = self.mtime.timestamp() if self.mtime else 0.0
            return (0, stamp, self.name, 0, self.offset)
        if self.kind == "changes":  # after requests, in the feeds' own order
            return (2, 0.0, "", self.partition, self.offset)
        return (1, 0.0, self.name, self.partition, self.offset)

    def __str__(self) -> str:
        if self.kind == "landing":
            return f"{self.name}:{self.offset}"  # the file URI Spark lists, then the line
        if self.kind in ("dms", "changes"):
            return self.name
        return f"kafka:{self.name}[{self.partition}]@{self.offset}"


@dataclass(frozen=True)
class RawRequest:
    position: SourcePosition
    payload: bytes
    received_at: datetime


def split_landing_file(
    path: str, mtime: datetime, content: bytes, received_at: datetime
) -> list[RawRequest]:
    """One request per non-blank line of a landing file (JSON lines), numbered from 1."""
    raws = []
    for number, line in enumerate(content.split(b"\n"), start=1):
        if line.strip():
            position = SourcePosition("landing", path, offset=number, mtime=mtime)
            raws.append(RawRequest(position, line.rstrip(b"\r"), received_at))
    return raws


def in_source_order(raws: Iterable[RawRequest]) -> list[RawRequest]:
    return sorted(raws, key=lambda r: r.position.sort_key())


@dataclass(frozen=True)
class Committed:
    """What the ledger knows of a committed transaction."""

    content_hash: str
    outcome_json: str
    batch_id: int
    query: str | None = None
    """Which query (and checkpoint) committed it: batch ids restart on a new checkpoint."""


@dataclass(frozen=True)
class Admitted:
    """A parsed request that is new: it goes on to validation and application."""

    raw: RawRequest
    request: TransactionRequest
    content_hash: str


@dataclass(frozen=True)
class Refused:
    """A request rejected before validation (cannot be parsed, or reuses an id)."""

    raw: RawRequest
    error: RejectedError
    transaction_id: str | None
    request: TransactionRequest | None = None


@dataclass(frozen=True)
class Repeated:
    """A request already seen: committed earlier (``earlier`` set) or earlier in this batch."""

    raw: RawRequest
    request: TransactionRequest
    earlier: Committed | None


Verdict = Admitted | Refused | Repeated

RequestDecoder = Callable[[RawRequest], Any]
"""A raw request → its JSON-shaped value (a dict, for a well-formed request), or ``RejectedError``
with the decoding code (INVALID_JSON, INVALID_AVRO, UNKNOWN_SCHEMA_ID, ...). Validation of the
value is the same for every wire format (``streaming.core.requests.validate_request``)."""


def decode_json_request(raw: RawRequest) -> Any:
    """The decoder of JSON requests (landing lines, DMS files, Kafka with ``format: json``)."""
    return decode_json(raw.payload)


def _parse(
    raw: RawRequest, decode: RequestDecoder
) -> tuple[TransactionRequest | None, RejectedError | None, str | None]:
    """(request, None, id) or (None, why not, the id if it can be read)."""
    try:
        value = decode(raw)
    except RejectedError as e:
        return None, e, salvage_transaction_id(raw.payload)
    try:
        return validate_request(value), None, transaction_id_of(value)
    except RejectedError as e:
        return None, e, transaction_id_of(value)


def transaction_ids(raws: Iterable[RawRequest], decode: RequestDecoder) -> set[str]:
    """The transactionIds that can be read from ``raws`` (to look them up in the ledger)."""
    return {tid for raw in raws if (tid := _parse(raw, decode)[2])}


def triage(
    raws: Iterable[RawRequest],
    ledger: Mapping[str, Committed],
    batch_id: int,
    decode: RequestDecoder = decode_json_request,
    query: str | None = None,
) -> list[Verdict]:
    """Parse requests in source order and sort them into admitted / refused / repeated.

    A transactionId seen before (in the ledger or earlier in this batch) with the same content is
    a repeat (DUPLICATE); with different content it is refused with TRANSACTION_ID_REUSED —
    except a change feed's source transaction (``changes``), a repeat whatever part of it came.
    Ledger entries written by this very batch of this very query (and checkpoint) are ignored:
    they are our own, from a replayed batch.
    """
    verdicts: list[Verdict] = []
    seen: dict[str, str] = {}
    for raw in in_source_order(raws):
        request, error, salvaged = _parse(raw, decode)
        if request is None:
            assert error is not None
            verdicts.append(Refused(raw, error, salvaged))
            continue
        tid, digest = request.transaction_id, request.content_hash()
        earlier = ledger.get(tid)
        if earlier is not None and (earlier.batch_id, earlier.query) == (batch_id, query):
            earlier = None
        known = earlier.content_hash if earlier else seen.get(tid)
        if known is None:
            seen[tid] = digest
            verdicts.append(Admitted(raw, request, digest))
        elif known == digest or raw.position.kind == "changes":
            # A source transaction's id names its commit for good: what comes again under it
            # (the whole or a part a restarted connector sent again) is that commit again.
            verdicts.append(Repeated(raw, request, earlier))
        else:
            error = RejectedError(
                f"transactionId {tid!r} was already used for a different request",
                code=Code.TRANSACTION_ID_REUSED,
            )
            verdicts.append(Refused(raw, error, tid, request))
    return verdicts
