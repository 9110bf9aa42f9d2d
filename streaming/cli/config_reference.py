"""The configuration reference (``docs/config.md``), generated from the models in config.py.

Every key of ``cdc.yaml`` with its dotted path, type, default and description, read from the
pydantic models, so the reference cannot drift from the code: ``cdc config-reference --output
docs/config.md`` (``make docs``) writes it, and a unit test fails when the committed file differs.
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from typing import Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from streaming.core.config import AppConfig

__all__ = ["HEADER", "default_text", "render", "rows", "type_name"]

HEADER = """\
# Configuration reference

<!-- Generated from the pydantic models in streaming/core/config.py by `make docs`
     (`cdc config-reference --output docs/config.md`). Do not edit by hand. -->

Every key of `cdc.yaml`. Keys are validated strictly: an unknown key or a wrong value fails at
startup naming the key. Every key can be set by an environment variable, `CDC_` + the path in
capitals with `__` between levels (`CDC_KAFKA__BOOTSTRAP=broker:9092`) and `_` for a dot inside a
key (`CDC_KAFKA__AVRO__REGISTRY__BASIC_AUTH_USER_INFO`); its value is read as YAML. Relative paths
resolve against the config file's folder. "required" inside a section means required when the
section is given. A secret (type "secret") is never printed: `**********` in any dump.

| key | type | default | description |
|---|---|---|---|
"""


def _model(annotation: Any) -> type[BaseModel] | None:
    """The model class of a (possibly optional) nested section, else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType):
        models = [m for a in get_args(annotation) if (m := _model(a)) is not None]
        return models[0] if len(models) == 1 else None
    return None


_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", SecretStr: "secret"}


def type_name(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " or ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        names = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" or null" if type(None) in args else "")
    if origin is dict:
        return f"map of {type_name(args[0])} → {type_name(args[1])}"
    if origin is list:
        return f"list of {type_name(args[0])}"
    model = _model(annotation)
    if model is not None:
        return "section"
    return _NAMES.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _bounds(field: FieldInfo) -> str:
    parts = []
    for item in field.metadata:
        if isinstance(item, Gt):
            parts.append(f"> {item.gt}")
        elif isinstance(item, Ge):
            parts.append(f"≥ {item.ge}")
    return (" " + ", ".join(parts)) if parts else ""


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return ""
    else:
        value = field.default
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    return f"`{json.dumps(value)}`"


def _description(field: FieldInfo, model: type[BaseModel] | None) -> str:
    text = field.description or ""
    if not text and model is not None and model.__doc__:
        text = model.__doc__.strip().splitlines()[0].removesuffix(".")
    return text


def rows(model: type[BaseModel] = AppConfig, prefix: str = "") -> Iterator[list[str]]:
    """[key, type, default, description] of every field, sections followed by their keys."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{field.alias or name}"
        nested = _model(field.annotation)
        kind = type_name(field.annotation)
        bounds = _bounds(field)
        if bounds:
            optional = kind.endswith(" or null")
            kind = kind.removesuffix(" or null") + bounds + (" or null" if optional else "")
        if nested is not None and get_origin(field.annotation) in (Union, types.UnionType):
            kind = "section, optional"
        yield [f"`{path}`", kind, default_text(field), _description(field, nested)]
        if nested is None and get_origin(field.annotation) is list:
            nested = _model(get_args(field.annotation)[0])  # each item's keys: `list.key`
        if nested is not None:
            yield from rows(nested, f"{path}.")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The whole of ``docs/config.md``."""
    body = "".join("| " + " | ".join(_cell(c) for c in row) + " |\n" for row in rows())
    return HEADER + body
