"""Kafka with authentication: a real broker with a SASL_PLAINTEXT listener and SCRAM users
(``LocalKafkaBroker(scram_users=...)``), configured the way docs/deploy.md §7 tells users —
``security.protocol`` and ``sasl.mechanism`` in ``kafka.options``, ``sasl.username`` in
``kafka.client_options``, and the secrets from the environment (``CDC_KAFKA__CLIENT_OPTIONS``
with ``sasl.password`` for confluent-kafka, ``CDC_KAFKA__SPARK_OPTIONS`` with
``sasl.jaas.config`` for Spark's Java client).

With the right credentials ``cdc publish``, ``cdc run --once`` (the Kafka source reads the
request, the outcome producer writes the event) and ``cdc results`` work. With a wrong password
for either client each of them stops before anything is sent or consumed, with
``KAFKA_AUTH_FAILED`` naming the client's settings; the same input is applied once the password
is right. The passwords appear in no output, log line or outcome event.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import deltalake
import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # not in its __all__
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from connectors.kafka_check import KafkaAuthError
from connectors.kafka_io import produce
from streaming.cli.main import main
from streaming.core.config import KafkaConfig
from streaming.core.layout import Layout
from streaming.core.outcomes import Outcome, Status
from tests.support import request, upsert
from tests.support.cdc import cdc_env, kill_group, run_cdc, start_cdc, wait_until
from tests.support.datasets import DOG
from tests.support.kafka import end_offsets, read_values
from tests.support.kafka_broker import LocalKafkaBroker

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

USER = "cdc-alice"
REVOKED = "cdc-bob"  # the user whose credentials the revocation test deletes
PASSWORD = f"sasl-right-{uuid.uuid4().hex[:12]}"
WRONG = f"sasl-wrong-{uuid.uuid4().hex[:12]}"
MECHANISM = "SCRAM-SHA-512"  # the broker has the user for SCRAM-SHA-256 and -512
TRANSACTIONS, OUTCOMES = "sasl.transactions", "sasl.outcomes"
REAUTH_MS = 3000
"""The broker asks a connection to authenticate again after this long (KIP-368's
``connections.max.reauth.ms``): a connection opened before a revocation then fails too."""


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaBroker]:
    broker = LocalKafkaBroker(
        tmp_path_factory.mktemp("kafka-sasl"),
        scram_users={USER: PASSWORD, REVOKED: PASSWORD},
        properties={"connections.max.reauth.ms": str(REAUTH_MS)},
    )
    broker.start()
    try:
        broker.create_topics([TRANSACTIONS, OUTCOMES])  # over PLAINTEXT: the test's own access
        yield broker
    finally:
        broker.stop()


def secrets_env(*, spark: str, client: str, user: str = USER) -> dict[str, str]:
    """The two secrets as docs/deploy.md §7 exports them (YAML merged into the file's maps)."""
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username=\\"{user}\\" password=\\"{spark}\\";'
    )
    return {
        "CDC_KAFKA__CLIENT_OPTIONS": f'{{sasl.password: "{client}"}}',
        "CDC_KAFKA__SPARK_OPTIONS": f'{{sasl.jaas.config: "{jaas}"}}',
    }


def write_config(
    root: Path,
    broker: LocalKafkaBroker,
    transactions: str,
    outcomes: str,
    user: str,
    trigger: dict[str, str] | None = None,
    **kafka: str,
) -> Path:
    """``root/cdc.yaml``: petstore from ``root``, no landing folder, Kafka over the broker's SASL
    listener as docs/deploy.md §7 configures it (the secrets come from the environment:
    ``secrets_env``); ``kafka`` adds keys of the ``kafka`` section."""
    config: dict[str, object] = {
        "warehouse": "./warehouse",
        "checkpoints": "./checkpoints",
        "datasets": {"petstore": "petstore.yaml"},
        "landing": {},
        "allowed_locations": ["./data"],
        "base_dir": str(root),
        "spark": {"shuffle_partitions": 2},
        "kafka": {
            "bootstrap": broker.sasl_bootstrap,
            "transactions_topic": transactions,
            "outcomes_topic": outcomes,
            "options": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": MECHANISM},
            "client_options": {"sasl.username": user},
            **kafka,
        },
    }
    if trigger is not None:
        config["trigger"] = trigger
    path = root / "cdc.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def end_offset(broker: LocalKafkaBroker, topic: str) -> int:
    """The end offset of the topic's one partition, over the PLAINTEXT listener: the test looks
    at the topics behind the job's back."""
    ends = end_offsets(broker.bootstrap, topic)
    assert list(ends) == [0]
    return ends[0]


