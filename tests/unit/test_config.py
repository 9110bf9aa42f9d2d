"""cdc.yaml: validation with errors naming the key, CDC_* overrides, path resolution."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

from streaming.core.config import load_config
from streaming.core.errors import ConfigError

DESIGN_EXAMPLE = """\
warehouse: ./warehouse
checkpoints: ./checkpoints
datasets: {petstore: datasets/petstore.yaml}
landing: {transactions: ./landing/transactions, dms: ./landing/dms}
kafka:
  bootstrap: 127.0.0.1:9092
  transactions_topic: cdc.transactions
  outcomes_topic: cdc.outcomes
  format: json
allowed_locations: [./data]
trigger: {interval: 5 seconds}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cdc.yaml"
    path.write_text(text)
    return path


def test_design_example_loads_with_paths_resolved_against_the_config_folder(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, DESIGN_EXAMPLE), environ={})
    assert cfg.warehouse == str(tmp_path / "warehouse")
    assert cfg.datasets == {"petstore": str(tmp_path / "datasets" / "petstore.yaml")}
    assert cfg.landing.dms == str(tmp_path / "landing" / "dms")
    assert cfg.allowed_locations == [str(tmp_path / "data")]
    assert cfg.kafka is not None and cfg.kafka.bootstrap == "127.0.0.1:9092"
    assert cfg.base_dir == str(tmp_path)


def test_uris_are_kept_as_they_are(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "warehouse: s3a://bucket/wh\ncheckpoints: ./c\n"), environ={})
    assert cfg.warehouse == "s3a://bucket/wh"


def test_environment_overrides_nested_keys(tmp_path: Path) -> None:
    env = {"CDC_KAFKA__BOOTSTRAP": "broker:29092", "CDC_TRIGGER__INTERVAL": "30 seconds"}
    cfg = load_config(write(tmp_path, DESIGN_EXAMPLE), environ=env)
    assert cfg.kafka is not None and cfg.kafka.bootstrap == "broker:29092"
    assert cfg.trigger.interval == "30 seconds"


@pytest.mark.parametrize(
    ("text", "env", "named"),
    [
        (DESIGN_EXAMPLE + "warehous: ./x\n", {}, "warehous: unknown key"),
        (DESIGN_EXAMPLE.replace("  format: json", "  format: xml"), {}, "kafka.format"),
        ("checkpoints: ./c\n", {}, "warehouse: required key is missing"),
        (DESIGN_EXAMPLE.replace("5 seconds", "soon"), {}, "trigger.interval"),
        (DESIGN_EXAMPLE, {"CDC_KAFKA__BOOTSTRAPP": "x"}, "kafka.bootstrapp: unknown key"),
    ],
)
def test_wrong_config_fails_naming_the_key(
    tmp_path: Path, text: str, env: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), environ=env)
    assert named in str(caught.value)


def test_missing_file_and_bad_yaml_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml", environ={})
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "warehouse: [\n"), environ={})


KAFKA_SECURITY = """\
warehouse: ./warehouse
checkpoints: ./checkpoints
kafka:
  bootstrap: 127.0.0.1:1
  options: {security.protocol: SASL_SSL, sasl.mechanism: SCRAM-SHA-512}
  spark_options:
    sasl.jaas.config: org.apache.kafka.common.security.scram.ScramLoginModule required;
    ssl.truststore.location: /etc/cdc/truststore.jks
  client_options: {sasl.username: cdc, sasl.password: secret, ssl.ca.location: /etc/cdc/ca.pem}
"""


def test_kafka_options_are_split_between_the_two_clients(tmp_path: Path) -> None:
    """Spark's Java client gets options + spark_options, confluent-kafka options +
    client_options: a Java-only key never reaches librdkafka, which would refuse it."""
    cfg = load_config(write(tmp_path, KAFKA_SECURITY), environ={})
    assert cfg.kafka is not None
    assert cfg.kafka.spark_client_options() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "ssl.truststore.location": "/etc/cdc/truststore.jks",
    }
    client = cfg.kafka.client_options_for(acks="all")
    assert client == {
        "bootstrap.servers": "127.0.0.1:1",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "cdc",
        "sasl.password": "secret",
        "ssl.ca.location": "/etc/cdc/ca.pem",
        "acks": "all",
    }
    # librdkafka itself accepts the configuration: it checks every key when a client is made
    # (all but the CA file, which does not exist here).
    Producer({k: v for k, v in client.items() if k != "ssl.ca.location"}).flush(0)


@pytest.mark.parametrize(
    ("key", "where"),
    [("sasl.jaas.config", "options"), ("ssl.truststore.location", "client_options")],
)
def test_java_only_kafka_keys_outside_spark_options_fail_naming_the_key(
    tmp_path: Path, key: str, where: str
) -> None:
    text = (
        f"warehouse: ./w\ncheckpoints: ./c\nkafka:\n  bootstrap: b:9092\n  {where}: {{{key}: x}}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), environ={})
    message = str(caught.value)
    assert f"kafka.{where}" in message and key in message and "kafka.spark_options" in message
    with pytest.raises(KafkaException, match="not supported"):  # what librdkafka would say
        Producer({"bootstrap.servers": "b:9092", key: "x"})


def test_kafka_secrets_come_from_the_environment_merged_into_the_file(tmp_path: Path) -> None:
    """docs/deploy.md: CDC_KAFKA__SPARK_OPTIONS / CDC_KAFKA__CLIENT_OPTIONS add keys to the
    file's maps (the value is YAML; the shell keeps the backslashes of the JAAS line)."""
    jaas = r'{sasl.jaas.config: "ScramLoginModule required username=\"cdc\" password=\"pw\";"}'
    env = {"CDC_KAFKA__SPARK_OPTIONS": jaas, "CDC_KAFKA__CLIENT_OPTIONS": '{sasl.password: "pw"}'}
    cfg = load_config(write(tmp_path, KAFKA_SECURITY), environ=env)
    assert cfg.kafka is not None
    spark = cfg.kafka.spark_client_options()
    assert spark["sasl.jaas.config"] == 'ScramLoginModule required username="cdc" password="pw";'
    assert spark["ssl.truststore.location"] == "/etc/cdc/truststore.jks"  # kept from the file
    assert cfg.kafka.client_options_for()["sasl.password"] == "pw"
    assert cfg.kafka.client_options_for()["sasl.username"] == "cdc"
