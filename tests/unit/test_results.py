"""core.results: one outcome per verdict — committed with each action's counts and its tables'
versions, rejected or failed with the error, a repeat as DUPLICATE of a committed original (or
with its original's fate), in the verdicts' order."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import yaml

from streaming.core.batch import Admitted, Committed, RawRequest, SourcePosition, triage
from streaming.core.catalog import parse_dataset
from streaming.core.columns import ColumnFormat
from streaming.core.errors import CdcError, RejectedError
from streaming.core.layout import Layout
from streaming.core.outcomes import Outcome, Status
from streaming.core.plan import Events, PlannedTransaction, plan_transaction
from streaming.core.results import batch_outcomes

AT = datetime(2024, 5, 1, tzinfo=UTC)
COMMITTED_AT = datetime(2024, 5, 1, 0, 0, 7, tzinfo=UTC)
PETSTORE = parse_dataset(
    "petstore",
    yaml.safe_load(resources.files("streaming.resources").joinpath("petstore.yaml").read_text()),
)


def raw(offset: int, tid: str, *schemas: str) -> RawRequest:
    actions = [{"operation": "UPSERT", "target": s, "locationUri": "./data/a"} for s in schemas]
    payload = json.dumps({"transactionId": tid, "dataset": "petstore", "actions": actions})
    return RawRequest(SourcePosition("kafka", "t", 0, offset), payload.encode(), AT)


def planned(verdicts: list, tmp: Path) -> list[PlannedTransaction]:
    out, ordinal = [], 0
    for v in verdicts:
        if isinstance(v, Admitted):
            plan = plan_transaction(
                v.request,
                first_ordinal=ordinal,
                datasets={"petstore": PETSTORE},
                layout=Layout(str(tmp), "c"),
                base_dir=str(tmp),
                allowed_locations=[str(tmp)],
                exists=lambda p: "dir",
            )
            ordinal += len(plan.loads)
            out.append(plan)
    return out


def counts(inserted: int = 0, updated: int = 0) -> dict:
    zero = dict.fromkeys(("inserted", "updated", "deleted", "unchanged", "skipped", "stale"), 0)
    return {**zero, "inserted": inserted, "updated": updated}


def test_each_verdict_gets_its_outcome_in_order(tmp_path: Path) -> None:
    earlier = Outcome(
        transaction_id="old",
        dataset="petstore",
        status=Status.COMMITTED,
        batch_id=3,
        source="kafka:t[0]@1",
        table_versions={"petstore.Dog": 4},
    )
    ledger = {"old": Committed("", earlier.to_json(), 3)}
    raws = [
        raw(10, "a", "petstore.Dog", "petstore.DogChange"),
        raw(11, "b", "petstore.Dog"),
        raw(12, "c", "petstore.Dog"),
        raw(13, "a", "petstore.Dog", "petstore.DogChange"),  # again in the batch
        raw(14, "b", "petstore.Dog"),  # again: its original is rejected
        RawRequest(SourcePosition("kafka", "t", 0, 15), b"{nope", AT),
        raw(16, "old", "petstore.Dog"),
    ]
    ledger["old"] = dataclasses.replace(
        ledger["old"],
        content_hash=triage([raws[6]], {}, 9)[0].content_hash,  # type: ignore[union-attr]
    )
    verdicts = triage(raws, ledger, 9)
    plans = planned(verdicts, tmp_path)
    done = {0: (counts(inserted=2), 5), 1: (counts(updated=1), 8), 3: (counts(), 5)}
    rejected: dict[str, CdcError] = {"b": RejectedError("no such column", code="UNKNOWN_COLUMN")}
    failed: dict[str, CdcError] = {"c": CdcError("the table broke", code="APPLY_FAILED")}
    got = batch_outcomes(verdicts, plans, rejected, failed, done, 9, COMMITTED_AT)

    assert [(o.transaction_id, o.status, o.source) for o in got] == [
        ("a", Status.COMMITTED, "kafka:t[0]@10"),
        ("b", Status.REJECTED, "kafka:t[0]@11"),
        ("c", Status.FAILED, "kafka:t[0]@12"),
        ("a", Status.DUPLICATE, "kafka:t[0]@13"),
        ("b", Status.REJECTED, "kafka:t[0]@14"),
        (None, Status.REJECTED, "kafka:t[0]@15"),
        ("old", Status.DUPLICATE, "kafka:t[0]@16"),
    ]
    a = got[0]
    assert [(x.index, x.operation, x.target, x.inserted, x.updated) for x in a.actions] == [
        (0, "UPSERT", "petstore.Dog", 2, 0),
        (1, "UPSERT", "petstore.DogChange", 0, 1),
    ]
    assert a.table_versions == {"petstore.Dog": 5, "petstore.DogChange": 8}
    assert a.committed_at == COMMITTED_AT and a.batch_id == 9 and a.dataset == "petstore"
    assert got[3].actions == a.actions and got[3].table_versions == a.table_versions
    assert got[1].error is not None and got[1].error.code == "UNKNOWN_COLUMN"
    assert got[4].error == got[1].error  # the repeat shares its original's fate
    assert got[2].error is not None and got[2].error.code == "APPLY_FAILED"
    assert got[5].error is not None and got[5].error.code == "INVALID_JSON"
    assert got[6].table_versions == {"petstore.Dog": 4} and got[6].batch_id == 9


def test_a_feed_truncate_is_the_action_truncate_with_its_placeholders(tmp_path: Path) -> None:
    (verdict,) = triage([raw(1, "f", "petstore.Dog")], {}, 2)
    (plan,) = planned([verdict], tmp_path)
    load = plan.loads[0]
    where = "changes:f/petstore.Dog"
    truncate = Events(where, 0, ColumnFormat.AS_SPECIFIED, {}, truncate=True)
    rows = Events(where, 3, ColumnFormat.AS_SPECIFIED, {}, unavailable=2)
    plan = PlannedTransaction(
        plan.request,
        [
            dataclasses.replace(load, source=truncate),
            dataclasses.replace(load, ordinal=1, action_index=1, source=rows),
        ],
    )
    done = {0: (counts(), 6), 1: (counts(inserted=3), 7)}
    (got,) = batch_outcomes([verdict], [plan], {}, {}, done, 2, COMMITTED_AT)
    assert [(x.operation, x.unavailable, x.inserted) for x in got.actions] == [
        ("TRUNCATE", 0, 0),
        ("UPSERT", 2, 3),
    ]
    assert got.table_versions == {"petstore.Dog": 7}
