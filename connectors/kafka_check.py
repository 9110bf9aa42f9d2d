"""Startup check of the two Kafka clients' settings (docs/deploy.md, "Kafka security").

The job reads requests with Spark's Kafka source (the Java client: ``kafka.options`` +
``kafka.spark_options``) and writes outcome events with confluent-kafka (librdkafka:
``kafka.options`` + ``kafka.client_options``). Each is given its own credentials, so each is
checked before the query starts: a client whose credentials the broker refuses (SASL), or whose
TLS handshake fails, stops the job with ``KAFKA_AUTH_FAILED`` — naming the client, its settings
(secrets as ``**********``) and the broker's answer — before anything is consumed. ``cdc publish``
and ``cdc results`` check confluent-kafka's the same way before they send or read anything.

A broker that does not answer within the check's time is not an error here: the job starts as it
always did and its Kafka source keeps retrying (a warning says so).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from confluent_kafka import KafkaError, KafkaException, Producer

from streaming.core.codes import Code
from streaming.core.config import KafkaConfig
from streaming.core.errors import CdcError, ConfigError
from streaming.core.redact import option_secrets, redact_options, scrub
from streaming.platform.exceptions import java_text

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "CHECK_TIMEOUT",
    "CONFLUENT_CLIENT",
    "SPARK_CLIENT",
    "CredentialWatch",
    "KafkaAuthError",
    "check_client",
    "check_kafka",
    "check_spark_source",
    "describe_settings",
    "exact_names",
    "is_refusal",
    "java_refusal",
    "kafka_secrets",
    "kafka_source_options",
    "refusal_in",
    "refused",
]

log = logging.getLogger(__name__)

CHECK_TIMEOUT = 15.0
"""Seconds a client is given to reach the broker before the check gives up (with a warning)."""

SPARK_CLIENT = "Spark's Kafka source (the Java client, which reads the requests)"
CONFLUENT_CLIENT = (
    "confluent-kafka (librdkafka: the job's outcome producer, `cdc publish`, `cdc results`)"
)

_LIBRDKAFKA_REFUSALS = frozenset(
    {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL}
)
_JAVA_REFUSAL = re.compile(
    r"(?:[\w.]+\.)?(\w*(?:Authentication|Authorization)Exception|UnsupportedSaslMechanismException"
    r"|IllegalSaslStateException)(?::[ \t]*([^\n]*))?"
)

_JAVA_EXCEPTION = re.compile(r"\w(?:Exception|Error)\b")


class KafkaAuthError(CdcError):
    """The broker refused a Kafka client's credentials (or its TLS handshake failed)."""

    code = Code.KAFKA_AUTH_FAILED


def kafka_secrets(cfg: KafkaConfig) -> list[str]:
    """Every secret of the Kafka settings (the three option maps and the schema registry's)."""
    found = [
        *option_secrets(cfg.options),
        *option_secrets(cfg.spark_options),
        *option_secrets(cfg.client_options),
    ]
    if cfg.avro is not None and cfg.avro.registry is not None:
        found += cfg.avro.registry.secrets()
    return found


def describe_settings(cfg: KafkaConfig, *, spark: bool) -> str:
    """The settings one client is given, secrets blanked: ``kafka.options {…}; kafka.…``."""
    own = (
        ("kafka.spark_options", cfg.spark_options)
        if spark
        else ("kafka.client_options", cfg.client_options)
    )
    maps = [("kafka.options", cfg.options), own]
    said = [
        f"{name} {{{', '.join(f'{k}: {v}' for k, v in redact_options(options).items())}}}"
        for name, options in maps
        if options
    ]
    return "; ".join(said) or f"none (kafka.options and {own[0]} are empty: PLAINTEXT)"


