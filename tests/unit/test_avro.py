"""Avro in the Confluent wire format: round trips, the error codes, schemas, config, a registry.

The registry test talks HTTP to a minimal registry served in-process (the two endpoints the
client uses); no real Confluent registry runs on these machines.
"""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from connectors.avro import (
    AvroCodec,
    AvroRequestDecoder,
    RegistryError,
    builtin_schema_text,
    codec_for,
    load_schema,
)
from streaming.config import AvroConfig, KafkaConfig, parse_config
from streaming.core.batch import Admitted, RawRequest, Refused, SourcePosition, triage
from streaming.errors import ConfigError, RejectedError
from streaming.outcomes import ActionOutcome, ErrorInfo, Outcome, Status
from streaming.requests import Action, TransactionRequest, parse_request

AT = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)
REQUEST = {
    "transactionId": "tx-1",
    "dataset": "petstore",
    "actions": [
        {
            "operation": "UPSERT",
            "locationUri": "./data/ingest1",
            "format": "JSON",
            "arguments": {"s": "x", "n": 3, "f": 1.5, "b": True, "z": None},
            "columnMapping": {"name": "DOG_NAME"},
        }
    ],
}


def local_codec(**avro: Any) -> AvroCodec:
    settings: dict[str, Any] = {
        "schemas": {1: "builtin:transaction_request", 2: "builtin:outcome"},
        "request_schema_id": 1,
        "outcome_schema_id": 2,
        **avro,
    }
    codec = codec_for(KafkaConfig(bootstrap="unused:9092", format="avro", avro=settings))
    assert codec is not None
    return codec


def kafka_raw(payload: bytes, offset: int = 0) -> RawRequest:
    return RawRequest(SourcePosition("kafka", "t", 0, offset), payload, AT)


def test_request_round_trip_has_the_header_and_parses_like_json() -> None:
    codec = local_codec()
    payload = codec.encode_request(REQUEST)
    assert payload[0] == 0 and struct.unpack(">I", payload[1:5]) == (1,)
    value = codec.decode_request(payload)
    assert value == REQUEST  # nulls of absent fields dropped; null map values kept
    from_avro = TransactionRequest.model_validate(value)
    from_json = parse_request(json.dumps(REQUEST).encode())
    assert from_avro == from_json
    assert from_avro.content_hash() == from_json.content_hash()


def test_outcome_round_trip() -> None:
    codec = local_codec()
    outcome = Outcome(
        transaction_id="tx-1",
        dataset="petstore",
        status=Status.COMMITTED,
        actions=[ActionOutcome(index=0, operation="UPSERT", target="petstore.Dog", inserted=2)],
        table_versions={"petstore.Dog": 7},
        batch_id=3,
        source="kafka:t[0]@41",
        received_at=AT,
        committed_at=AT,
    )
    rejected = Outcome(
        transaction_id=None,
        status=Status.REJECTED,
        error=ErrorInfo(code="INVALID_AVRO", message="truncated"),
        batch_id=4,
        source="kafka:t[0]@42",
    )
    for event in (outcome, rejected):
        payload = codec.encode_outcome(event)
        assert struct.unpack(">bI", payload[:5]) == (0, 2)
        assert codec.decode_outcome(payload) == event


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"", "INVALID_AVRO"),
        (b'{"transactionId": "tx-1"}', "INVALID_AVRO"),  # JSON on an Avro topic: no magic byte
        (b"\x00\x00\x00", "INVALID_AVRO"),  # truncated header
        (b"\x00\x00\x00\x00\x63" + b"\x02", "UNKNOWN_SCHEMA_ID"),  # id 99
        (b"\x00" + b"\x00" * 1_000_001, "MESSAGE_TOO_LARGE"),
    ],
)
def test_undecodable_payloads_are_rejected_with_their_code(payload: bytes, code: str) -> None:
    with pytest.raises(RejectedError) as caught:
        local_codec().decode_request(payload)
    assert caught.value.code == code


def test_truncated_or_padded_bodies_are_invalid_avro() -> None:
    codec = local_codec()
    payload = codec.encode_request(REQUEST)
    for cut in range(5, len(payload)):  # every truncation of the body
        with pytest.raises(RejectedError) as caught:
            codec.decode_request(payload[:cut])
        assert caught.value.code == "INVALID_AVRO", cut
    with pytest.raises(RejectedError, match="left over") as padded:
        codec.decode_request(payload + b"\x00")
    assert padded.value.code == "INVALID_AVRO"


