"""Dataset definitions: the seed's schema YAML, as typed models.

A dataset file maps fully-qualified schema names to definitions::

    petstore.Dog:
      properties:
        name: {type: string}
        updatedAt: {type: timestamp}
        deleted: {type: string}
      watermark: [updatedAt]              # CDC keys (docs/interface.md, "DMS change files")
      tombstone: {column: deleted, value: "Y"}

Kinds: ``object`` (the default: meta columns id/version/created/updated/hash + properties),
``record`` (properties only), ``view`` / ``query`` (``sql`` over ``using`` references), and
``external`` (data outside the warehouse: ``location`` + ``format``).

Every mistake is a :class:`ConfigError` naming the key path, e.g.
``petstore.Dog.properties.age.type: unknown type 'integr'``; all mistakes are reported at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from streaming.core.columns import ColumnFormat
from streaming.core.errors import ConfigError
from streaming.core.expressions import ExpressionError, check_expression, parse_expression

__all__ = [
    "ARG_PATTERN",
    "COMPOSITE_TYPES",
    "DECIMAL_DIGITS",
    "META_COLUMNS",
    "REF_PATTERN",
    "SCALAR_TYPES",
    "SCD2_TIME_TYPES",
    "Dataset",
    "Name",
    "NamedQuery",
    "PropertyDef",
    "QueryArgument",
    "Scd2Def",
    "SchemaDef",
    "SchemaKind",
    "TombstoneKey",
    "load_dataset",
    "parse_dataset",
    "query_problems",
]

SchemaKind = Literal["object", "record", "view", "query", "external"]

SCALAR_TYPES = frozenset(
    ["string", "integer", "number", "boolean", "date", "datetime", "timestamp", "decimal", "binary"]
)
"""The scalar property types (their Spark types: ``storage.schemas.SPARK_TYPES``)."""
DECIMAL_DIGITS = (38, 9)
"""A decimal property's precision and scale unless its definition gives them."""
# A composite type and the key holding its element definition(s).
COMPOSITE_TYPES = {"array": "items", "map": "values", "object": "properties"}
META_COLUMNS = ("id", "version", "created", "updated", "hash")
"""An object's meta columns, in table order (their Spark types: ``storage.schemas.META_FIELDS``)."""
# Keys that only some kinds take (SchemaDef field name → kinds).
_KIND_KEYS: dict[str, tuple[SchemaKind, ...]] = {
    "sql": ("view", "query"),
    "using": ("view", "query"),
    "arguments": ("query",),
    "materialized": ("view",),
    "location": ("external",),
    "format": ("external",),
}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FQN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")
REF_PATTERN = re.compile(r"@\{([^}]*)\}")
ARG_PATTERN = re.compile(r"\$\{([^}]*)\}")


def _identifier(name: str) -> str:
    if not _IDENTIFIER.fullmatch(name):
        raise ValueError(f"{name!r} is not a valid name (letters, digits and _, not first a digit)")
    return name


def _scalar_type(type_: str) -> str:
    if type_.removesuffix("!") not in SCALAR_TYPES:
        raise ValueError(f"unknown type {type_.removesuffix('!')!r}")
    return type_


Name = Annotated[str, AfterValidator(_identifier)]


