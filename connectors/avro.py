"""Avro messages in the Confluent wire format (``kafka.format: avro``).

A message is the magic byte 0, the writer schema's id (4 bytes, big-endian), then the Avro binary
body. Writer schemas come from a schema registry (``GET {registry_url}/schemas/ids/{id}``, cached)
or from a local map of id → ``.avsc`` file (``kafka.avro.schemas``). The schemas this project
writes with ship as package data: ``streaming/resources/schemas/transaction_request.avsc`` and
``outcome.avsc``.

An Avro request is decoded into the same JSON-shaped dict a JSON request parses to (a null field
is an absent field) and validated by the same parser, so every error code stays the same. What
cannot be decoded is rejected with its own code:

``UNKNOWN_SCHEMA_ID``  the schema id is neither in the local map nor in the registry
``INVALID_AVRO``       no magic byte, a truncated header or body, or a body the schema cannot read
"""

from __future__ import annotations

import io
import json
import struct
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Protocol

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import SchemaParseException, UnknownType

from streaming.config import BUILTIN_SCHEMA_PREFIX, AvroConfig, KafkaConfig
from streaming.core.batch import RawRequest
from streaming.errors import CdcError, ConfigError, RejectedError
from streaming.outcomes import Outcome
from streaming.requests import MAX_REQUEST_BYTES, decode_json

MAGIC = 0
HEADER = struct.Struct(">bI")
"""Magic byte, then the schema id as an unsigned 32-bit big-endian integer."""

REQUEST_SCHEMA = "transaction_request"
OUTCOME_SCHEMA = "outcome"
REGISTRY_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"

Schema = Any
"""A schema parsed by ``fastavro.parse_schema``."""


class RegistryError(CdcError):
    """The schema registry could not answer (unreachable, 5xx, bad answer): the batch fails and
    is retried; the requests are not rejected for it."""

    code = "SCHEMA_REGISTRY_ERROR"


def builtin_schema_text(name: str) -> str:
    """The text of a schema shipped with the package (``transaction_request`` or ``outcome``)."""
    file = resources.files("streaming") / "resources" / "schemas" / f"{name}.avsc"
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise ConfigError(f"no built-in Avro schema {name!r}") from e


def _parse(text: str, where: str) -> Schema:
    try:
        return parse_schema(json.loads(text))
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
            code="INVALID_AVRO",
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
            code="INVALID_AVRO",
        ) from e
    if stream.tell() != len(body):
        raise RejectedError(
            f"Avro body has {len(body) - stream.tell()} byte(s) left over after a record of "
            f"schema id {schema_id}",
            code="INVALID_AVRO",
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


@dataclass
class Registry:
    """A Confluent-compatible schema registry over HTTP (urllib); schemas cached by id."""

    url: str
    timeout: float = 10.0
    cache: dict[int, Schema] = field(default_factory=dict)

    def _call(self, path: str, body: Mapping[str, Any] | None = None) -> tuple[int, Any]:
        data = json.dumps(body).encode("utf-8") if body is not None else None
        request = urllib.request.Request(
            self.url.rstrip("/") + path,
            data=data,
            method="POST" if data is not None else "GET",
            headers={"Accept": REGISTRY_CONTENT_TYPE, "Content-Type": REGISTRY_CONTENT_TYPE},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return int(response.status), json.loads(response.read() or b"null")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return 404, None
            raise RegistryError(f"schema registry {self.url}{path}: HTTP {e.code}") from e
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise RegistryError(f"schema registry {self.url}{path}: {e}") from e

    def get(self, schema_id: int) -> Schema | None:
        if schema_id in self.cache:
            return self.cache[schema_id]
        status, answer = self._call(f"/schemas/ids/{schema_id}")
        if status == 404:
            return None
        if not isinstance(answer, dict) or not isinstance(answer.get("schema"), str):
            raise RegistryError(f"schema registry {self.url}: unexpected answer for id {schema_id}")
        if answer.get("schemaType", "AVRO") != "AVRO":
            return None  # a Protobuf or JSON schema: no Avro message was written with it
        schema = _parse(answer["schema"], f"schema id {schema_id} of {self.url}")
        self.cache[schema_id] = schema
        return schema

    def register(self, subject: str, schema_text: str) -> int:
        """The id of ``schema_text`` under ``subject`` (registered if new; idempotent)."""
        quoted = urllib.parse.quote(subject, safe="")
        status, answer = self._call(f"/subjects/{quoted}/versions", {"schema": schema_text})
        if status == 404 or not isinstance(answer, dict) or not isinstance(answer.get("id"), int):
            raise RegistryError(f"schema registry {self.url}: cannot register under {subject}")
        schema_id = int(answer["id"])
        self.cache.setdefault(schema_id, _parse(schema_text, f"subject {subject}"))
        return schema_id


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

    @classmethod
    def create(cls, cfg: KafkaConfig) -> AvroCodec:
        avro = cfg.avro
        if avro is None:
            raise ConfigError("kafka.avro: required with format avro: give registry_url or schemas")
        local = LocalSchemas.load(avro.schemas)
        registry = Registry(avro.registry_url) if avro.registry_url else None
        source: SchemaSource = _Chain(local, registry) if registry else local
        return cls(source, avro, cfg.transactions_topic, cfg.outcomes_topic, registry)

    def schema(self, schema_id: int) -> Schema:
        schema = self.source.get(schema_id)
        if schema is None:
            where = "the schema registry" if self.registry else "kafka.avro.schemas"
            raise RejectedError(
                f"schema id {schema_id} is not in {where}", code="UNKNOWN_SCHEMA_ID"
            )
        return schema

    def _writer(self, kind: str, configured: int | None, topic: str) -> tuple[int, Schema]:
        """(id, schema) to write ``kind`` with: the configured id's schema, else the built-in
        schema registered under ``<topic>-value`` (the registry's default subject name)."""
        if kind not in self._writers:
            key = f"kafka.avro.{'request' if kind == REQUEST_SCHEMA else 'outcome'}_schema_id"
            if configured is not None:
                schema = self.source.get(configured)
                if schema is None:
                    raise ConfigError(f"{key}: schema id {configured} is unknown")
                self._writers[kind] = (configured, schema)
            elif self.registry is not None:
                text = builtin_schema_text(kind)
                schema_id = self.registry.register(f"{topic}-value", text)
                self._writers[kind] = (schema_id, self.schema(schema_id))
            else:
                raise ConfigError(f"{key}: required without kafka.avro.registry_url")
        return self._writers[kind]

    # requests
    def decode_request(self, payload: bytes) -> Any:
        """A request message → its JSON-shaped value (for ``validate_request``)."""
        if len(payload) > MAX_REQUEST_BYTES:
            raise RejectedError(
                f"request is {len(payload)} bytes; the limit is {MAX_REQUEST_BYTES}",
                code="MESSAGE_TOO_LARGE",
            )
        schema_id, body = split(payload)
        return _drop_nulls(read_body(schema_id, self.schema(schema_id), body))

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
