"""Avro messages in the Confluent wire format (``kafka.format: avro``).

A message is the magic byte 0, the writer schema's id (4 bytes, big-endian), then the Avro binary
body. Writer schemas come from a schema registry (``kafka.avro.registry``, through confluent-kafka's
``SchemaRegistryClient``: basic or bearer auth, TLS; parsed schemas cached by id) or from a local
map of id → ``.avsc`` file (``kafka.avro.schemas``, looked up first). The schemas this project
writes with ship as package data: ``streaming/resources/schemas/transaction_request.avsc`` and
``outcome.avsc``.

An Avro request is decoded into the same JSON-shaped dict a JSON request parses to (a null field
is an absent field) and validated by the same parser, so every error code stays the same. What
cannot be decoded is rejected with its own code:

``UNKNOWN_SCHEMA_ID``  the schema id is neither in the local map nor in the registry
``INVALID_AVRO``       no magic byte, a truncated header or body, or a body the schema cannot read

A registry that cannot answer (unreachable, refused credentials, 5xx) raises ``RegistryError``
(``SCHEMA_REGISTRY_ERROR``): the batch fails and is replayed; no request is rejected for it.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from confluent_kafka.schema_registry import (
    Schema as RegistrySchema,
)
from confluent_kafka.schema_registry import (
    SchemaRegistryClient,
    SchemaRegistryError,
    record_subject_name_strategy,
    topic_record_subject_name_strategy,
    topic_subject_name_strategy,
)
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import SchemaParseException, UnknownType

from streaming.core.batch import RawRequest
from streaming.core.codes import Code
from streaming.core.config import BUILTIN_SCHEMA_PREFIX, AvroConfig, KafkaConfig, RegistryConfig
from streaming.core.errors import CdcError, ConfigError, RejectedError
from streaming.core.outcomes import Outcome
from streaming.core.requests import MAX_REQUEST_BYTES, decode_json

__all__ = [
    "HEADER",
    "MAGIC",
    "OUTCOME_SCHEMA",
    "REQUEST_SCHEMA",
    "SCHEMA_NOT_FOUND",
    "AvroCodec",
    "AvroRequestDecoder",
    "ChangeDecoder",
    "LocalSchemas",
    "Registry",
    "RegistryError",
    "Schema",
    "SchemaSource",
    "builtin_schema_text",
    "codec_for",
    "connect_schema",
    "encode",
    "load_schema",
    "read_body",
    "split",
    "subject_name",
]

MAGIC = 0
HEADER = struct.Struct(">bI")
"""Magic byte, then the schema id as an unsigned 32-bit big-endian integer."""

REQUEST_SCHEMA = "transaction_request"
OUTCOME_SCHEMA = "outcome"
SCHEMA_NOT_FOUND = 40403
"""The registry's error code for an unknown schema id (any other 404 is a wrong URL)."""

Schema = Any
"""A schema parsed by ``fastavro.parse_schema``."""


class RegistryError(CdcError):
    """The schema registry could not answer (unreachable, 5xx, bad answer): the batch fails and
    is retried; the requests are not rejected for it."""

    code = Code.SCHEMA_REGISTRY_ERROR


def builtin_schema_text(name: str) -> str:
    """The text of a schema shipped with the package (``transaction_request`` or ``outcome``)."""
    file = resources.files("streaming") / "resources" / "schemas" / f"{name}.avsc"
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise ConfigError(f"no built-in Avro schema {name!r}") from e


def _parse(text: str, where: str, named: dict[str, Any] | None = None) -> Schema:
    try:
        return parse_schema(json.loads(text), named_schemas=named)
    except (ValueError, TypeError, KeyError, SchemaParseException, UnknownType) as e:
        raise ConfigError(f"{where}: not a valid Avro schema: {e}") from e


def load_schema(location: str, where: str) -> Schema:
    """A schema from a ``.avsc`` file or ``builtin:<name>``; errors name ``where`` (the key)."""
    if location.startswith(BUILTIN_SCHEMA_PREFIX):
        return _parse(builtin_schema_text(location.removeprefix(BUILTIN_SCHEMA_PREFIX)), where)
    try:
        with open(location, encoding="utf-8") as file:
            return _parse(file.read(), where)
    except OSError as e:
        raise ConfigError(f"{where}: cannot read {location}: {e}") from e


