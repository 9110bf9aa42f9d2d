"""Validation and planning of admitted requests — pure, given the catalog and the config.

A valid transaction becomes a list of ``Load``s: one per (action, target table), each numbered
with its ``ordinal`` in the batch (source order, then action order), which orders every change
the grouped apply makes. Anything wrong is a ``RejectedError`` with a specific code, raised before
a single byte is written.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlparse

from streaming.core.catalog import Dataset, SchemaDef
from streaming.core.changefeed import Feed, column_mapping
from streaming.core.codes import Code
from streaming.core.columns import ColumnFormat
from streaming.core.errors import RejectedError
from streaming.core.expressions import (
    Expr,
    ExpressionError,
    bind_arguments,
    check_expression,
    parse_expression,
)
from streaming.core.feedevents import Piece
from streaming.core.fold import ChangeKind
from streaming.core.layout import Layout
from streaming.core.requests import Action, DataFormat, Operation, TransactionRequest

__all__ = [
    "DEFAULT_COLUMN_FORMAT",
    "READABLE_SCHEMES",
    "Events",
    "Files",
    "Filter",
    "Load",
    "Location",
    "PlannedTransaction",
    "SchemaRows",
    "Source",
    "TableRows",
    "plan_staged",
    "plan_transaction",
    "resolve_location",
]

DEFAULT_COLUMN_FORMAT = {
    DataFormat.JSON: ColumnFormat.AS_SPECIFIED,
    DataFormat.PARQUET: ColumnFormat.AS_SPECIFIED,
    DataFormat.DMS: ColumnFormat.UPPER,
    DataFormat.EXTENDED: ColumnFormat.AS_SPECIFIED,
}

_KIND = {
    Operation.UPSERT: ChangeKind.UPSERT,
    Operation.MERGE: ChangeKind.UPSERT,
    Operation.REPLACE: ChangeKind.REPLACE,
    Operation.INSERT_IGNORE: ChangeKind.INSERT_IGNORE,
    Operation.PATCH: ChangeKind.PATCH,
    Operation.DELETE: ChangeKind.DELETE,
}


@dataclass(frozen=True)
class Location:
    """A resolved data location: ``path`` as Spark reads it; ``local`` for local files;
    ``is_file``: planning found one file there (a DMS file of the landing zone), not a folder."""

    path: str
    local: bool
    is_file: bool = False

    def child(self, *parts: str) -> Location:
        return Location("/".join([self.path.rstrip("/"), *parts]), self.local)


@dataclass(frozen=True)
class Files:
    """Data files at a location (seed 000 "from S3 location"), laid out by schema name."""

    location: Location
    format: DataFormat
    column_format: ColumnFormat
    column_mapping: Mapping[str, str]


@dataclass(frozen=True)
class Filter:
    """A named query of a schema, its expression parsed and its arguments bound."""

    name: str
    expression: Expr
    arguments: Mapping[str, Any]
    types: Mapping[str, str]
    """The declared type of each argument."""


@dataclass(frozen=True)
class SchemaRows:
    """The rows of a schema of some dataset: a table, a view, a query (``${arg}`` bound to
    ``arguments``) or an external table, optionally filtered by a named query."""

    dataset: str
    schema: SchemaDef
    arguments: Mapping[str, Any]
    filter: Filter | None


@dataclass(frozen=True)
class TableRows:
    """A table outside the catalog: ``delta:///abs/path`` or ``table://catalog.name``."""

    name: str
    is_path: bool


@dataclass(frozen=True)
class Events:
    """The rows of one table of a source transaction of a change feed (``core.feedevents``),
    staged by Spark (``inputs.changefeeds``): DMS-shaped (``Op``), read as a DMS file is."""

    location: str
    rows: int
    """How many (``inputs.loads`` reads them from the batch's staged frame)."""
    column_format: ColumnFormat
    column_mapping: Mapping[str, str]
    format: DataFormat = DataFormat.DMS
    truncate: bool = False
    """A truncate of the table (no rows; the action a MERGE: every stored row deleted)."""
    unavailable: int = 0
    """Values of its rows the source did not send (their stored values kept)."""