def refused(cfg: KafkaConfig, *, spark: bool, answer: str) -> KafkaAuthError:
    """The error naming the client the broker refused, its settings and the broker's answer."""
    client = SPARK_CLIENT if spark else CONFLUENT_CLIENT
    return KafkaAuthError(
        f"the Kafka broker ({cfg.bootstrap}) refused {client}: "
        f"{scrub(answer, kafka_secrets(cfg))}\n"
        f"  its settings: {describe_settings(cfg, spark=spark)}\n"
        "  check the credentials (sasl.* / ssl.*) there; secrets can come from the environment "
        "(CDC_KAFKA__SPARK_OPTIONS, CDC_KAFKA__CLIENT_OPTIONS)"
    )


def check_client(
    cfg: KafkaConfig, timeout: float = CHECK_TIMEOUT, *, quiet: bool = False
) -> set[str] | None:
    """confluent-kafka connects (and authenticates) with ``kafka.options`` +
    ``kafka.client_options``, or ``KafkaAuthError``; settings librdkafka refuses are a
    ``ConfigError`` naming the maps. ``quiet``: a broker that does not answer is logged at DEBUG
    (the running job's recheck), not as a warning. The topics the broker listed (the request
    that proves the connection lists them), None when it did not answer."""
    errors: list[KafkaError] = []
    try:
        producer = Producer(cfg.client_options_for(error_cb=errors.append))
    except (KafkaException, ValueError, TypeError) as e:
        raise ConfigError(
            "kafka.options / kafka.client_options: confluent-kafka refuses them: "
            f"{scrub(str(e), kafka_secrets(cfg))}"
        ) from None
    deadline = time.monotonic() + timeout
    while True:
        try:
            return set(producer.list_topics(timeout=1.0).topics)
        except KafkaException as e:
            errors.append(e.args[0])
        producer.poll(0)  # serves error_cb
        refusal = next((e for e in errors if e.code() in _LIBRDKAFKA_REFUSALS), None)
        if refusal is not None:
            raise refused(cfg, spark=False, answer=refusal.str())
        if time.monotonic() >= deadline:
            log.log(
                logging.DEBUG if quiet else logging.WARNING,
                "confluent-kafka could not reach the Kafka broker (%s) within %.0fs: %s",
                cfg.bootstrap,
                timeout,
                scrub(errors[-1].str() if errors else "no answer", kafka_secrets(cfg)),
            )
            return None


def kafka_source_options(cfg: KafkaConfig) -> dict[str, str]:
    """The ``kafka.*`` options Spark's Kafka source is given (the Java client's settings)."""
    return {
        "kafka.bootstrap.servers": cfg.bootstrap,
        **{f"kafka.{key}": value for key, value in cfg.spark_client_options().items()},
    }


def java_refusal(text: str) -> str | None:
    """The Java client's authentication (or authorization) failure in an error's text, as
    ``<exception class>: <message>``; None for any other error."""
    match = _JAVA_REFUSAL.search(text)
    if match is None:
        return None
    return f"{match.group(1)}: {match.group(2) or ''}".strip().rstrip(":")


def exact_names(topics: Iterable[str]) -> str:
    """A ``subscribePattern`` that matches exactly ``topics``: Spark's Kafka source then reads
    a topic that is created after the query started from its first message, where a
    ``subscribe`` of a topic that does not exist fails the query (``connectors.kafka_topics``)."""
    return "^(" + "|".join(re.escape(topic) for topic in sorted(set(topics))) + ")$"


