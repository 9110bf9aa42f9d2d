"""What a batch's transactions came to: one outcome event per verdict (``core.outcomes``), from
what triage, planning and the applied segments left. Pure: the sink hands in the counts and
table versions its MERGEs returned; nothing here reads a table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from streaming.core.batch import RawRequest, Refused, Repeated, Verdict
from streaming.core.errors import CdcError
from streaming.core.fold import Effect
from streaming.core.outcomes import ActionOutcome, ErrorInfo, Outcome, Status
from streaming.core.plan import Events, PlannedTransaction
from streaming.core.scd2 import scd2_key

__all__ = [
    "LoadsDone",
    "batch_outcomes",
    "committed",
    "duplicate",
    "outcome_of",
    "with_scd2_versions",
]

LoadsDone = Mapping[int, tuple[dict[Effect, int], int]]
"""Per load ordinal: its counts per effect and the version of its table after it."""


def batch_outcomes(
    verdicts: Sequence[Verdict],
    valid: Sequence[PlannedTransaction],
    rejected: Mapping[str, CdcError],
    failed: Mapping[str, CdcError],
    done: LoadsDone,
    batch_id: int,
    at: datetime,
) -> list[Outcome]:
    """One outcome per verdict, in the verdicts' order: REJECTED for a refused request or a
    transaction found wrong while applied (``rejected``), FAILED for one whose table failed
    (``failed``), COMMITTED with its actions' counts and table versions for the others of
    ``valid``; a repeat is a DUPLICATE of a committed original (its counts repeated), else
    shares its original's fate."""
    plans = {p.request.transaction_id: p for p in valid}
    first: dict[str, Outcome] = {}
    outcomes: list[Outcome] = []
    for verdict in verdicts:
        if isinstance(verdict, Refused):
            request = verdict.request
            outcome = outcome_of(verdict.raw, batch_id, Status.REJECTED, verdict.error)
            outcome.transaction_id = verdict.transaction_id
            outcome.dataset = request.dataset if request else None
        elif isinstance(verdict, Repeated):
            outcome = duplicate(verdict, first, batch_id)
        else:
            tid = verdict.request.transaction_id
            if tid in rejected:
                outcome = outcome_of(verdict.raw, batch_id, Status.REJECTED, rejected[tid])
            elif tid in failed:
                outcome = outcome_of(verdict.raw, batch_id, Status.FAILED, failed[tid])
            else:
                outcome = committed(verdict.raw, plans[tid], done, batch_id, at)
            outcome.transaction_id, outcome.dataset = tid, verdict.request.dataset
            first[tid] = outcome
        outcomes.append(outcome)
    return outcomes


def committed(
    raw: RawRequest, plan: PlannedTransaction, done: LoadsDone, batch_id: int, at: datetime
) -> Outcome:
    """A COMMITTED outcome: per load its action's counts (a change feed's truncate is the
    action TRUNCATE; its placeholders kept are ``unavailable``), per target its version."""
    outcome = outcome_of(raw, batch_id, Status.COMMITTED)
    for load in plan.loads:
        counts, version = done[load.ordinal]
        events = load.source if isinstance(load.source, Events) else None
        outcome.actions.append(
            ActionOutcome(
                index=load.action_index,
                operation="TRUNCATE" if events and events.truncate else load.operation.value,
                target=load.schema.name,
                unavailable=events.unavailable if events else 0,
                **counts,
            )
        )
        outcome.table_versions[load.schema.name] = version
    outcome.committed_at = at
    return outcome


def with_scd2_versions(outcomes: Sequence[Outcome], scd2: Mapping[tuple[str, str], int]) -> None:
    """Add to each COMMITTED outcome, for every schema it wrote that keeps an SCD2 table, the
    version of that table after the batch (``scd2``: (dataset, schema) → version) under the key
    ``<schema>#scd2`` (``core.scd2.scd2_key``), so consistent reads find it in the ledger."""
    if not scd2:
        return
    for outcome in outcomes:
        if outcome.status is not Status.COMMITTED or outcome.dataset is None:
            continue
        for schema in list(outcome.table_versions):
            version = scd2.get((outcome.dataset, schema))
            if version is not None:
                outcome.table_versions[scd2_key(schema)] = version


def outcome_of(
    raw: RawRequest, batch_id: int, status: Status, error: CdcError | None = None
) -> Outcome:
    """An outcome of the batch for the request ``raw``, without transaction details yet."""
    return Outcome(
        transaction_id=None,
        status=status,
        error=ErrorInfo(code=error.code, message=error.message) if error else None,
        batch_id=batch_id,
        source=str(raw.position),
        received_at=raw.received_at,
    )


def duplicate(verdict: Repeated, first: Mapping[str, Outcome], batch_id: int) -> Outcome:
    """A repeat: DUPLICATE of a committed original (the ledger's, or this batch's first of the
    id), its counts repeated; else the same fate as that original."""
    tid = verdict.request.transaction_id
    original = Outcome.from_json(verdict.earlier.outcome_json) if verdict.earlier else first[tid]
    outcome = original.model_copy(deep=True)
    if original.status is Status.COMMITTED:
        outcome.status = Status.DUPLICATE
    outcome.batch_id = batch_id
    outcome.source = str(verdict.raw.position)
    outcome.received_at = verdict.raw.received_at
    return outcome