def _case_clash(names: Iterable[str]) -> str | None:
    """The first name that equals an earlier one ignoring case (Delta columns are case-blind)."""
    seen: set[str] = set()
    for name in names:
        if name.lower() in seen:
            return name
        seen.add(name.lower())
    return None


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PropertyDef(_Model):
    """One property: ``type`` (``!`` = required), and the element definition of a composite."""

    type: str
    required: bool = False
    description: str | None = None
    items: PropertyDef | None = None
    values: PropertyDef | None = None
    properties: dict[Name, PropertyDef] | None = None
    precision: int | None = Field(None, ge=1, le=38)
    """decimal: its digits in all (with ``scale``); neither given: 38 and 9."""
    scale: int | None = Field(None, ge=0, le=38)
    """decimal: its digits after the point."""

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        return value if value.removesuffix("!") in COMPOSITE_TYPES else _scalar_type(value)

    @model_validator(mode="after")
    def _composite_shape(self) -> PropertyDef:
        for composite, key in COMPOSITE_TYPES.items():
            given = getattr(self, key) is not None
            if self.base_type == composite and not given:
                raise ValueError(f"type {composite} needs {key!r}")
            if self.base_type != composite and given:
                raise ValueError(f"{key!r} is only for type {composite}")
        clash = _case_clash(self.properties or ())
        if clash is not None:
            raise ValueError(f"property {clash!r} is declared twice (names ignore case)")
        sized = (self.precision is not None, self.scale is not None)
        if any(sized) and self.base_type != "decimal":
            raise ValueError("'precision' and 'scale' are only for type decimal")
        if sized in ((True, False), (False, True)):
            raise ValueError("a decimal takes 'precision' and 'scale' together")
        if self.precision is not None and self.scale is not None and self.scale > self.precision:
            raise ValueError(f"scale {self.scale} is more than precision {self.precision}")
        return self

    @property
    def decimal_digits(self) -> tuple[int, int]:
        """A decimal's (precision, scale): as given, else (38, 9)."""
        if self.precision is not None and self.scale is not None:
            return self.precision, self.scale
        return DECIMAL_DIGITS

    @property
    def base_type(self) -> str:
        """The type without the required marker ``!``."""
        return self.type.removesuffix("!")

    @property
    def is_required(self) -> bool:
        return self.required or self.type.endswith("!")


class QueryArgument(_Model):
    name: Name
    type: Annotated[str, AfterValidator(_scalar_type)]


class NamedQuery(_Model):
    """A filter on a schema: a boolean ``expression`` over its columns and the ``arguments``."""

    arguments: list[QueryArgument] = Field(default_factory=list)
    expression: str = Field(min_length=1)


class TombstoneKey(_Model):
    """Seed 001: a row whose ``column`` is true / equals ``value`` / is non-null is a delete."""

    column: str
    value: str | None = None


class Scd2Def(_Model):
    """SCD type 2 (``scd2:`` on an object schema): the tracked properties and the validity time.

    ``track``: the properties whose change opens a new interval (None: every property but the
    watermark columns and ``valid_from``); a version that changes only other properties
    updates the open interval in place (type 1). ``valid_from``: a datetime property holding
    each version's validity time (None: the version's ``updated``, its commit time)."""

    track: list[str] | None = None
    valid_from: str | None = None


def _scd2_shape(value: Any) -> Any:
    """``scd2: true`` / ``false`` / a list (the tracked properties) / a mapping."""
    if value is True:
        return {}
    if value is False:
        return None
    if isinstance(value, list):
        return {"track": value}
    return value