# -- the wire format -----------------------------------------------------------------------------
def encode(schema_id: int, schema: Schema, record: Mapping[str, Any], *, strict: bool) -> bytes:
    """Magic byte, schema id, Avro body. ``strict``: a field the schema lacks is an error rather
    than dropped. Raises ``ValueError`` when ``record`` does not fit ``schema``."""
    out = io.BytesIO()
    out.write(HEADER.pack(MAGIC, schema_id))
    schemaless_writer(out, schema, dict(record), strict_allow_default=strict)
    return out.getvalue()


def split(payload: bytes) -> tuple[int, bytes]:
    """(schema id, Avro body) of a wire-format message; ``INVALID_AVRO`` if it has no header."""
    if len(payload) < HEADER.size or payload[0] != MAGIC:
        first = f"byte 0x{payload[0]:02x}" if payload else "no bytes"
        raise RejectedError(
            f"not an Avro message in the Confluent wire format (magic byte 0, 4-byte schema id); "
            f"found {first}, {len(payload)} byte(s)",
            code=Code.INVALID_AVRO,
        )
    _, schema_id = HEADER.unpack_from(payload)
    return schema_id, payload[HEADER.size :]


def read_body(schema_id: int, schema: Schema, body: bytes) -> Any:
    """The value of an Avro body written with ``schema``; ``INVALID_AVRO`` if it does not read
    (truncated, corrupt, or bytes left over: the body was not written with this schema)."""
    stream = io.BytesIO(body)
    try:
        value = schemaless_reader(stream, schema, None)
    except Exception as e:  # fastavro raises EOFError, IndexError, ValueError, UnicodeError, ...
        raise RejectedError(
            f"Avro body does not decode with schema id {schema_id}: {type(e).__name__}: {e}",
            code=Code.INVALID_AVRO,
        ) from e
    if stream.tell() != len(body):
        raise RejectedError(
            f"Avro body has {len(body) - stream.tell()} byte(s) left over after a record of "
            f"schema id {schema_id}",
            code=Code.INVALID_AVRO,
        )
    return value


def _drop_nulls(value: Any) -> Any:
    """Avro has no absent field: a null field of the request or of an action is absent."""
    if not isinstance(value, dict):
        return value
    shaped = {k: v for k, v in value.items() if v is not None}
    actions = shaped.get("actions")
    if isinstance(actions, list):
        shaped["actions"] = [
            {k: v for k, v in a.items() if v is not None} if isinstance(a, dict) else a
            for a in actions
        ]
    return shaped


# -- schema sources ----------------------------------------------------------------------------
class SchemaSource(Protocol):
    def get(self, schema_id: int) -> Schema | None:
        """The schema with this id, or None if there is none."""


@dataclass
class LocalSchemas:
    """``kafka.avro.schemas``: every file read and parsed at startup."""

    schemas: dict[int, Schema]

    @classmethod
    def load(cls, files: Mapping[int, str]) -> LocalSchemas:
        return cls({i: load_schema(p, f"kafka.avro.schemas.{i}") for i, p in files.items()})

    def get(self, schema_id: int) -> Schema | None:
        return self.schemas.get(schema_id)