def test_avro_requests_get_the_same_codes_as_json() -> None:
    codec = local_codec()
    cases = {
        "MISSING_TRANSACTION_ID": {"dataset": "p", "actions": REQUEST["actions"]},
        "UNKNOWN_OPERATION": {**REQUEST, "actions": [{"operation": "FROB", "locationUri": "x"}]},
        "EMPTY_ACTIONS": {**REQUEST, "actions": []},
        "MISSING_ACTIONS": {"transactionId": "t", "dataset": "p"},
        "UNKNOWN_FORMAT": {**REQUEST, "actions": [{"operation": "UPSERT", "format": "CSV"}]},
    }
    raws = [kafka_raw(codec.encode_request(v), i) for i, v in enumerate(cases.values())]
    verdicts = triage(raws, {}, 0, AvroRequestDecoder(codec))
    got = [v.error.code for v in verdicts if isinstance(v, Refused)]
    assert got == list(cases)
    json_codes = []
    for value in cases.values():
        with pytest.raises(RejectedError) as caught:
            parse_request(json.dumps(value).encode())
        json_codes.append(caught.value.code)
    assert json_codes == got


def test_the_decoder_reads_kafka_as_avro_and_landing_lines_as_json() -> None:
    codec = local_codec()
    decoder = AvroRequestDecoder(codec)
    landing = RawRequest(SourcePosition("landing", "/l/a.jsonl", offset=1), b"{nope", AT)
    verdicts = triage(
        [kafka_raw(codec.encode_request(REQUEST)), kafka_raw(b"\x00\x00", 1), landing],
        {},
        0,
        decoder,
    )
    assert isinstance(verdicts[0], Refused) and verdicts[0].error.code == "INVALID_JSON"
    assert isinstance(verdicts[1], Admitted) and verdicts[1].request.transaction_id == "tx-1"
    assert isinstance(verdicts[2], Refused) and verdicts[2].error.code == "INVALID_AVRO"


def test_publishing_refuses_what_the_request_schema_cannot_carry() -> None:
    codec = local_codec()
    with pytest.raises(ValueError, match="more fields"):
        codec.encode_request({**REQUEST, "comment": "not in the schema"})
    with pytest.raises(ValueError):
        codec.encode_request({**REQUEST, "actions": [{"locationUri": "./x"}]})  # no operation


def test_shipped_schemas_name_every_field_of_the_models() -> None:
    request = json.loads(builtin_schema_text("transaction_request"))
    assert [f["name"] for f in request["fields"]] == ["transactionId", "dataset", "actions"]
    action = request["fields"][2]["type"][1]["items"]
    aliases = [f.alias or name for name, f in Action.model_fields.items()]
    assert [f["name"] for f in action["fields"]] == aliases
    outcome = json.loads(builtin_schema_text("outcome"))
    aliases = [f.alias or name for name, f in Outcome.model_fields.items()]
    assert [f["name"] for f in outcome["fields"]] == aliases
    counts = outcome["fields"][4]["type"]["items"]["fields"]
    assert [f["name"] for f in counts] == list(ActionOutcome.model_fields)


# -- configuration ---------------------------------------------------------------------------------
def config(kafka: dict[str, Any], base: Path) -> None:
    parse_config({"warehouse": "w", "checkpoints": "c", "kafka": kafka}, base=base, environ={})


@pytest.mark.parametrize(
    ("avro", "named"),
    [
        (None, "kafka.avro: required with format avro"),
        ({}, "kafka.avro: required with format avro"),
        ({"schemas": {1: "a.avsc"}}, "kafka.avro: outcome_schema_id is required"),
        ({"schemas": {1: "a.avsc"}, "outcome_schema_id": 2}, "kafka.avro.outcome_schema_id"),
        ({"schemaz": {}}, "kafka.avro.schemaz: unknown key"),
    ],
)
def test_avro_config_errors_name_the_key(
    tmp_path: Path, avro: dict[str, Any] | None, named: str
) -> None:
    kafka: dict[str, Any] = {"bootstrap": "b:9092", "format": "avro"}
    if avro is not None:
        kafka["avro"] = avro
    with pytest.raises(ConfigError) as caught:
        config(kafka, tmp_path)
    assert named in str(caught.value)


