"""The pure first steps of a micro-batch: raw input → ordered, parsed, de-duplicated requests.

Order (DESIGN.md §3): Kafka offset order within a partition; landing and DMS files by
(modification time, name), then line order. Across sources and partitions the order is
undefined; we fix one (files first, then Kafka by topic/partition/offset) so a replay is
deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from streaming.errors import RejectedError
from streaming.requests import TransactionRequest, parse_request, salvage_transaction_id


@dataclass(frozen=True)
class SourcePosition:
    """Where a request came from: a Kafka record or a line of a landing file."""

    kind: Literal["landing", "dms", "kafka"]
    name: str
    """landing, dms: the file path; kafka: the topic."""
    partition: int = 0
    offset: int = 0
    """kafka: the record offset; landing: the 1-based line number."""
    mtime: datetime | None = None

    def sort_key(self) -> tuple[int, float, str, int, int]:
        if self.kind in ("landing", "dms"):  # files: by modification time, name, line
            stamp = self.mtime.timestamp() if self.mtime else 0.0
            return (0, stamp, self.name, 0, self.offset)
        return (1, 0.0, self.name, self.partition, self.offset)

    def __str__(self) -> str:
        if self.kind == "landing":
            return f"{self.name}:{self.offset}"  # the file URI Spark lists, then the line
        if self.kind == "dms":
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


def triage(
    raws: Iterable[RawRequest], ledger: Mapping[str, Committed], batch_id: int
) -> list[Verdict]:
    """Parse requests in source order and sort them into admitted / refused / repeated.

    A transactionId seen before (in the ledger or earlier in this batch) with the same content is
    a repeat (DUPLICATE); with different content it is refused with TRANSACTION_ID_REUSED. Ledger
    entries written by this very batch id are ignored: they are our own, from a replayed batch.
    """
    verdicts: list[Verdict] = []
    seen: dict[str, str] = {}
    for raw in in_source_order(raws):
        try:
            request = parse_request(raw.payload)
        except RejectedError as e:
            verdicts.append(Refused(raw, e, salvage_transaction_id(raw.payload)))
            continue
        tid, digest = request.transaction_id, request.content_hash()
        earlier = ledger.get(tid)
        if earlier is not None and earlier.batch_id == batch_id:
            earlier = None
        known = earlier.content_hash if earlier else seen.get(tid)
        if known is None:
            seen[tid] = digest
            verdicts.append(Admitted(raw, request, digest))
        elif known == digest:
            verdicts.append(Repeated(raw, request, earlier))
        else:
            error = RejectedError(
                f"transactionId {tid!r} was already used for a different request",
                code="TRANSACTION_ID_REUSED",
            )
            verdicts.append(Refused(raw, error, tid, request))
    return verdicts