class SchemaDef(_Model):
    """One schema of a dataset; ``name`` is its fully-qualified name (the YAML key)."""

    name: str
    kind: SchemaKind = Field("object", alias="type")
    description: str | None = None
    properties: dict[Name, PropertyDef] = Field(default_factory=dict)
    queries: dict[Name, NamedQuery] = Field(default_factory=dict)
    sql: str | None = None
    using: dict[Name, str] = Field(default_factory=dict)
    arguments: list[QueryArgument] = Field(default_factory=list)
    materialized: bool = False
    primary_key: list[str] = Field(default_factory=list, alias="primaryKey")
    history: bool = True
    scd2: Annotated[Scd2Def | None, BeforeValidator(_scd2_shape)] = None
    watermark: list[str] = Field(default_factory=list)
    tombstone: TombstoneKey | None = None
    location: str | None = None
    format: str | None = None
    column_format: ColumnFormat | None = Field(None, alias="columnFormat")
    column_mapping: dict[str, str] = Field(default_factory=dict, alias="columnMapping")

    @field_validator("column_format", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @property
    def namespace(self) -> str:
        return self.name.rpartition(".")[0]

    @property
    def short_name(self) -> str:
        return self.name.rpartition(".")[2]

    @property
    def path_parts(self) -> list[str]:
        return self.name.split(".")

    @property
    def is_object(self) -> bool:
        return self.kind == "object"

    @property
    def is_record(self) -> bool:
        return self.kind == "record"

    @property
    def changes_by_watermark(self) -> bool:
        """Seed 001: with a watermark or a tombstone key, several rows of one key are changes
        resolved by the watermark (NULL smallest; on a tie the later row wins), not duplicates."""
        return bool(self.watermark) or self.tombstone is not None

    def data_columns(self) -> list[str]:
        """Property columns in order; an object's ``id`` is a meta column, not a property."""
        return [p for p in self.properties if not (self.is_object and p == "id")]

    def scd2_tracked(self) -> list[str]:
        """The properties whose change opens a new SCD2 interval (``Scd2Def.track``), in
        column order; empty without ``scd2``."""
        if self.scd2 is None:
            return []
        if self.scd2.track is not None:
            return [p for p in self.data_columns() if p in self.scd2.track]
        skip = {*self.watermark, *([self.scd2.valid_from] if self.scd2.valid_from else [])}
        return [p for p in self.data_columns() if p not in skip]

    def scd2_valid_from(self) -> str | None:
        """The property whose value starts an SCD2 interval (``Scd2Def.valid_from``); None: the
        commit time (or no ``scd2``)."""
        return self.scd2.valid_from if self.scd2 is not None else None


class Dataset(_Model):
    name: str
    schemas: dict[str, SchemaDef]

    def get(self, fqn: str) -> SchemaDef | None:
        return self.schemas.get(fqn)

    def object_schemas(self) -> list[SchemaDef]:
        return [s for s in self.schemas.values() if s.is_object]


def _yaml_key(field: str) -> str:
    return SchemaDef.model_fields[field].alias or field


def _where(loc: tuple[int | str, ...]) -> str:
    """('properties', 'age', 'type') → '.properties.age.type'; list indexes as [0]."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc if p != "[key]")


def _what(error: ErrorDetails) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key"
    if error["type"] == "missing":
        return "required key missing"
    if error["type"] == "value_error":
        return str(error.get("ctx", {}).get("error", error["msg"]))
    what = f"{error['msg']}, got {error['input']!r}"
    if isinstance(error["input"], bool):
        return f"{what} (YAML reads an unquoted yes/no/on/off/true/false as a boolean: quote it)"
    return what


def _parse_schema(fqn: object, body: object, problems: list[str]) -> SchemaDef | None:
    if not isinstance(fqn, str) or not _FQN.fullmatch(fqn):
        problems.append(f"{fqn!r}: not a fully-qualified schema name (namespace.Name)")
        return None
    if body is None:
        body = {}
    if not isinstance(body, dict):
        problems.append(f"{fqn}: a schema definition is a mapping, got {body!r}")
        return None
    if "name" in body:
        problems.append(f"{fqn}.name: unknown key (a schema is named by its key)")
        return None
    try:
        return SchemaDef.model_validate({**body, "name": fqn})
    except ValidationError as e:
        problems.extend(f"{fqn}{_where(err['loc'])}: {_what(err)}" for err in e.errors())
        return None


def _property_problems(schema: SchemaDef) -> Iterator[str]:
    where = f"{schema.name}.properties"
    clash = _case_clash(schema.properties)
    if clash is not None:
        yield f"{where}.{clash}: declared twice (names ignore case)"
    if not schema.is_object:
        return
    reserved = set(META_COLUMNS)
    for prop, definition in schema.properties.items():
        if prop == "id" and definition.base_type != "string":
            yield f"{where}.id.type: an object's id is a string"
        elif prop != "id" and (prop.lower() in reserved or prop.startswith("__")):
            yield f"{where}.{prop}: reserved for the meta and history columns of objects"


def _key_column_problems(schema: SchemaDef) -> Iterator[str]:
    data = schema.data_columns()
    scalar = {p for p in data if schema.properties[p].base_type in SCALAR_TYPES}
    strings = {p for p in data if schema.properties[p].base_type == "string"}
    for column in schema.watermark:
        if column not in scalar:
            yield f"{schema.name}.watermark: {column!r} is not a primitive data column"
    if len(set(schema.watermark)) < len(schema.watermark):
        yield f"{schema.name}.watermark: a column is listed twice"
    tomb = schema.tombstone
    if tomb is not None and tomb.column not in scalar:
        yield f"{schema.name}.tombstone.column: {tomb.column!r} is not a primitive data column"
    elif tomb is not None and tomb.value is not None and tomb.column not in strings:
        yield f"{schema.name}.tombstone.value: only a string column compares with a value"
    keys = {*schema.properties, *(["id"] if schema.is_object else [])}
    for column in schema.primary_key:
        if column not in keys:
            yield f"{schema.name}.primaryKey: unknown column {column!r}"
    for column in schema.column_mapping:
        if column not in keys | {"id"}:
            yield f"{schema.name}.columnMapping.{column}: unknown column"


SCD2_TIME_TYPES = ("datetime", "timestamp")


def _scd2_problems(schema: SchemaDef) -> Iterator[str]:
    """``scd2`` is for objects with history; its properties exist; ``valid_from`` is a time."""
    scd2 = schema.scd2
    if scd2 is None:
        return
    where = f"{schema.name}.scd2"
    if not schema.is_object:
        yield f"{where}: only object schemas keep SCD2 tables (this is a {schema.kind} schema)"
        return
    if not schema.history:
        yield (
            f"{where}: needs the schema's history (SCD2 intervals are derived from its "
            "history rows): remove 'history: false' or 'scd2'"
        )
    data = schema.data_columns()
    for prop in dict.fromkeys(scd2.track or []):
        if prop not in data:
            yield f"{where}.track: {prop!r} is not a property of {schema.name}"
    if scd2.track is not None and len(set(scd2.track)) < len(scd2.track):
        yield f"{where}.track: a property is listed twice"
    if scd2.valid_from is not None:
        time = schema.properties.get(scd2.valid_from)
        if time is None or scd2.valid_from not in data:
            yield f"{where}.valid_from: {scd2.valid_from!r} is not a property of {schema.name}"
        elif time.base_type not in SCD2_TIME_TYPES:
            yield (
                f"{where}.valid_from: {scd2.valid_from!r} is a {time.base_type}, "
                "not a datetime or timestamp property"
            )


def _kind_problems(schema: SchemaDef) -> Iterator[str]:
    for field, kinds in _KIND_KEYS.items():
        if field in schema.model_fields_set and schema.kind not in kinds:
            yield f"{schema.name}.{_yaml_key(field)}: not allowed in {schema.kind} schemas"
    if schema.kind in ("view", "query") and not schema.sql:
        yield f"{schema.name}.sql: required for a {schema.kind} schema"
    if schema.kind == "external" and not schema.location:
        yield f"{schema.name}.location: required for an external schema"


def _sql_problems(schema: SchemaDef) -> Iterator[str]:
    """``@{ref}`` names a ``using`` key, ``${arg}`` a declared argument; arguments are unique."""
    arguments = [a.name for a in schema.arguments]
    for ref in REF_PATTERN.findall(schema.sql or ""):
        if ref not in schema.using:
            yield f"{schema.name}.sql: @{{{ref}}} is not a key of using"
    for arg in ARG_PATTERN.findall(schema.sql or ""):
        if arg not in arguments:
            yield f"{schema.name}.sql: ${{{arg}}} is not a declared argument"
    named = [(f"{schema.name}.arguments", arguments)] + [
        (f"{schema.name}.queries.{q}.arguments", [a.name for a in query.arguments])
        for q, query in schema.queries.items()
    ]
    for where, names in named:
        if len(set(names)) < len(names):
            yield f"{where}: an argument name is declared twice"


def _reference_problems(schemas: Mapping[str, SchemaDef], known: set[str]) -> Iterator[str]:
    """``using`` targets exist (``known``: every schema name, even those that failed to parse)
    and no view or query reaches itself through ``using``."""
    for fqn, schema in schemas.items():
        for ref, target in schema.using.items():
            if target not in known:
                yield f"{fqn}.using.{ref}: unknown schema {target!r}"
    done: set[str] = set()

    def visit(fqn: str, trail: list[str]) -> Iterator[str]:
        if fqn in trail:
            loop = " -> ".join([*trail[trail.index(fqn) :], fqn])
            yield f"{trail[-1]}.using: circular reference {loop}"
        elif fqn not in done and fqn in schemas:
            for target in schemas[fqn].using.values():
                yield from visit(target, [*trail, fqn])
            done.add(fqn)

    for fqn in schemas:
        yield from visit(fqn, [])


_OBJECT_META = {"id": "string", "version": "integer", "created": "datetime", "updated": "datetime"}


def _field_types(properties: Mapping[str, PropertyDef], prefix: str = "") -> dict[str, str]:
    """Property name → catalog type; nested object properties as dotted names (``a.b``)."""
    types: dict[str, str] = {}
    for name, definition in properties.items():
        types[prefix + name] = definition.base_type
        if definition.properties is not None:
            types.update(_field_types(definition.properties, f"{prefix}{name}."))
    return types


def query_problems(schema: SchemaDef) -> Iterator[str]:
    """Each named query parses and uses only the schema's columns and the query's arguments."""
    fields = {**(_OBJECT_META if schema.is_object else {}), **_field_types(schema.properties)}
    for name, query in schema.queries.items():
        arguments = {a.name: a.type for a in query.arguments}
        try:
            check_expression(parse_expression(query.expression), fields, arguments)
        except ExpressionError as e:
            yield f"{schema.name}.queries.{name}.expression: {e}"


def parse_dataset(name: str, mapping: object) -> Dataset:
    """Validate a dataset definition (schema FQN → definition); ConfigError lists every problem."""
    if not isinstance(mapping, dict):
        raise ConfigError(
            f"dataset {name}: must be a mapping of schema names (namespace.Name) to definitions"
        )
    problems: list[str] = []
    schemas: dict[str, SchemaDef] = {}
    for fqn, body in mapping.items():
        schema = _parse_schema(fqn, body, problems)
        if schema is not None:
            schemas[schema.name] = schema
            for check in (
                _kind_problems,
                _property_problems,
                _key_column_problems,
                _sql_problems,
                _scd2_problems,
                query_problems,
            ):
                problems.extend(check(schema))
    problems.extend(_reference_problems(schemas, {str(k) for k in mapping}))
    if problems:
        raise ConfigError("; ".join(problems))
    return Dataset(name=name, schemas=schemas)


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _unique_keys(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            key = loader.construct_object(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "in a mapping", node.start_mark, f"key {key!r} given twice", key_node.start_mark
                )
            seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_keys)


def load_dataset(name: str, path: str | Path) -> Dataset:
    """Read and validate a dataset definition file; every error message names the file."""
    file = Path(path)
    try:
        with file.open(encoding="utf-8") as stream:
            mapping = yaml.load(stream, Loader=_StrictLoader)
    except OSError as e:
        raise ConfigError(f"datasets.{name}: cannot read {file}: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{file}: not valid YAML: {e}") from e
    try:
        return parse_dataset(name, mapping)
    except ConfigError as e:
        raise ConfigError(f"{file}: {e.message}") from e