def test_sasl_scram_publish_run_results_refused_with_wrong_credentials_and_no_secret_shown(
    spark: object,  # the session's SparkSession: `cdc run` in this process gets it
    sasl_broker: LocalKafkaBroker,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)  # restored after the test; `cdc -v` logs at DEBUG too
    for key in [k for k in os.environ if k.startswith("CDC_")]:
        monkeypatch.delenv(key)
    (tmp_path / "petstore.yaml").write_text(DOG)
    data = tmp_path / "data" / "a" / "petstore" / "Dog" / "part.json"
    data.parent.mkdir(parents=True)
    data.write_text('{"id": "dog1", "name": "Rex"}\n{"id": "dog2", "name": "Fido"}\n')
    requests = tmp_path / "requests.jsonl"
    requests.write_text(request("tx-sasl-1", upsert("./data/a")) + "\n")
    config = write_config(tmp_path, sasl_broker, TRANSACTIONS, OUTCOMES, USER)
    layout = Layout(str(tmp_path / "warehouse"), str(tmp_path / "checkpoints"), "cdc")
    shown: list[str] = []  # everything printed or logged, searched for the passwords at the end

    def cli(*args: str, spark_pw: str = PASSWORD, client_pw: str = PASSWORD) -> tuple[int, str]:
        """`cdc` as a user runs it, in a process of its own; (exit code, stdout + stderr)."""
        env = cdc_env(secrets_env(spark=spark_pw, client=client_pw), drop=["CDC_"])
        done = run_cdc("-v", *args, "--config", str(config), cwd=tmp_path, env=env, timeout=120)
        shown.append(done.stdout + done.stderr)
        return done.returncode, done.stdout + done.stderr

    def run_once(*, spark_pw: str, client_pw: str) -> tuple[int, str]:
        """`cdc run --once` in this process (it shares the session's SparkSession)."""
        for key, value in secrets_env(spark=spark_pw, client=client_pw).items():
            monkeypatch.setenv(key, value)
        capfd.readouterr()
        code = main(["-v", "run", "--once", "--config", str(config)])
        out = capfd.readouterr()
        shown.append(out.out + out.err)
        return code, out.err

    # 1. cdc publish: a wrong password sends nothing; the right one sends the request.
    code, said = cli("publish", str(requests), client_pw=WRONG)
    assert code == 2, said
    assert "cdc: error [KAFKA_AUTH_FAILED]" in said
    assert "refused confluent-kafka" in said and "Authentication failed" in said
    assert f"kafka.client_options {{sasl.username: {USER}, sasl.password: **********}}" in said
    assert end_offset(sasl_broker, TRANSACTIONS) == 0
    code, said = cli("publish", str(requests))
    assert code == 0, said
    assert f"published 1 request(s) to {TRANSACTIONS}" in said
    assert end_offset(sasl_broker, TRANSACTIONS) == 1

    # 2. cdc run: a wrong password for either client stops the job before it consumes anything.
    code, said = run_once(spark_pw=WRONG, client_pw=PASSWORD)
    assert code == 2, said
    assert "cdc: error [KAFKA_AUTH_FAILED]" in said
    assert "refused Spark's Kafka source" in said and "SaslAuthenticationException" in said
    assert "kafka.spark_options {sasl.jaas.config: " in said
    assert f'username="{USER}" password="**********";' in said
    # (the query would fail too, after its source's 30 retries, with no code and a traceback)
    code, said = run_once(spark_pw=PASSWORD, client_pw=WRONG)
    assert code == 2, said
    assert "cdc: error [KAFKA_AUTH_FAILED]" in said and "refused confluent-kafka" in said
    assert "kafka.client_options {sasl.username: " in said
    # No query ever started: no offset consumed (the checkpoint holds only the lease's folder).
    assert not (Path(layout.checkpoint) / "offsets").exists()
    assert end_offset(sasl_broker, OUTCOMES) == 0
    dogs = layout.table("petstore", "petstore.Dog")
    assert deltalake.DeltaTable(dogs).to_pyarrow_table().num_rows == 0

    # 3. The right credentials: the same request is applied, its outcome event published.
    code, said = run_once(spark_pw=PASSWORD, client_pw=PASSWORD)
    assert code == 0, said
    rows = deltalake.DeltaTable(dogs).to_pyarrow_table(columns=["id", "name"]).to_pylist()
    assert sorted((r["id"], r["name"]) for r in rows) == [("dog1", "Rex"), ("dog2", "Fido")]
    events = read_values(sasl_broker.bootstrap, OUTCOMES)
    outcomes = [Outcome.from_json(v) for v in events]
    assert [(o.transaction_id, o.status) for o in outcomes] == [("tx-sasl-1", Status.COMMITTED)]
    assert outcomes[0].source == f"kafka:{TRANSACTIONS}[0]@0"
    table = deltalake.DeltaTable(layout.outcomes).to_pyarrow_table(
        columns=["transaction_id", "status"]
    )
    assert [(r["transaction_id"], r["status"]) for r in table.to_pylist()] == [
        ("tx-sasl-1", "COMMITTED")
    ]

    # 4. cdc results reads it back with the right password only.
    code, said = cli("results", "--json")
    assert code == 0, said
    printed = [Outcome.from_json(line) for line in said.splitlines() if line.startswith("{")]
    assert [(o.transaction_id, o.status) for o in printed] == [("tx-sasl-1", Status.COMMITTED)]
    code, said = cli("results", "--json", client_pw=WRONG)
    assert code == 2 and "cdc: error [KAFKA_AUTH_FAILED]" in said, said

    # 5. No password anywhere: outputs, log records, outcome events (topic and Delta table).
    stored = deltalake.DeltaTable(layout.outcomes).to_pyarrow_table(columns=["outcome"])
    everything = [
        *shown,
        caplog.text,
        *(v.decode("utf-8") for v in events),
        *(str(v) for v in stored.column("outcome").to_pylist()),
    ]
    assert any("KAFKA_AUTH_FAILED" in text for text in everything)  # the capture works
    for secret in (PASSWORD, WRONG):
        leaks = [text for text in everything if secret in text]
        assert not leaks, f"a secret in: {leaks[0][:2000]}"