class Registry:
    """A Confluent-compatible schema registry through confluent-kafka's client
    (``confluent_kafka.schema_registry.SchemaRegistryClient``: basic or bearer auth, TLS,
    retries). Parsed schemas are cached by id. Messages name the registry by its URL without
    credentials and never carry a secret of the config."""

    def __init__(self, cfg: RegistryConfig, client: SchemaRegistryClient | None = None) -> None:
        self.cfg = cfg
        self._secrets = cfg.secrets()
        self.where = ",".join(_without_userinfo(url.strip()) for url in cfg.url.split(","))
        self.cache: dict[int, Schema] = {}
        if client is None:
            try:
                client = SchemaRegistryClient(cfg.client_conf())
            except (ValueError, TypeError, OSError) as e:  # ssl.SSLError is an OSError
                raise ConfigError(f"kafka.avro.registry: {self._redact(str(e))}") from e
        self.client = client

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _failure(self, what: str, error: Exception) -> RegistryError:
        if isinstance(error, SchemaRegistryError):
            status = error.http_status_code
            detail = f"HTTP {status}: {error.error_message}"
            if status in (401, 403):
                detail += (
                    " (the registry refused the credentials: check kafka.avro.registry's "
                    "basic.auth.user.info or bearer.auth.*)"
                )
        else:
            detail = f"{type(error).__name__}: {error}"
        return RegistryError(f"schema registry {self.where}: {what}: {self._redact(detail)}")

    def get(self, schema_id: int) -> Schema | None:
        if schema_id in self.cache:
            return self.cache[schema_id]
        try:
            found = self.client.get_schema(schema_id)
            referenced = self._referenced(found, {})
        except SchemaRegistryError as e:
            if e.http_status_code == 404 and e.error_code == SCHEMA_NOT_FOUND:
                return None
            raise self._failure(f"schema id {schema_id}", e) from e
        except Exception as e:  # unreachable, TLS, token endpoint: the batch fails, not requests
            raise self._failure(f"schema id {schema_id}", e) from e
        if (found.schema_type or "AVRO") != "AVRO" or found.schema_str is None:
            return None  # a Protobuf or JSON schema: no Avro message was written with it
        where = f"schema id {schema_id} of {self.where}"
        named: dict[str, Any] = {}
        for name, text in referenced.items():
            _parse(text, f"{where}, reference {name}", named)
        schema = _parse(found.schema_str, where, named)
        self.cache[schema_id] = schema
        return schema

    def _referenced(self, schema: RegistrySchema, texts: dict[str, str]) -> dict[str, str]:
        """The texts of the schemas ``schema`` references (named types registered under other
        subjects), each after those it references in turn: the order to parse them in."""
        for ref in schema.references or []:
            if ref.name is None or ref.subject is None or ref.version is None:
                continue
            if ref.name in texts:
                continue  # reached twice (a diamond): parsed once
            target = self.client.get_version(ref.subject, ref.version).schema
            if target is not None and target.schema_str is not None:
                self._referenced(target, texts)
                texts[ref.name] = target.schema_str
        return texts

    def register(self, subject: str, schema_text: str) -> int:
        """The id of ``schema_text`` under ``subject`` (registered if new; idempotent)."""
        try:
            schema_id = self.client.register_schema(subject, RegistrySchema(schema_text, "AVRO"))
        except Exception as e:
            raise self._failure(
                f"cannot register under subject {subject} (or give the schema id in kafka.avro)",
                e,
            ) from e
        self.cache.setdefault(int(schema_id), _parse(schema_text, f"subject {subject}"))
        return int(schema_id)


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def subject_name(strategy: str, topic: str, schema_text: str) -> str:
    """The subject a shipped schema is registered under, by confluent-kafka's strategies."""
    parsed = json.loads(schema_text)
    record = (
        f"{parsed['namespace']}.{parsed['name']}" if parsed.get("namespace") else parsed["name"]
    )
    context = SerializationContext(topic, MessageField.VALUE)
    strategies = {
        "topic": topic_subject_name_strategy,
        "record": record_subject_name_strategy,
        "topic_record": topic_record_subject_name_strategy,
    }
    subject = strategies[strategy](context, record)
    assert subject is not None
    return str(subject)