Source = Files | SchemaRows | TableRows | Events


@dataclass(frozen=True)
class Load:
    """One action's effect on one target table, numbered by ``ordinal`` (its position in the
    batch: source order, then action order), which orders every change the grouped apply makes."""

    ordinal: int
    transaction_id: str
    action_index: int
    operation: Operation
    kind: ChangeKind | None
    """Object targets: what each source row does (MERGE: UPSERT, plus the scope's deletes)."""
    dataset: str
    schema: SchemaDef
    """The target schema."""
    source: Source | None
    """None: DELETE_RECORD and REFRESH, which read no rows of their own."""
    scope: Filter | None
    """MERGE / REPLACE: the target rows in scope (None: all); DELETE_RECORD: the rows to delete;
    REFRESH: the filter on the view's inputs."""
    writes: str
    """The target table's path."""
    reads: frozenset[str]
    """Paths of the tables whose current state this load depends on."""

    @property
    def files(self) -> Files:
        assert isinstance(self.source, Files)
        return self.source


@dataclass(frozen=True)
class PlannedTransaction:
    request: TransactionRequest
    loads: list[Load]


READABLE_SCHEMES = frozenset({"file", "s3a", "s3", "gs", "abfs", "abfss", "hdfs", "wasbs"})
"""URI schemes of the file systems data is read from (Hadoop's), besides local paths; the schemes
of ``allowed_locations`` are readable too. Any other scheme is UNSUPPORTED_SCHEME."""


def resolve_location(uri: str, *, base_dir: str, allowed: list[str]) -> Location:
    """Resolve ``uri`` and check it lies under an allowed location (after ``..`` and symlinks)."""
    parsed = urlparse(uri)
    readable = READABLE_SCHEMES | {urlparse(a).scheme for a in allowed if "://" in a}
    if parsed.scheme and parsed.scheme not in readable:
        raise RejectedError(
            f"locationUri {uri!r}: the scheme {parsed.scheme!r} is not one data is read from "
            f"({', '.join(sorted(readable))} or a local path)",
            code=Code.UNSUPPORTED_SCHEME,
        )
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
        code=Code.LOCATION_NOT_ALLOWED,
    )


def _column_format(action: Action, schema: SchemaDef, fmt: DataFormat) -> ColumnFormat:
    """The action's columnFormat, else the schema's, else the format's default (DMS: UPPER)."""
    if action.column_format is not None:
        return action.column_format
    if schema.column_format is not None:
        return schema.column_format
    return DEFAULT_COLUMN_FORMAT[fmt]


@dataclass(frozen=True)
class _Context:
    """What validating one request needs: the catalog, the layout and the location rules."""

    datasets: Mapping[str, Dataset]
    layout: Layout
    base_dir: str
    allowed_locations: list[str]
    exists: Callable[[str], Literal["dir", "file"] | None]

    def dataset(self, name: str) -> Dataset:
        dataset = self.datasets.get(name)
        if dataset is None:
            raise RejectedError(f"unknown dataset {name!r}", code=Code.UNKNOWN_DATASET)
        return dataset

    def schema(self, dataset: str, fqn: str, what: str) -> SchemaDef:
        schema = self.dataset(dataset).get(fqn)
        if schema is None:
            raise RejectedError(f"unknown {what} schema {fqn!r}", code=Code.UNKNOWN_SCHEMA)
        return schema

    def reads(self, dataset: str, schema: SchemaDef) -> frozenset[str]:
        """The tables whose state a schema's rows come from (views and queries: their inputs)."""
        if schema.kind in ("object", "record") or schema.materialized:
            return frozenset([self.layout.table(dataset, schema.name)])
        if schema.kind == "external":
            return frozenset()
        inputs = [self.schema(dataset, fqn, "using") for fqn in schema.using.values()]
        return frozenset().union(*(self.reads(dataset, s) for s in inputs))