# -- credentials revoked while the job runs (issue 37) -------------------------------------------
REVOKED_TRANSACTIONS, REVOKED_OUTCOMES = "revoked.transactions", "revoked.outcomes"


def _scram(broker: LocalKafkaBroker, user: str, password: str | None) -> None:
    """Delete ``user``'s SCRAM credentials (``password`` None) or set them again, for both
    mechanisms, as an operator revoking or restoring them would (over PLAINTEXT)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        change = (
            UserScramCredentialDeletion(user, mechanism)
            if password is None
            else UserScramCredentialUpsertion(
                user, ScramCredentialInfo(mechanism, 4096), password.encode()
            )
        )
        for done in admin.alter_user_scram_credentials([change]).values():
            done.result(timeout=30)  # one alteration per request: the broker refuses two


def _publish(broker: LocalKafkaBroker, topic: str, *lines: str) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for line in lines:
        producer.produce(topic, key=b"petstore", value=line.encode())
    assert producer.flush(30) == 0


def test_credentials_revoked_while_the_job_runs_stop_it_with_kafka_auth_failed(
    spark: object,  # `cdc run --once` in this process at the end gets the session's
    sasl_broker: LocalKafkaBroker,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A running `cdc run` whose user is deleted on the broker stops by itself within seconds
    (``kafka.recheck_interval``): exit 2, the KAFKA_AUTH_FAILED line naming the client, no
    Python traceback, no secret. What came meanwhile is applied once the user is back — once."""
    for key in [k for k in os.environ if k.startswith("CDC_")]:
        monkeypatch.delenv(key)
    sasl_broker.create_topics([REVOKED_TRANSACTIONS, REVOKED_OUTCOMES])
    (tmp_path / "petstore.yaml").write_text(DOG)
    for n in (1, 2):
        data = tmp_path / "data" / f"r{n}" / "petstore" / "Dog" / "part.json"
        data.parent.mkdir(parents=True)
        data.write_text(f'{{"id": "dog{n}", "name": "Rex {n}"}}\n')
    config = write_config(
        tmp_path,
        sasl_broker,
        REVOKED_TRANSACTIONS,
        REVOKED_OUTCOMES,
        REVOKED,
        trigger={"interval": "1 second"},
        recheck_interval="2 seconds",
    )
    secrets = secrets_env(spark=PASSWORD, client=PASSWORD, user=REVOKED)
    layout = Layout(str(tmp_path / "warehouse"), str(tmp_path / "checkpoints"), "cdc")
    _publish(sasl_broker, REVOKED_TRANSACTIONS, request("tx-r1", upsert("./data/r1")))

    # 1. The job runs and applies tx-r1; then the user is deleted while it waits for more.
    log = tmp_path / "cdc.log"
    job = start_cdc(
        "run", "--config", str(config), cwd=tmp_path, log=log, env=cdc_env(secrets, drop=["CDC_"])
    )
    try:
        wait_until(
            "tx-r1's outcome event",
            lambda: len(read_values(sasl_broker.bootstrap, REVOKED_OUTCOMES)) == 1,
            job,
            log,
            timeout=300,
        )
        _scram(sasl_broker, REVOKED, None)
        revoked = time.monotonic()
        code = job.wait(timeout=120)
        took = time.monotonic() - revoked
    finally:
        kill_group(job)
    said = log.read_text(errors="replace")
    assert code == 2, said[-3000:]
    # The recheck's period, a check's round trip, the stop between batches: seconds, not the
    # minute and more Spark's source retries for.
    assert took < 30, (took, said[-3000:])
    lines = [line for line in said.splitlines() if line.startswith("cdc: error")]
    assert lines and lines[-1].startswith("cdc: error [KAFKA_AUTH_FAILED]: the Kafka broker"), said
    assert "refused" in lines[-1] and "Authentication failed" in lines[-1], lines
    assert "stopping on KAFKA_AUTH_FAILED" in said, said[-3000:]
    assert "Traceback (most recent call last)" not in said, said[-3000:]
    assert PASSWORD not in said

    # 2. A request sent meanwhile waits; with the user back it is applied, and nothing twice.
    _publish(sasl_broker, REVOKED_TRANSACTIONS, request("tx-r2", upsert("./data/r2")))
    _scram(sasl_broker, REVOKED, PASSWORD)
    for key, value in secrets.items():
        monkeypatch.setenv(key, value)
    capfd.readouterr()
    assert main(["run", "--once", "--config", str(config)]) == 0, capfd.readouterr().err
    rows = deltalake.DeltaTable(layout.outcomes).to_pyarrow_table(
        columns=["transaction_id", "status"]
    )
    assert sorted((r["transaction_id"], r["status"]) for r in rows.to_pylist()) == [
        ("tx-r1", "COMMITTED"),
        ("tx-r2", "COMMITTED"),
    ]
    events = [Outcome.from_json(v) for v in read_values(sasl_broker.bootstrap, REVOKED_OUTCOMES)]
    assert sorted(o.transaction_id for o in events) == ["tx-r1", "tx-r2"]
    dogs = deltalake.DeltaTable(layout.table("petstore", "petstore.Dog")).to_pyarrow_table()
    assert sorted(r["id"] for r in dogs.to_pylist()) == ["dog1", "dog2"]


def test_the_outcome_producer_stops_waiting_when_the_broker_refuses_it(
    sasl_broker: LocalKafkaBroker,
) -> None:
    """A producer the broker refuses (a wrong password) fails with KAFKA_AUTH_FAILED at the
    first look at its errors, not after its acknowledgement timeout (60 s): librdkafka would
    keep the records and retry until they expire."""
    cfg = KafkaConfig(
        bootstrap=sasl_broker.sasl_bootstrap,
        options={"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": MECHANISM},
        client_options={"sasl.username": USER, "sasl.password": WRONG},
    )
    started = time.monotonic()
    with pytest.raises(KafkaAuthError) as refused:
        produce(cfg, REVOKED_TRANSACTIONS, [("k", b"v")], timeout=60)
    assert time.monotonic() - started < 15
    assert "refused confluent-kafka" in refused.value.message
    assert WRONG not in refused.value.message