# -- the codec of one Kafka config -------------------------------------------------------------
@dataclass
class AvroCodec:
    """Requests and outcomes of one ``kafka`` config in the wire format."""

    source: SchemaSource
    avro: AvroConfig
    transactions_topic: str
    outcomes_topic: str
    registry: Registry | None = None
    _writers: dict[str, tuple[int, Schema]] = field(default_factory=dict)
    _envelopes: dict[int, dict[str, Any] | None] = field(default_factory=dict)
    """Schema id → the Connect schema of a Debezium envelope written with it (None: not one)."""

    @classmethod
    def create(cls, cfg: KafkaConfig) -> AvroCodec:
        avro = cfg.avro
        if avro is None:
            raise ConfigError("kafka.avro: required with format avro: give registry or schemas")
        local = LocalSchemas.load(avro.schemas)
        registry = Registry(avro.registry) if avro.registry else None
        source: SchemaSource = _Chain(local, registry) if registry else local
        return cls(source, avro, cfg.transactions_topic, cfg.outcomes_topic, registry)

    def schema(self, schema_id: int) -> Schema:
        schema = self.source.get(schema_id)
        if schema is None:
            where = "the schema registry" if self.registry else "kafka.avro.schemas"
            raise RejectedError(
                f"schema id {schema_id} is not in {where}", code=Code.UNKNOWN_SCHEMA_ID
            )
        return schema

    def _writer(self, kind: str, configured: int | None, topic: str) -> tuple[int, Schema]:
        """(id, schema) to write ``kind`` with: the configured id's schema, else the built-in
        schema registered under the subject of ``kafka.avro.registry.subject_name_strategy``
        (by default ``<topic>-value``)."""
        if kind not in self._writers:
            key = f"kafka.avro.{'request' if kind == REQUEST_SCHEMA else 'outcome'}_schema_id"
            if configured is not None:
                schema = self.source.get(configured)
                if schema is None:
                    raise ConfigError(f"{key}: schema id {configured} is unknown")
                self._writers[kind] = (configured, schema)
            elif self.registry is not None:
                text = builtin_schema_text(kind)
                subject = subject_name(self.registry.cfg.subject_name_strategy, topic, text)
                schema_id = self.registry.register(subject, text)
                self._writers[kind] = (schema_id, self.schema(schema_id))
            else:
                raise ConfigError(f"{key}: required without kafka.avro.registry")
        return self._writers[kind]

    # requests
    def decode_request(self, payload: bytes) -> Any:
        """A request message → its JSON-shaped value (for ``validate_request``)."""
        if len(payload) > MAX_REQUEST_BYTES:
            raise RejectedError(
                f"request is {len(payload)} bytes; the limit is {MAX_REQUEST_BYTES}",
                code=Code.MESSAGE_TOO_LARGE,
            )
        schema_id, body = split(payload)
        return _drop_nulls(read_body(schema_id, self.schema(schema_id), body))

    def decode_change(self, payload: bytes) -> Any:
        """A change feed's key or value (Debezium's Avro converter) → its value, as fastavro
        reads it (Avro logical types as Python values); a Debezium envelope (a record with
        ``before``, ``after`` and ``op``) in the JSON converter's shape, ``{"schema": …,
        "payload": …}``, its schema the Connect schema the Avro one was written from
        (``connect_schema``), so that Debezium's types read as they do from JSON."""
        try:
            schema_id, body = split(payload)
            schema = self.schema(schema_id)
            value = read_body(schema_id, schema, body)
        except RejectedError:
            raise
        except Exception as e:
            raise RejectedError(f"not Avro of a known schema: {e}", code=Code.INVALID_AVRO) from e
        if schema_id not in self._envelopes:
            self._envelopes[schema_id] = _envelope_schema(schema)
        connect = self._envelopes[schema_id]
        return value if connect is None else {"schema": connect, "payload": value}

    def encode_request(self, value: Mapping[str, Any]) -> bytes:
        """A JSON-shaped request → a message (``ValueError`` if it does not fit the schema)."""
        schema_id, schema = self._writer(
            REQUEST_SCHEMA, self.avro.request_schema_id, self.transactions_topic
        )
        return encode(schema_id, schema, value, strict=True)

    # outcomes
    def outcome_writer(self) -> int:
        """The schema id outcomes are written with (resolved, registered if need be, once)."""
        return self._writer(OUTCOME_SCHEMA, self.avro.outcome_schema_id, self.outcomes_topic)[0]

    def encode_outcome(self, outcome: Outcome) -> bytes:
        schema_id, schema = self._writer(
            OUTCOME_SCHEMA, self.avro.outcome_schema_id, self.outcomes_topic
        )
        record = outcome.model_dump(mode="python", by_alias=True)
        record["status"] = outcome.status.value
        return encode(schema_id, schema, record, strict=False)

    def decode_outcome(self, payload: bytes) -> Outcome:
        schema_id, body = split(payload)
        return Outcome.model_validate(read_body(schema_id, self.schema(schema_id), body))


@dataclass
class _Chain:
    """Local schemas first, then the registry."""

    local: LocalSchemas
    registry: Registry

    def get(self, schema_id: int) -> Schema | None:
        found = self.local.get(schema_id)
        return found if found is not None else self.registry.get(schema_id)


