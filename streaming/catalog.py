"""Dataset definitions: the seed's schema YAML, as typed models.

A dataset file maps fully-qualified schema names to definitions::

    petstore.Dog:
      properties:
        name: {type: string}
      watermark: [updatedAt]              # CDC keys (DESIGN.md §2)
      tombstone: {column: deleted, value: "Y"}

Kinds: ``object`` (the default: meta columns id/version/created/updated/hash + properties),
``record`` (properties only), ``view`` / ``query`` (``sql`` over ``using`` references), and
``external`` (data outside the warehouse: ``location`` + ``format``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streaming.core.columns import ColumnFormat
from streaming.errors import ConfigError

COLUMN_FORMATS = {f.value for f in ColumnFormat}

SchemaKind = Literal["object", "record", "view", "query", "external"]

SCALAR_TYPES: dict[str, DataType] = {
    "string": StringType(),
    "integer": LongType(),
    "number": DoubleType(),
    "boolean": BooleanType(),
    "date": DateType(),
    "datetime": TimestampType(),
    "timestamp": TimestampType(),
    "decimal": DecimalType(38, 9),
    "binary": BinaryType(),
}
COMPOSITE_TYPES = ("array", "map", "object")
META_COLUMNS = ("id", "version", "created", "updated", "hash")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class PropertyDef(_Model):
    type: str = "string"
    required: bool = False
    description: str | None = None
    items: PropertyDef | None = None
    values: PropertyDef | None = None
    properties: dict[str, PropertyDef] | None = None

    @property
    def base_type(self) -> str:
        return self.type.rstrip("!")

    @property
    def is_required(self) -> bool:
        return self.required or self.type.endswith("!")

    @model_validator(mode="after")
    def _known_type(self) -> PropertyDef:
        base = self.base_type
        if base not in SCALAR_TYPES and base not in COMPOSITE_TYPES:
            raise ValueError(f"unknown type {base!r}")
        if base == "array" and self.items is None:
            raise ValueError("an array needs 'items'")
        return self

    def spark_type(self) -> DataType:
        base = self.base_type
        if base == "array":
            assert self.items is not None
            return ArrayType(self.items.spark_type())
        if base == "map":
            return MapType(StringType(), (self.values or PropertyDef()).spark_type())
        if base == "object":
            return StructType(
                [StructField(n, p.spark_type()) for n, p in (self.properties or {}).items()]
            )
        return SCALAR_TYPES[base]


class QueryArgument(_Model):
    name: str
    type: str

    @model_validator(mode="after")
    def _scalar(self) -> QueryArgument:
        if self.type.rstrip("!") not in SCALAR_TYPES:
            raise ValueError(f"unknown argument type {self.type!r}")
        return self


class NamedQuery(_Model):
    arguments: list[QueryArgument] = Field(default_factory=list)
    expression: str


class TombstoneKey(_Model):
    column: str
    value: str | None = None


class SchemaDef(_Model):
    name: str = ""
    kind: SchemaKind = Field("object", alias="type")
    description: str | None = None
    properties: dict[str, PropertyDef] = Field(default_factory=dict)
    queries: dict[str, NamedQuery] = Field(default_factory=dict)
    sql: str | None = None
    using: dict[str, str] = Field(default_factory=dict)
    arguments: list[QueryArgument] = Field(default_factory=list)
    materialized: bool = False
    primary_key: list[str] = Field(default_factory=list, alias="primaryKey")
    history: bool = True
    watermark: list[str] = Field(default_factory=list)
    tombstone: TombstoneKey | None = None
    location: str | None = None
    format: str | None = None
    column_format: str | None = Field(None, alias="columnFormat")
    column_mapping: dict[str, str] = Field(default_factory=dict, alias="columnMapping")

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

    def data_columns(self) -> list[str]:
        """Property columns in order; an object's ``id`` is a meta column, not a property."""
        return [p for p in self.properties if not (self.is_object and p == "id")]

    def spark_schema(self) -> StructType:
        """The data columns as a Spark schema (nullable: validation decides what is required)."""
        return StructType(
            [StructField(p, self.properties[p].spark_type()) for p in self.data_columns()]
        )


class Dataset(_Model):
    name: str
    schemas: dict[str, SchemaDef]

    def get(self, fqn: str) -> SchemaDef | None:
        return self.schemas.get(fqn)

    def object_schemas(self) -> list[SchemaDef]:
        return [s for s in self.schemas.values() if s.is_object]


def _path(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc)


def _check_references(dataset: Dataset) -> None:
    for fqn, schema in dataset.schemas.items():
        for ref, target in schema.using.items():
            if target not in dataset.schemas:
                raise ConfigError(f"{fqn}.using.{ref}: unknown schema {target!r}")
        columns = {"id", *schema.properties}
        for key, names in (("watermark", schema.watermark), ("primaryKey", schema.primary_key)):
            for name in names:
                if name not in columns:
                    raise ConfigError(f"{fqn}.{key}: unknown column {name!r}")
        if schema.tombstone and schema.tombstone.column not in columns:
            raise ConfigError(f"{fqn}.tombstone.column: unknown column {schema.tombstone.column!r}")
        for prop in schema.properties:
            if not _IDENTIFIER.match(prop):
                raise ConfigError(f"{fqn}.properties.{prop}: not a valid column name")
        if schema.kind in ("view", "query") and not schema.sql:
            raise ConfigError(f"{fqn}.sql: required for a {schema.kind} schema")
        if schema.column_format and schema.column_format.upper() not in COLUMN_FORMATS:
            raise ConfigError(f"{fqn}.columnFormat: unknown column format {schema.column_format!r}")
        if schema.kind == "external" and not schema.location:
            raise ConfigError(f"{fqn}.location: required for an external schema")


def parse_dataset(name: str, mapping: Any, *, source: str = "dataset") -> Dataset:
    """Validate a dataset definition mapping (schema FQN → definition)."""
    if not isinstance(mapping, dict):
        raise ConfigError(f"{source}: a dataset must be a mapping of schema names")
    schemas: dict[str, SchemaDef] = {}
    for fqn, body in mapping.items():
        if not isinstance(fqn, str) or "." not in fqn:
            raise ConfigError(f"{source}: {fqn!r}: schema names are fully qualified (ns.Name)")
        try:
            schemas[fqn] = SchemaDef.model_validate({**(body or {}), "name": fqn})
        except ValidationError as e:
            first = e.errors()[0]
            where = _path((fqn, *first["loc"]))
            what = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
            raise ConfigError(f"{source}: {where}: {what}") from e
    dataset = Dataset(name=name, schemas=schemas)
    _check_references(dataset)
    return dataset


def load_dataset(name: str, path: str | Path) -> Dataset:
    file = Path(path)
    try:
        mapping = yaml.safe_load(file.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise ConfigError(f"datasets.{name}: file not found: {file}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"datasets.{name}: {file} is not valid YAML: {e}") from e
    return parse_dataset(name, mapping, source=str(file))
