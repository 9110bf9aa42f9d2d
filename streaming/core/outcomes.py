"""Outcome events: one per transaction, to the outcomes topic and ``_system/outcomes``."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ActionOutcome", "ErrorInfo", "Outcome", "Status"]


class Status(StrEnum):
    COMMITTED = "COMMITTED"
    REJECTED = "REJECTED"
    FAILED = "FAILED"
    DUPLICATE = "DUPLICATE"


class ErrorInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    code: str
    message: str


class ActionOutcome(BaseModel):
    """What one action did to one target table."""

    model_config = ConfigDict(populate_by_name=True)

    index: int
    operation: str
    target: str
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    skipped: int = 0
    stale: int = 0
    """Changes older than the stored row (watermark), ignored."""
    unavailable: int = 0
    """Values a change feed's source did not send (Debezium's unavailable-value placeholder:
    PostgreSQL's unchanged TOASTed columns), their stored values kept."""


class Outcome(BaseModel):
    """The outcome event (docs/interface.md, "Outcome events"). Field names are the wire format."""

    model_config = ConfigDict(populate_by_name=True)

    transaction_id: str | None = Field(alias="transactionId")
    dataset: str | None = None
    status: Status
    error: ErrorInfo | None = None
    actions: list[ActionOutcome] = Field(default_factory=list)
    table_versions: dict[str, int] = Field(default_factory=dict, alias="tableVersions")
    batch_id: int = Field(alias="batchId")
    source: str = Field(
        description="Where the request came from (topic/partition@offset, file:line)"
    )
    received_at: datetime | None = Field(None, alias="receivedAt")
    committed_at: datetime | None = Field(None, alias="committedAt")

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Outcome:
        return cls.model_validate_json(text)