def codec_for(cfg: KafkaConfig | None) -> AvroCodec | None:
    """The Avro codec of a config with ``format: avro``; None for JSON (or no Kafka)."""
    if cfg is None or cfg.format != "avro":
        return None
    return AvroCodec.create(cfg)


@dataclass
class AvroRequestDecoder:
    """The request decoder of the sink with ``format: avro``: Kafka records are Avro; landing
    lines and DMS files stay JSON."""

    codec: AvroCodec

    def __call__(self, raw: RawRequest) -> Any:
        if raw.position.kind == "kafka":
            return self.codec.decode_request(raw.payload)
        return decode_json(raw.payload)


class ChangeDecoder:
    """A change feed's key and value decoder (``AvroCodec.decode_change``) the executors can
    carry: what crosses to them is the Kafka config; each Python worker makes its own codec
    (its own registry client and cache) at its first record."""

    def __init__(self, cfg: KafkaConfig, codec: AvroCodec | None = None) -> None:
        self.cfg = cfg
        self._codec = codec

    def __getstate__(self) -> dict[str, Any]:
        return {"cfg": self.cfg}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.cfg = state["cfg"]
        self._codec = None

    def __call__(self, payload: bytes) -> Any:
        if self._codec is None:
            self._codec = AvroCodec.create(self.cfg)
        return self._codec.decode_change(payload)


# -- Connect schemas of Debezium's Avro ----------------------------------------------------------
_CONNECT_PRIMITIVES = {
    "int": "int32",
    "long": "int64",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
    "null": "null",
}


def connect_schema(avro: Any, named: Mapping[str, Any]) -> dict[str, Any]:
    """The Connect schema (as the JSON converter writes it: ``type``, ``name``, ``parameters``,
    ``fields`` with ``field``, ``items``, ``keys``/``values``) that Confluent's AvroConverter
    wrote an Avro schema from: it keeps the Connect name and parameters as ``connect.name`` and
    ``connect.parameters`` (``io.debezium.time.MicroTimestamp`` on a ``long``, a Decimal's
    ``scale``) and an int8/int16 as ``connect.type``; an optional field is a union with null.
    ``named``: fastavro's named types (a record used twice is named the second time)."""
    if isinstance(avro, str):
        if avro in _CONNECT_PRIMITIVES:
            return {"type": _CONNECT_PRIMITIVES[avro]}
        return connect_schema(named.get(avro, "string"), named)
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        branch = connect_schema(branches[0] if len(branches) == 1 else "string", named)
        return {**branch, "optional": True}
    if not isinstance(avro, dict):
        return {"type": "string"}
    kind = avro.get("type")
    if kind == "record":
        out: dict[str, Any] = {
            "type": "struct",
            "fields": [
                {**connect_schema(f.get("type"), named), "field": f.get("name")}
                for f in avro.get("fields") or []
            ],
        }
    elif kind == "array":
        out = {"type": "array", "items": connect_schema(avro.get("items"), named)}
    elif kind == "map":
        out = {"type": "map", "keys": {"type": "string"}}
        out["values"] = connect_schema(avro.get("values"), named)
    elif kind in ("enum",):
        out = {"type": "string"}
    elif kind == "fixed":
        out = {"type": "bytes"}
    elif isinstance(kind, str | list | dict) and kind not in _CONNECT_PRIMITIVES:
        out = connect_schema(kind, named)
    else:
        out = {"type": avro.get("connect.type") or _CONNECT_PRIMITIVES.get(str(kind), "string")}
    if avro.get("connect.name"):
        out["name"] = avro["connect.name"]
    if isinstance(avro.get("connect.parameters"), dict):
        out["parameters"] = dict(avro["connect.parameters"])
    return out


def _envelope_schema(schema: Schema) -> dict[str, Any] | None:
    """``connect_schema`` of a Debezium envelope's Avro schema; None for any other record (a
    key, a BEGIN/END)."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    names = {f.get("name") for f in schema.get("fields") or []}
    if not {"before", "after", "op"} <= names:
        return None
    return connect_schema(schema, schema.get("__named_schemas") or {})