_TARGET_KINDS: dict[Operation, tuple[str, ...]] = {
    Operation.INSERT_RECORD: ("record",),
    Operation.DELETE_RECORD: ("record",),
    Operation.REFRESH: ("view",),
}


def _targets(action: Action, dataset: Dataset, index: int) -> list[SchemaDef]:
    """The target schemas: the named one, else (location sources) every schema of the kind."""
    kinds = _TARGET_KINDS.get(action.operation, ("object",))
    if action.target is None:
        if action.source is not None or action.operation in _TARGET_KINDS.keys() - {
            Operation.INSERT_RECORD
        }:
            raise RejectedError(
                f"actions[{index}]: {action.operation} needs a target", code=Code.MISSING_FIELD
            )
        return [s for s in dataset.schemas.values() if s.kind in kinds]
    schema = dataset.get(action.target)
    if schema is None:
        raise RejectedError(f"unknown target schema {action.target!r}", code=Code.UNKNOWN_SCHEMA)
    if schema.kind not in kinds or (
        action.operation is Operation.REFRESH and not schema.materialized
    ):
        wanted = "a materialized view" if action.operation is Operation.REFRESH else kinds[0]
        raise RejectedError(
            f"actions[{index}]: {action.operation} needs {wanted} target; "
            f"{schema.name} is {'a materialized ' if schema.materialized else 'a '}{schema.kind}",
            code=Code.WRONG_SCHEMA_KIND,
        )
    return [schema]


def _named_query(schema: SchemaDef, name: str, given: Mapping[str, Any], where: str) -> Filter:
    query = schema.queries.get(name)
    if query is None:
        raise RejectedError(
            f"{where}: {schema.name} has no query {name!r} (it has {sorted(schema.queries)})",
            code=Code.UNKNOWN_QUERY,
        )
    expression = parse_expression(query.expression)
    arguments = bind_arguments(query.arguments, given, f"{where} query {name}")
    return Filter(name, expression, arguments, {a.name: a.type for a in query.arguments})


def _columns(schema: SchemaDef) -> dict[str, str]:
    """The columns a filter on ``schema``'s rows can name, with their base types."""
    columns = {p: d.base_type for p, d in schema.properties.items()}
    if schema.is_object:
        columns |= {"id": "string", "version": "integer", "created": "datetime"}
        columns |= {"updated": "datetime"}
    return columns


def _scope(query: Filter | None, target: SchemaDef, where: str) -> Filter | None:
    """A filter of the source schema, applied to the target (MERGE / REPLACE scope)."""
    if query is None:
        return None
    try:
        check_expression(query.expression, _columns(target), query.types)
    except ExpressionError as e:
        raise RejectedError(
            f"{where}: query {query.name} cannot select rows of the target {target.name}: {e}",
            code=Code.QUERY_NOT_APPLICABLE,
        ) from e
    return query


def _schema_rows(
    action: Action, request: TransactionRequest, ctx: _Context, where: str
) -> SchemaRows:
    assert action.source is not None
    dataset = action.source_dataset_id or request.dataset
    schema = ctx.schema(dataset, action.source, "source")
    given = dict(action.arguments)
    declared = {a.name for a in schema.arguments}
    query = None
    if action.query is not None:
        named = schema.queries.get(action.query)
        query_args = {a.name for a in named.arguments} if named else set()
        query = _named_query(
            schema, action.query, {k: v for k, v in given.items() if k in query_args}, where
        )
        declared |= query_args
    unknown = sorted(given.keys() - declared)
    if unknown:
        raise RejectedError(
            f"{where}: unknown argument(s) {unknown} for {schema.name}", code=Code.UNKNOWN_ARGUMENT
        )
    own = {a.name for a in schema.arguments}
    sql_args = bind_arguments(schema.arguments, {k: v for k, v in given.items() if k in own}, where)
    return SchemaRows(dataset, schema, sql_args, query)