def check_spark_source(
    spark: SparkSession, cfg: KafkaConfig, timeout: float = CHECK_TIMEOUT, *, quiet: bool = False
) -> None:
    """Spark's Kafka source, with the job's options, lists the topics and fetches the offsets of
    the transactions topic, if it exists, on the driver (planning a batch read, no Spark job, no
    record read), or ``KafkaAuthError``. ``quiet`` as for ``check_client``."""
    options = kafka_source_options(cfg)
    given = cfg.spark_client_options()
    if "default.api.timeout.ms" not in given and "request.timeout.ms" not in given:
        # A broker that does not answer: the check's time, not the admin client's 60 s. The
        # request timeout may not be longer than the API timeout (the client refuses).
        ms = str(int(timeout * 1000))
        options.update({"kafka.default.api.timeout.ms": ms, "kafka.request.timeout.ms": ms})
    reader = (
        spark.read.format("kafka")
        .options(**options)
        .option("subscribePattern", exact_names([cfg.transactions_topic]))
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("fetchOffset.numRetries", "1")
    )
    try:
        reader.load().rdd.getNumPartitions()
    except Exception as e:  # py4j and PySpark wrap the Java client's exception
        text = scrub(java_text(e), kafka_secrets(cfg))
        answer = java_refusal(text)
        if answer is not None:
            raise refused(cfg, spark=True, answer=answer) from None
        lines = [line.strip(": \t") for line in text.splitlines()]
        first = next((line for line in lines if _JAVA_EXCEPTION.search(line)), lines[0])
        log.log(
            logging.DEBUG if quiet else logging.WARNING,
            "Spark's Kafka source could not read the offsets of %s at %s (%s); the query will "
            "keep trying",
            cfg.transactions_topic,
            cfg.bootstrap,
            first[:500],
        )


def check_kafka(
    spark: SparkSession, cfg: KafkaConfig, timeout: float = CHECK_TIMEOUT, *, quiet: bool = False
) -> set[str] | None:
    """Both clients of the job, confluent-kafka first (the quicker to answer); the topics the
    broker listed (``check_client``)."""
    topics = check_client(cfg, timeout, quiet=quiet)
    check_spark_source(spark, cfg, timeout, quiet=quiet)
    return topics


def refusal_in(cfg: KafkaConfig, error: BaseException | str) -> KafkaAuthError | None:
    """The ``KafkaAuthError`` of Spark's Kafka source when ``error`` (a failed query's) is the
    Java client's authentication or authorization failure; None for any other error."""
    text = scrub(error if isinstance(error, str) else java_text(error), kafka_secrets(cfg))
    answer = java_refusal(text)
    return None if answer is None else refused(cfg, spark=True, answer=answer)


def is_refusal(error: KafkaError) -> bool:
    """Whether a librdkafka error is the broker refusing the credentials (or TLS failing)."""
    return error.code() in _LIBRDKAFKA_REFUSALS


class CredentialWatch:
    """While the job runs, both clients' credentials are checked again every ``interval``
    seconds, each with a new connection (``check_kafka``, quiet): a connection opened before
    credentials were revoked may go on working until the broker closes it, a new one is refused
    at once. The first refusal is kept in ``refused`` and handed to ``on_refused`` (which asks
    the job to stop); the watch then ends. A broker that does not answer is not a refusal: the
    query's own retries deal with it. The topics each check lists go to ``on_topics``."""

    def __init__(
        self,
        spark: SparkSession,
        cfg: KafkaConfig,
        interval: float,
        on_refused: Callable[[KafkaAuthError], None],
        on_topics: Callable[[set[str]], None] | None = None,
    ) -> None:
        self._spark, self._cfg, self._interval = spark, cfg, interval
        self._on_refused, self._on_topics = on_refused, on_topics
        self.refused: KafkaAuthError | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="cdc-kafka-recheck", daemon=True)

    def start(self) -> CredentialWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        timeout = min(CHECK_TIMEOUT, max(self._interval, 1.0))
        while not self._stopped.wait(self._interval):
            try:
                topics = check_kafka(self._spark, self._cfg, timeout, quiet=True)
                if topics is not None and self._on_topics is not None:
                    self._on_topics(topics)
            except KafkaAuthError as e:
                if self._stopped.is_set():
                    return
                self.refused = e
                log.error("%s", e.message.splitlines()[0])
                self._on_refused(e)
                return
            except Exception as e:  # the JVM going away as the job ends, a broker hiccup
                if self._stopped.is_set():
                    return
                log.debug("Kafka credentials recheck: %s", scrub(str(e), kafka_secrets(self._cfg)))
