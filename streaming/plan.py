"""Validation and planning of admitted requests — pure, given the catalog and the config.

A valid transaction becomes a list of ``Load``s: one per (action, target table), each numbered
with its ``ordinal`` in the batch (source order, then action order), which orders every change
the grouped apply makes. Anything wrong is a ``RejectedError`` with a specific code, raised before
a single byte is written.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlparse

from streaming.catalog import Dataset, SchemaDef
from streaming.core.columns import ColumnFormat
from streaming.core.fold import ChangeKind
from streaming.errors import RejectedError
from streaming.requests import Action, DataFormat, Operation, TransactionRequest

DEFAULT_COLUMN_FORMAT = {
    DataFormat.JSON: ColumnFormat.AS_SPECIFIED,
    DataFormat.PARQUET: ColumnFormat.AS_SPECIFIED,
    DataFormat.DMS: ColumnFormat.UPPER,
    DataFormat.EXTENDED: ColumnFormat.AS_SPECIFIED,
}

_KIND = {
    Operation.UPSERT: ChangeKind.UPSERT,
    Operation.INSERT_IGNORE: ChangeKind.INSERT_IGNORE,
    Operation.PATCH: ChangeKind.PATCH,
    Operation.DELETE: ChangeKind.DELETE,
}


@dataclass(frozen=True)
class Location:
    """A resolved data location: ``path`` as Spark reads it; ``local`` for local files."""

    path: str
    local: bool

    def child(self, *parts: str) -> Location:
        return Location("/".join([self.path.rstrip("/"), *parts]), self.local)


@dataclass(frozen=True)
class Load:
    """Read rows of one schema from a location as changes of one kind."""

    ordinal: int
    transaction_id: str
    action_index: int
    operation: Operation
    kind: ChangeKind
    schema: SchemaDef
    location: Location
    format: DataFormat
    column_format: ColumnFormat
    column_mapping: Mapping[str, str]


@dataclass(frozen=True)
class PlannedTransaction:
    request: TransactionRequest
    loads: list[Load]


def resolve_location(uri: str, *, base_dir: str, allowed: list[str]) -> Location:
    """Resolve ``uri`` and check it lies under an allowed location (after ``..`` and symlinks)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        raw = parsed.path if parsed.scheme == "file" else uri
        path = os.path.realpath(os.path.join(base_dir, os.path.expanduser(raw)))
        roots = [os.path.realpath(a) for a in allowed if "://" not in a]
        if any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots):
            return Location(path, local=True)
    else:
        normalized = uri.rstrip("/")
        if ".." not in normalized.split("/") and any(
            normalized == a.rstrip("/") or normalized.startswith(a.rstrip("/") + "/")
            for a in allowed
            if "://" in a
        ):
            return Location(normalized, local=False)
    raise RejectedError(
        f"locationUri {uri!r} is not under an allowed location {allowed}",
        code="LOCATION_NOT_ALLOWED",
    )


def _column_format(action: Action, schema: SchemaDef, fmt: DataFormat) -> ColumnFormat:
    """The action's columnFormat, else the schema's, else the format's default (DMS: UPPER)."""
    if action.column_format is not None:
        return action.column_format
    if schema.column_format is not None:
        return schema.column_format
    return DEFAULT_COLUMN_FORMAT[fmt]


def _targets(action: Action, dataset: Dataset) -> list[SchemaDef]:
    if action.target is None:
        return dataset.object_schemas()
    schema = dataset.get(action.target)
    if schema is None:
        raise RejectedError(f"unknown target schema {action.target!r}", code="UNKNOWN_SCHEMA")
    if not schema.is_object:
        raise RejectedError(
            f"{action.operation} needs an object schema; {schema.name} is a {schema.kind}",
            code="WRONG_SCHEMA_KIND",
        )
    return [schema]


def plan_transaction(
    request: TransactionRequest,
    *,
    first_ordinal: int,
    datasets: Mapping[str, Dataset],
    base_dir: str,
    allowed_locations: list[str],
    exists: Callable[[str], Literal["dir", "file"] | None],
) -> PlannedTransaction:
    """Validate ``request`` and list its loads, numbered from ``first_ordinal``."""
    dataset = datasets.get(request.dataset)
    if dataset is None:
        raise RejectedError(f"unknown dataset {request.dataset!r}", code="UNKNOWN_DATASET")
    loads: list[Load] = []
    for index, action in enumerate(request.actions):
        kind = _KIND.get(action.operation)
        if kind is None or action.location_uri is None:
            origin = "a location" if action.location_uri else "a source schema"
            raise RejectedError(
                f"actions[{index}]: {action.operation} from {origin} is not supported yet",
                code="UNSUPPORTED_ACTION",
            )
        targets = _targets(action, dataset)
        location = resolve_location(
            action.location_uri, base_dir=base_dir, allowed=allowed_locations
        )
        kind_of_location = exists(location.path)
        if kind_of_location is None:
            raise RejectedError(
                f"actions[{index}]: locationUri {action.location_uri!r} does not exist",
                code="LOCATION_NOT_FOUND",
            )
        fmt = action.format or DataFormat.JSON
        if kind_of_location == "file":  # one data file (e.g. a DMS file) for one target schema
            if action.target is None:
                raise RejectedError(
                    f"actions[{index}]: locationUri is a file; name its schema in 'target'",
                    code="MISSING_FIELD",
                )
            found = [(targets[0], location)]
        else:
            found = [(s, location.child(*s.path_parts)) for s in targets]
            found = [(s, loc) for s, loc in found if exists(loc.path) == "dir"]
        if not found:
            expected = ", ".join("/".join(s.path_parts) for s in targets)
            raise RejectedError(
                f"actions[{index}]: no data under {action.location_uri!r} for {expected}",
                code="NO_DATA_FOR_SCHEMA",
            )
        for schema, loc in found:
            loads.append(
                Load(
                    ordinal=first_ordinal + len(loads),
                    transaction_id=request.transaction_id,
                    action_index=index,
                    operation=action.operation,
                    kind=kind,
                    schema=schema,
                    location=loc,
                    format=fmt,
                    column_format=_column_format(action, schema, fmt),
                    column_mapping={**schema.column_mapping, **action.column_mapping},
                )
            )
    return PlannedTransaction(request, loads)