def test_schema_files_resolve_against_the_config_folder_and_fail_naming_the_id(
    tmp_path: Path,
) -> None:
    (tmp_path / "req.avsc").write_text(builtin_schema_text("transaction_request"))
    cfg = parse_config(
        {
            "warehouse": "w",
            "checkpoints": "c",
            "kafka": {
                "bootstrap": "b:9092",
                "format": "avro",
                "avro": {"schemas": {7: "req.avsc", 8: "builtin:outcome"}, "outcome_schema_id": 8},
            },
        },
        base=tmp_path,
        environ={},
    )
    assert cfg.kafka is not None and cfg.kafka.avro is not None
    assert cfg.kafka.avro.schemas == {7: str(tmp_path / "req.avsc"), 8: "builtin:outcome"}
    assert codec_for(cfg.kafka) is not None
    with pytest.raises(ConfigError, match=r"kafka\.avro\.schemas\.3: cannot read"):
        load_schema(str(tmp_path / "missing.avsc"), "kafka.avro.schemas.3")
    (tmp_path / "bad.avsc").write_text('{"type": "record"}')
    with pytest.raises(ConfigError, match=r"kafka\.avro\.schemas\.4: not a valid Avro schema"):
        load_schema(str(tmp_path / "bad.avsc"), "kafka.avro.schemas.4")


def test_writing_without_a_schema_id_or_registry_fails_naming_the_key() -> None:
    codec = local_codec(request_schema_id=None)
    with pytest.raises(ConfigError, match=r"kafka\.avro\.request_schema_id"):
        codec.encode_request(REQUEST)


# -- a registry over HTTP ------------------------------------------------------------------------
class _Registry(BaseHTTPRequestHandler):
    schemas: ClassVar[dict[int, str]] = {}
    subjects: ClassVar[dict[str, int]] = {}
    calls: ClassVar[list[str]] = []

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.calls.append(f"GET {self.path}")
        schema_id = int(self.path.rsplit("/", 1)[1])
        if schema_id in self.schemas:
            self._answer(200, {"schema": self.schemas[schema_id]})
        else:
            self._answer(404, {"error_code": 40403, "message": "Schema not found"})

    def do_POST(self) -> None:
        self.calls.append(f"POST {self.path}")
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        subject = self.path.split("/")[2]
        if subject not in self.subjects:
            self.subjects[subject] = 100 + len(self.schemas)
            self.schemas[self.subjects[subject]] = body["schema"]
        self._answer(200, {"id": self.subjects[subject]})

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def registry() -> Iterator[str]:
    _Registry.schemas, _Registry.subjects, _Registry.calls = {}, {}, []
    server = HTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_registry_registers_the_writers_and_caches_schemas_by_id(registry: str) -> None:
    kafka = KafkaConfig(
        bootstrap="unused:9092",
        format="avro",
        transactions_topic="tx",
        outcomes_topic="out",
        avro=AvroConfig(registry_url=registry),
    )
    writer = codec_for(kafka)
    assert writer is not None
    payload = writer.encode_request(REQUEST)
    assert struct.unpack(">I", payload[1:5]) == (_Registry.subjects["tx-value"],)
    assert writer.outcome_writer() == _Registry.subjects["out-value"]

    reader = AvroCodec.create(kafka)  # a fresh process: schemas fetched by id, then cached
    assert reader.decode_request(payload) == REQUEST
    assert reader.decode_request(payload) == REQUEST
    fetched = [c for c in _Registry.calls if c.startswith("GET")]
    assert fetched == [f"GET /schemas/ids/{_Registry.subjects['tx-value']}"]
    with pytest.raises(RejectedError) as caught:
        reader.decode_request(b"\x00\x00\x00\x03\xe7\x00")  # id 999: the registry says 404
    assert caught.value.code == "UNKNOWN_SCHEMA_ID"


def test_an_unreachable_registry_fails_the_batch_rather_than_rejecting() -> None:
    codec = codec_for(
        KafkaConfig(bootstrap="b:9092", format="avro", avro={"registry_url": "http://127.0.0.1:9"})
    )
    assert codec is not None
    with pytest.raises(RegistryError):
        codec.decode_request(b"\x00\x00\x00\x00\x05\x00")


def test_the_readme_avro_example_is_a_valid_config(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## Avro messages") :]
    example = section[section.index("```yaml\n") + 8 : section.index("```\n", 8)]
    data = yaml.safe_load(example)
    cfg = parse_config({"warehouse": "w", "checkpoints": "c", **data}, base=tmp_path, environ={})
    assert cfg.kafka is not None and cfg.kafka.avro is not None
    assert cfg.kafka.format == "avro" and cfg.kafka.avro.outcome_schema_id == 2
    local = codec_for(
        cfg.kafka.model_copy(
            update={"avro": cfg.kafka.avro.model_copy(update={"registry_url": None})}
        )
    )
    assert local is not None and local.outcome_writer() == 2
