"""Secrets of the Kafka settings are blanked out of what the job shows (core/redact.py)."""

from __future__ import annotations

from pathlib import Path

from connectors.kafka_check import describe_settings, java_refusal, kafka_secrets, refusal_in
from streaming.core.config import KafkaConfig, parse_config
from streaming.core.redact import MASK, is_secret_key, option_secrets, redact_options, scrub

JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="alice" password="p@ss \\"word\\"";'
)


def test_secret_keys_are_told_by_name() -> None:
    for key in (
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.truststore.password",
        "sasl.oauthbearer.client.secret",
        "basic.auth.user.info",
        "ssl.key.pem",
        "sasl.oauthbearer.config",
    ):
        assert is_secret_key(key), key
    for key in (
        "sasl.username",
        "sasl.mechanism",
        "security.protocol",
        "ssl.ca.location",
        "ssl.key.location",
        "sasl.oauthbearer.token.endpoint.url",
        "sasl.jaas.config",
    ):
        assert not is_secret_key(key), key


def test_redact_options_keeps_the_jaas_username_and_blanks_its_password() -> None:
    shown = redact_options(
        {
            "security.protocol": "SASL_SSL",
            "sasl.password": "hunter2",
            "sasl.jaas.config": JAAS,
        }
    )
    assert shown == {
        "security.protocol": "SASL_SSL",
        "sasl.password": MASK,
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{MASK}";',
    }
    bare = redact_options({"sasl.jaas.config": "M required user_bob=x password=s3cret;"})
    assert bare["sasl.jaas.config"] == f"M required user_bob=x password={MASK};"


def test_option_secrets_and_scrub() -> None:
    secrets = option_secrets({"sasl.password": "hunter2", "sasl.jaas.config": JAAS, "a": "b"})
    assert secrets == ["hunter2", 'p@ss \\"word\\"', 'p@ss "word"']
    text = 'failed: password="p@ss \\"word\\"" then p@ss "word" and hunter2, hunter22'
    assert scrub(text, secrets) == f'failed: password="{MASK}" then {MASK} and {MASK}, {MASK}2'
    assert scrub("nothing here", []) == "nothing here"
    assert scrub("abc", [""]) == "abc"


def test_describe_settings_names_each_clients_maps_without_secrets(tmp_path: Path) -> None:
    cfg = parse_config(
        {
            "warehouse": "w",
            "checkpoints": "c",
            "kafka": {
                "bootstrap": "b:9092",
                "options": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
                "client_options": {"sasl.username": "alice"},
            },
        },
        base=tmp_path,
        environ={
            "CDC_KAFKA__CLIENT_OPTIONS": '{sasl.password: "pw-client"}',
            "CDC_KAFKA__SPARK_OPTIONS": "{sasl.jaas.config: "
            '"org.apache.kafka.common.security.plain.PlainLoginModule required '
            'username=\\"alice\\" password=\\"pw-spark\\";"}',
        },
    )
    assert cfg.kafka is not None
    spark = describe_settings(cfg.kafka, spark=True)
    client = describe_settings(cfg.kafka, spark=False)
    assert spark == (
        "kafka.options {security.protocol: SASL_PLAINTEXT, sasl.mechanism: PLAIN}; "
        "kafka.spark_options {sasl.jaas.config: org.apache.kafka.common.security.plain."
        f'PlainLoginModule required username="alice" password="{MASK}";}}'
    )
    assert client == (
        "kafka.options {security.protocol: SASL_PLAINTEXT, sasl.mechanism: PLAIN}; "
        f"kafka.client_options {{sasl.username: alice, sasl.password: {MASK}}}"
    )
    assert sorted(kafka_secrets(cfg.kafka)) == ["pw-client", "pw-spark"]
    plain = cfg.kafka.model_copy(update={"options": {}, "client_options": {}})
    assert describe_settings(plain, spark=False) == (
        "none (kafka.options and kafka.client_options are empty: PLAINTEXT)"
    )


def test_java_refusal_is_told_from_other_errors() -> None:
    # what py4j says when Spark's Kafka source is refused (Kafka 3.9 client, Spark 4.2)
    refused = (
        "An error occurred while calling o86.javaToPython.\n"
        ": java.util.concurrent.ExecutionException: org.apache.kafka.common.errors."
        "SaslAuthenticationException: Authentication failed during authentication due to "
        "invalid credentials with SASL mechanism SCRAM-SHA-512\n\tat java.base/..."
    )
    assert java_refusal(refused) == (
        "SaslAuthenticationException: Authentication failed during authentication due to "
        "invalid credentials with SASL mechanism SCRAM-SHA-512"
    )
    assert java_refusal("x: org.apache.kafka.common.errors.TopicAuthorizationException") == (
        "TopicAuthorizationException"
    )
    timeout = (
        ": java.util.concurrent.ExecutionException: org.apache.kafka.common.errors."
        "TimeoutException: Timed out waiting for a node assignment. Call: describeTopics"
    )
    assert java_refusal(timeout) is None


def test_a_failed_querys_refusal_names_spark_s_client_without_the_secret() -> None:
    """What a query ends with when the broker refused its source mid-run (the text Spark gives,
    the JAAS line with its password inside), and any other failure."""
    cfg = KafkaConfig(
        bootstrap="b:9093",
        options={"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"},
        spark_options={
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            'required username="u" password="s3cret-pw";'
        },
    )
    failed = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: "
        "org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed "
        "during re-authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 "
        'SQLSTATE: XXKST (password="s3cret-pw")'
    )
    error = refusal_in(cfg, failed)
    assert error is not None and error.code == "KAFKA_AUTH_FAILED"
    assert error.message.startswith("the Kafka broker (b:9093) refused Spark's Kafka source")
    assert "SaslAuthenticationException: Authentication failed during re-authentication" in (
        error.message
    )
    assert "s3cret-pw" not in error.message
    assert refusal_in(cfg, "java.util.concurrent.TimeoutException: Timed out waiting") is None