def _table_rows(action: Action, ctx: _Context, where: str) -> tuple[TableRows, frozenset[str]]:
    assert action.location_uri is not None
    uri = action.location_uri
    if uri.startswith("table://"):
        name = uri.removeprefix("table://")
        return TableRows(name, is_path=False), frozenset([f"table://{name}"])
    location = resolve_location(
        "/" + uri.removeprefix("delta://").lstrip("/"),
        base_dir=ctx.base_dir,
        allowed=ctx.allowed_locations,
    )
    if ctx.exists(location.path) != "dir":
        raise RejectedError(f"{where}: no Delta table at {uri!r}", code=Code.LOCATION_NOT_FOUND)
    return TableRows(location.path, is_path=True), frozenset([location.path])


def _file_loads(
    action: Action, targets: list[SchemaDef], ctx: _Context, index: int
) -> list[tuple[SchemaDef, Files]]:
    assert action.location_uri is not None
    location = resolve_location(
        action.location_uri, base_dir=ctx.base_dir, allowed=ctx.allowed_locations
    )
    kind_of_location = ctx.exists(location.path)
    if kind_of_location is None:
        raise RejectedError(
            f"actions[{index}]: locationUri {action.location_uri!r} does not exist",
            code=Code.LOCATION_NOT_FOUND,
        )
    fmt = action.format or DataFormat.JSON
    if kind_of_location == "file":  # one data file (e.g. a DMS file) for one target schema
        if action.target is None:
            raise RejectedError(
                f"actions[{index}]: locationUri is a file; name its schema in 'target'",
                code=Code.MISSING_FIELD,
            )
        found = [(targets[0], Location(location.path, location.local, is_file=True))]
    else:
        found = [(s, location.child(*s.path_parts)) for s in targets]
        found = [(s, loc) for s, loc in found if ctx.exists(loc.path) == "dir"]
    if not found:
        expected = ", ".join("/".join(s.path_parts) for s in targets)
        raise RejectedError(
            f"actions[{index}]: no data under {action.location_uri!r} for {expected}",
            code=Code.NO_DATA_FOR_SCHEMA,
        )
    return [
        (
            schema,
            Files(
                loc,
                fmt,
                _column_format(action, schema, fmt),
                {**schema.column_mapping, **action.column_mapping},
            ),
        )
        for schema, loc in found
    ]


