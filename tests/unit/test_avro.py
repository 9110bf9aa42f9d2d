"""Avro in the Confluent wire format: round trips, the error codes, schemas, config, a registry.

The registry tests run confluent-kafka's real ``SchemaRegistryClient`` against the small registry
of ``tests/fake_registry.py`` on 127.0.0.1 (basic or bearer auth, HTTP or HTTPS): no
Confluent-compatible registry server installs from PyPI or Maven Central.
"""

from __future__ import annotations

import json
import struct
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastavro import parse_schema

from connectors.avro import (
    AvroCodec,
    AvroRequestDecoder,
    RegistryError,
    builtin_schema_text,
    codec_for,
    encode,
    load_schema,
)
from streaming.core.batch import Admitted, RawRequest, Refused, SourcePosition, triage
from streaming.core.config import AvroConfig, KafkaConfig, parse_config
from streaming.core.errors import ConfigError, RejectedError
from streaming.core.outcomes import ActionOutcome, ErrorInfo, Outcome, Status
from streaming.core.requests import Action, TransactionRequest, parse_request
from tests import fake_registry
from tests.fake_registry import serve

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
    cases: dict[str, dict[str, Any]] = {
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


# -- a registry through confluent-kafka's client ---------------------------------------------------
USER, SECRET = "cdc-app", "s3cr3t-Pa55"


def registry_kafka(url: str, **registry: Any) -> KafkaConfig:
    return KafkaConfig(
        bootstrap="unused:9092",
        format="avro",
        transactions_topic="tx",
        outcomes_topic="out",
        avro=AvroConfig.model_validate({"registry": {"url": url, "max.retries": 0, **registry}}),
    )


def test_registry_with_basic_auth_registers_the_writers_and_caches_schemas_by_id() -> None:
    with serve(fake_registry.Registry(user=USER, password=SECRET)) as fake:
        kafka = registry_kafka(fake.url, **{"basic.auth.user.info": f"{USER}:{SECRET}"})
        writer = codec_for(kafka)
        assert writer is not None
        payload = writer.encode_request(REQUEST)
        request_id = fake.subjects["tx-value"][0]
        assert struct.unpack(">I", payload[1:5]) == (request_id,)
        assert writer.outcome_writer() == fake.subjects["out-value"][0]

        reader = AvroCodec.create(kafka)  # a fresh process: schemas fetched by id, then cached
        assert reader.decode_request(payload) == REQUEST
        assert reader.decode_request(payload) == REQUEST
        fetched = [path for method, path, _ in fake.calls if method == "GET"]
        assert fetched == [f"/schemas/ids/{request_id}"]
        with pytest.raises(RejectedError) as caught:
            reader.decode_request(b"\x00\x00\x00\x03\xe7\x00")  # id 999: the registry says 404
        assert caught.value.code == "UNKNOWN_SCHEMA_ID"
        assert all(status != 401 for *_, status in fake.calls)


def test_wrong_credentials_fail_clearly_without_the_secret() -> None:
    with serve(fake_registry.Registry(user=USER, password=SECRET)) as fake:
        for settings in ({"basic.auth.user.info": f"{USER}:wrong-{SECRET}"}, {}):
            codec = codec_for(registry_kafka(fake.url, **settings))
            assert codec is not None
            with pytest.raises(RegistryError) as caught:  # the batch fails, nothing is rejected
                codec.decode_request(b"\x00\x00\x00\x00\x05\x00")
            message = caught.value.message
            assert "HTTP 401" in message and "refused the credentials" in message
            assert "basic.auth.user.info" in message and SECRET not in message
            with pytest.raises(RegistryError, match="cannot register under subject out-value"):
                codec.outcome_writer()
        assert {status for *_, status in fake.calls} == {401}


def test_credentials_in_the_url_work_and_are_never_shown() -> None:
    with serve(fake_registry.Registry(user=USER, password=SECRET)) as fake:
        good = codec_for(registry_kafka(fake.url.replace("://", f"://{USER}:{SECRET}@")))
        assert good is not None and good.registry is not None
        assert good.outcome_writer() == fake.subjects["out-value"][0]
        assert good.registry.where == fake.url
        wrong = fake.url.replace("://", f"://{USER}:not-{SECRET}@")
        bad = codec_for(registry_kafka(wrong))
        assert bad is not None
        with pytest.raises(RegistryError) as caught:
            bad.outcome_writer()
        assert "HTTP 401" in caught.value.message and f"not-{SECRET}" not in caught.value.message


def test_a_bearer_token_is_sent_with_its_logical_cluster() -> None:
    token = "eyJ-test-token"
    with serve(fake_registry.Registry(token=token, cluster="lsrc-123")) as fake:
        settings = {
            "bearer.auth.credentials.source": "STATIC_TOKEN",
            "bearer.auth.token": token,
            "bearer.auth.logical.cluster": "lsrc-123",
        }
        codec = codec_for(registry_kafka(fake.url, **settings))
        assert codec is not None
        assert codec.outcome_writer() == fake.subjects["out-value"][0]
        stale = codec_for(registry_kafka(fake.url, **{**settings, "bearer.auth.token": "old"}))
        assert stale is not None
        with pytest.raises(RegistryError, match="HTTP 401") as caught:
            stale.outcome_writer()
        assert "old" not in caught.value.message.replace("bold", "")


def test_a_tls_registry_is_trusted_through_ssl_ca_location(tmp_path: Path) -> None:
    cert, key = fake_registry.make_certificate(tmp_path)
    user_info = {"basic.auth.user.info": f"{USER}:{SECRET}"}
    with serve(fake_registry.Registry(user=USER, password=SECRET), tls=(cert, key)) as fake:
        assert fake.url.startswith("https://")
        untrusted = codec_for(registry_kafka(fake.url, **user_info))
        assert untrusted is not None
        with pytest.raises(RegistryError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify"):
            untrusted.outcome_writer()
        trusted = codec_for(registry_kafka(fake.url, **user_info, **{"ssl.ca.location": str(cert)}))
        assert trusted is not None
        assert trusted.outcome_writer() == fake.subjects["out-value"][0]


def test_an_unreachable_registry_fails_the_batch_rather_than_rejecting() -> None:
    codec = codec_for(registry_kafka("http://127.0.0.1:9"))
    assert codec is not None
    with pytest.raises(RegistryError, match=r"http://127\.0\.0\.1:9: schema id 5: ConnectError"):
        codec.decode_request(b"\x00\x00\x00\x00\x05\x00")


def test_a_url_that_is_not_a_registry_fails_rather_than_rejecting_every_id() -> None:
    with serve() as fake:  # any 404 but the registry's "schema not found" (40403)
        codec = codec_for(registry_kafka(fake.url + "/not-the-api"))
        assert codec is not None
        with pytest.raises(RegistryError, match="HTTP 404"):
            codec.decode_request(b"\x00\x00\x00\x00\x05\x00")


@pytest.mark.parametrize(
    ("strategy", "request_subject", "outcome_subject"),
    [
        ("topic", "tx-value", "out-value"),
        ("record", "cdc.TransactionRequest", "cdc.Outcome"),
        ("topic_record", "tx-cdc.TransactionRequest", "out-cdc.Outcome"),
    ],
)
def test_shipped_schemas_are_registered_by_the_subject_name_strategy(
    strategy: str, request_subject: str, outcome_subject: str
) -> None:
    with serve() as fake:
        codec = codec_for(registry_kafka(fake.url, subject_name_strategy=strategy))
        assert codec is not None
        codec.encode_request(REQUEST)
        codec.outcome_writer()
        assert sorted(fake.subjects) == sorted([request_subject, outcome_subject])


def test_schema_references_are_resolved_through_the_registry() -> None:
    inner = {
        "type": "record",
        "name": "Inner",
        "namespace": "t",
        "fields": [{"name": "n", "type": "long"}],
    }
    outer = {
        "type": "record",
        "name": "Outer",
        "namespace": "t",
        "fields": [
            {"name": "transactionId", "type": "string"},
            {"name": "inner", "type": "t.Inner"},
        ],
    }
    with serve() as fake:
        fake.add("inner-value", {"schema": json.dumps(inner)})
        reference = {"name": "t.Inner", "subject": "inner-value", "version": 1}
        outer_id = fake.add("outer-value", {"schema": json.dumps(outer), "references": [reference]})
        named: dict[str, Any] = {}
        parse_schema(inner, named_schemas=named)
        writer = parse_schema(outer, named_schemas=named)
        payload = encode(
            outer_id, writer, {"transactionId": "tx-r", "inner": {"n": 7}}, strict=True
        )
        codec = codec_for(registry_kafka(fake.url))
        assert codec is not None
        assert codec.decode_request(payload) == {"transactionId": "tx-r", "inner": {"n": 7}}


# -- the registry's configuration ------------------------------------------------------------
def test_registry_url_is_now_a_section(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"kafka\.avro: .*registry_url is now registry\.url"):
        config(
            {"bootstrap": "b:9092", "format": "avro", "avro": {"registry_url": "http://r"}},
            tmp_path,
        )


@pytest.mark.parametrize(
    ("registry", "named"),
    [
        ({"url": "registry:8081"}, "kafka.avro.registry.url: expected http:// or https://"),
        ({"url": "http://r", "basic.auth.user.info": "no-colon"}, "user:password"),
        (
            {
                "url": "http://r",
                "basic.auth.user.info": "u:p",
                "bearer.auth.credentials.source": "STATIC_TOKEN",
            },
            "not both",
        ),
        (
            {
                "url": "http://r",
                "bearer.auth.credentials.source": "STATIC_TOKEN",
                "bearer.auth.token": "t",
            },
            "needs bearer.auth.logical.cluster",
        ),
        ({"url": "http://r", "ssl.key.location": "k.pem"}, "needs ssl.certificate.location"),
        (
            {"url": "http://r", "basic.auth.user": "u"},
            "kafka.avro.registry.basic.auth.user: unknown key",
        ),
    ],
)
def test_registry_config_errors_name_the_key(
    tmp_path: Path, registry: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        config({"bootstrap": "b:9092", "format": "avro", "avro": {"registry": registry}}, tmp_path)
    assert named in str(caught.value)
    assert "u:p" not in str(caught.value)


def test_registry_secrets_come_from_the_environment_and_are_never_printed(tmp_path: Path) -> None:
    data = {
        "warehouse": "w",
        "checkpoints": "c",
        "kafka": {
            "bootstrap": "b:9092",
            "format": "avro",
            "avro": {
                "registry": {
                    "url": "https://registry.example:8081",
                    "basic.auth.user.info": "file-user:file-secret",
                    "ssl.ca.location": "certs/ca.pem",
                }
            },
        },
    }
    environ = {"CDC_KAFKA__AVRO__REGISTRY__BASIC_AUTH_USER_INFO": f"{USER}:{SECRET}"}
    cfg = parse_config(data, base=tmp_path, environ=environ)
    assert cfg.kafka is not None and cfg.kafka.avro is not None
    registry = cfg.kafka.avro.registry
    assert registry is not None
    conf = registry.client_conf()
    assert conf["basic.auth.user.info"] == f"{USER}:{SECRET}"  # the environment wins
    assert conf["ssl.ca.location"] == str(tmp_path / "certs" / "ca.pem")
    assert conf["url"] == "https://registry.example:8081" and conf["max.retries"] == 3
    for shown in (
        repr(cfg),
        str(cfg),
        cfg.model_dump_json(),
        json.dumps(cfg.model_dump(mode="json")),
    ):
        assert SECRET not in shown and "file-secret" not in shown


def test_the_interface_avro_example_is_a_valid_config(tmp_path: Path) -> None:
    interface = Path(__file__).resolve().parents[2] / "docs" / "interface.md"
    text = interface.read_text(encoding="utf-8")
    section = text[text.index("## Avro messages") :]
    example = section[section.index("```yaml\n") + 8 : section.index("```\n", 8)]
    data = yaml.safe_load(example)
    environ = {"CDC_KAFKA__AVRO__REGISTRY__BASIC_AUTH_USER_INFO": f"{USER}:{SECRET}"}
    cfg = parse_config(
        {"warehouse": "w", "checkpoints": "c", **data}, base=tmp_path, environ=environ
    )
    assert cfg.kafka is not None and cfg.kafka.avro is not None
    assert cfg.kafka.format == "avro" and cfg.kafka.avro.outcome_schema_id == 2
    assert cfg.kafka.avro.registry is not None
    assert cfg.kafka.avro.registry.client_conf()["basic.auth.user.info"] == f"{USER}:{SECRET}"
    local = codec_for(
        cfg.kafka.model_copy(update={"avro": cfg.kafka.avro.model_copy(update={"registry": None})})
    )
    assert local is not None and local.outcome_writer() == 2