def _action_loads(
    request: TransactionRequest, index: int, action: Action, ctx: _Context
) -> list[tuple[SchemaDef, Source | None, Filter | None, frozenset[str]]]:
    """(target, source, scope, tables read) of each table one action changes."""
    where = f"actions[{index}]"
    op = action.operation
    targets = _targets(action, ctx.dataset(request.dataset), index)
    if op is Operation.DELETE_RECORD:
        if action.query is None:
            raise RejectedError(f"{where}: DELETE_RECORD needs a query", code=Code.MISSING_FIELD)
        target = targets[0]
        scope: Filter | None = _named_query(target, action.query, action.arguments, where)
        return [(target, None, scope, ctx.reads(request.dataset, target))]
    if op is Operation.REFRESH:
        view = targets[0]
        scope = None
        if action.query is not None:
            inputs = [ctx.schema(request.dataset, f, "using") for f in view.using.values()]
            having = [s for s in inputs if action.query in s.queries]
            if len(having) != 1:
                raise RejectedError(
                    f"{where}: the inputs of {view.name} have {len(having)} queries named "
                    f"{action.query!r}; REFRESH needs exactly one",
                    code=Code.UNKNOWN_QUERY,
                )
            scope = _named_query(having[0], action.query, action.arguments, where)
        inputs_read = {
            p
            for f in view.using.values()
            for p in ctx.reads(request.dataset, ctx.schema(request.dataset, f, "using"))
        }
        writes = ctx.layout.table(request.dataset, view.name)
        return [(view, None, scope, frozenset({*inputs_read, writes}))]
    if action.source is not None:
        rows = _schema_rows(action, request, ctx, where)
        reads = ctx.reads(rows.dataset, rows.schema)
        target = targets[0]
        scope = None
        if op in (Operation.MERGE, Operation.REPLACE):
            scope = _scope(rows.filter, target, where)
            reads |= {ctx.layout.table(request.dataset, target.name)}
        return [(target, rows, scope, reads)]
    if op in (Operation.MERGE, Operation.REPLACE):
        raise RejectedError(f"{where}: {op} needs a source schema", code=Code.MISSING_FIELD)
    assert action.location_uri is not None
    if action.location_uri.startswith(("delta://", "table://")):
        if action.target is None:
            raise RejectedError(
                f"{where}: a table source needs a target schema", code=Code.MISSING_FIELD
            )
        table, reads = _table_rows(action, ctx, where)
        return [(targets[0], table, None, reads)]
    return [(t, files, None, frozenset()) for t, files in _file_loads(action, targets, ctx, index)]


def plan_transaction(
    request: TransactionRequest,
    *,
    first_ordinal: int,
    datasets: Mapping[str, Dataset],
    layout: Layout,
    base_dir: str,
    allowed_locations: list[str],
    exists: Callable[[str], Literal["dir", "file"] | None],
) -> PlannedTransaction:
    """Validate ``request`` and list its loads, numbered from ``first_ordinal``."""
    ctx = _Context(datasets, layout, base_dir, allowed_locations, exists)
    ctx.dataset(request.dataset)
    loads: list[Load] = []
    for index, action in enumerate(request.actions):
        for target, source, scope, reads in _action_loads(request, index, action, ctx):
            loads.append(
                Load(
                    ordinal=first_ordinal + len(loads),
                    transaction_id=request.transaction_id,
                    action_index=index,
                    operation=action.operation,
                    kind=_KIND.get(action.operation) if target.is_object else None,
                    dataset=request.dataset,
                    schema=target,
                    source=source,
                    scope=scope,
                    writes=layout.table(request.dataset, target.name),
                    reads=reads,
                )
            )
    return PlannedTransaction(request, loads)


def plan_staged(
    transaction_id: str,
    feed: Feed,
    pieces: Sequence[Piece],
    *,
    first_ordinal: int,
    datasets: Mapping[str, Dataset],
    layout: Layout,
) -> list[Load]:
    """The loads of a change feed's source transaction or chunk (``core.feedevents``): one per
    piece, numbered from ``first_ordinal`` — an UPSERT of its staged rows, or for a truncate a
    MERGE of no rows (every stored row of the table deleted). The feed's tables were checked at
    startup (``core.changefeed.feed_of``)."""
    dataset = datasets[feed.dataset]
    loads = []
    for index, piece in enumerate(pieces):
        target = dataset.schemas[piece.schema]
        operation = Operation.MERGE if piece.truncate else Operation.UPSERT
        events = Events(
            piece.location,
            piece.rows,
            ColumnFormat.AS_SPECIFIED,
            {**target.column_mapping, **column_mapping(feed)},
            truncate=piece.truncate,
            unavailable=piece.unavailable,
        )
        writes = layout.table(feed.dataset, target.name)
        loads.append(
            Load(
                ordinal=first_ordinal + index,
                transaction_id=transaction_id,
                action_index=index,
                operation=operation,
                kind=_KIND[operation],
                dataset=feed.dataset,
                schema=target,
                source=events,
                scope=None,
                writes=writes,
                reads=frozenset({writes} if piece.truncate else ()),
            )
        )
    return loads
