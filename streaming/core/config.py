"""The job configuration: ``cdc.yaml`` validated by pydantic, every key overridable by ``CDC_*``.

Environment overrides use ``__`` for nesting: ``CDC_KAFKA__BOOTSTRAP=host:9092``,
``CDC_TRIGGER__INTERVAL="10 seconds"``. Relative paths are resolved against the directory of the
config file (or the working directory when there is no file), so a config means the same thing
wherever the job is started from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from streaming.core.errors import ConfigError

__all__ = [
    "BUILTIN_SCHEMA_PREFIX",
    "DURATION_UNITS",
    "ENV_NESTING",
    "ENV_PREFIX",
    "JAVA_ONLY_KAFKA_KEYS",
    "MIN_RETENTION_SECONDS",
    "AppConfig",
    "AvroConfig",
    "ChangeFeedConfig",
    "Duration",
    "KafkaConfig",
    "LandingConfig",
    "LeaseConfig",
    "LogConfig",
    "MetricsConfig",
    "RegistryConfig",
    "ShutdownConfig",
    "SparkConfig",
    "StorageRetryConfig",
    "TablesConfig",
    "TriggerConfig",
    "UpkeepConfig",
    "duration_seconds",
    "load_config",
    "parse_config",
    "resolve_path",
]

ENV_PREFIX = "CDC_"
ENV_NESTING = "__"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


BUILTIN_SCHEMA_PREFIX = "builtin:"
"""``kafka.avro.schemas`` values starting with this name a schema shipped with the package:
``builtin:transaction_request`` or ``builtin:outcome`` (streaming/resources/schemas/*.avsc)."""


class RegistryConfig(_Strict):
    """A Confluent-compatible schema registry, through confluent-kafka's client
    (``confluent_kafka.schema_registry``: basic or bearer auth, TLS, retries, a cache by id).

    Keys are the client's own names (``basic.auth.user.info``, ``ssl.ca.location``, …), so a
    managed registry's client snippet can be copied. In an environment variable a dot of a key
    is ``_``: ``CDC_KAFKA__AVRO__REGISTRY__BASIC_AUTH_USER_INFO=key:secret`` (it wins over the
    file). Secrets are never printed: they are ``**********`` in any dump of the config."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    url: str = Field(
        description="Registry URL (`https://…`; several: comma-separated, tried in turn)"
    )
    basic_auth_user_info: SecretStr | None = Field(
        None,
        alias="basic.auth.user.info",
        description="Basic auth as `user:password` (Confluent Cloud: `<api key>:<api secret>`)",
    )
    bearer_auth_credentials_source: Literal["STATIC_TOKEN", "OAUTHBEARER"] | None = Field(
        None,
        alias="bearer.auth.credentials.source",
        description="Bearer auth instead of basic: a fixed `bearer.auth.token`, or tokens "
        "fetched from `bearer.auth.issuer.endpoint.url` with the client id and secret",
    )
    bearer_auth_token: SecretStr | None = Field(
        None, alias="bearer.auth.token", description="The token of `STATIC_TOKEN`"
    )
    bearer_auth_logical_cluster: str | None = Field(
        None,
        alias="bearer.auth.logical.cluster",
        description="Registry cluster id sent with a bearer token (`target-sr-cluster`; "
        "required with bearer auth)",
    )
    bearer_auth_identity_pool_id: str | None = Field(
        None, alias="bearer.auth.identity.pool.id", description="Identity pool (bearer auth)"
    )
    bearer_auth_client_id: str | None = Field(
        None, alias="bearer.auth.client.id", description="OAuth client id (`OAUTHBEARER`)"
    )
    bearer_auth_client_secret: SecretStr | None = Field(
        None, alias="bearer.auth.client.secret", description="OAuth client secret (`OAUTHBEARER`)"
    )
    bearer_auth_scope: str | None = Field(
        None, alias="bearer.auth.scope", description="OAuth scope (`OAUTHBEARER`)"
    )
    bearer_auth_issuer_endpoint_url: str | None = Field(
        None,
        alias="bearer.auth.issuer.endpoint.url",
        description="OAuth token endpoint (`OAUTHBEARER`)",
    )
    ssl_ca_location: str | None = Field(
        None,
        alias="ssl.ca.location",
        description="CA certificate (PEM file or folder) the registry's TLS certificate is "
        "checked against (default: the system's, then certifi's)",
    )
    ssl_certificate_location: str | None = Field(
        None,
        alias="ssl.certificate.location",
        description="Client certificate (PEM) for mutual TLS",
    )
    ssl_key_location: str | None = Field(
        None, alias="ssl.key.location", description="Private key (PEM) of the client certificate"
    )
    ssl_key_password: SecretStr | None = Field(
        None, alias="ssl.key.password", description="Password of `ssl.key.location`"
    )
    timeout: float = Field(10.0, gt=0, description="Seconds one HTTP request may take")
    max_retries: int = Field(
        3,
        ge=0,
        alias="max.retries",
        description="Retries of a request that failed to connect or got 408/429/5xx",
    )
    subject_name_strategy: Literal["topic", "record", "topic_record"] = Field(
        "topic",
        description="Subject the shipped schemas are registered under: `<topic>-value`, "
        "`<record name>` or `<topic>-<record name>`",
    )

    @model_validator(mode="before")
    @classmethod
    def _environment_spelling_wins(cls, data: Any) -> Any:
        """A key given both ways (``basic.auth.user.info`` in the file and
        ``basic_auth_user_info`` from ``CDC_…``): the environment's spelling wins."""
        if not isinstance(data, dict):
            return data
        shaped = dict(data)
        for name, field in cls.model_fields.items():
            if field.alias and field.alias != name and name in shaped:
                shaped[field.alias] = shaped.pop(name)
        return shaped

    @field_validator("url")
    @classmethod
    def _http_urls(cls, value: str) -> str:
        for url in value.split(","):
            if not url.strip().startswith(("http://", "https://")):
                raise ValueError("expected http:// or https:// URLs (comma-separated)")
        return value

    @field_validator("basic_auth_user_info")
    @classmethod
    def _user_and_password(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and ":" not in value.get_secret_value():
            raise ValueError("expected user:password")
        return value

    @model_validator(mode="after")
    def _one_way_to_authenticate(self) -> RegistryConfig:
        source = self.bearer_auth_credentials_source
        if source is not None and self.basic_auth_user_info is not None:
            raise ValueError("give basic.auth.user.info or bearer.auth.*, not both")
        needed = {
            None: [],
            "STATIC_TOKEN": ["bearer.auth.token", "bearer.auth.logical.cluster"],
            "OAUTHBEARER": [
                "bearer.auth.client.id",
                "bearer.auth.client.secret",
                "bearer.auth.scope",
                "bearer.auth.issuer.endpoint.url",
                "bearer.auth.logical.cluster",
            ],
        }[source]
        given = self.model_dump(by_alias=True, exclude_none=True)
        missing = [key for key in needed if key not in given]
        if missing:
            raise ValueError(f"bearer.auth.credentials.source {source} needs {', '.join(missing)}")
        if self.ssl_key_location and not self.ssl_certificate_location:
            raise ValueError("ssl.key.location needs ssl.certificate.location")
        return self

    def client_conf(self) -> dict[str, Any]:
        """The configuration of ``confluent_kafka.schema_registry.SchemaRegistryClient``."""
        conf: dict[str, Any] = {}
        for name, field in type(self).model_fields.items():
            value = getattr(self, name)
            if value is None or name == "subject_name_strategy":
                continue
            conf[field.alias or name] = (
                value.get_secret_value() if isinstance(value, SecretStr) else value
            )
        return conf

    def secrets(self) -> list[str]:
        """The secret values (to be blanked out of any message), the URLs' passwords included."""
        values = [
            v.get_secret_value()
            for v in (
                self.basic_auth_user_info,
                self.bearer_auth_token,
                self.bearer_auth_client_secret,
                self.ssl_key_password,
            )
            if v is not None
        ]
        if self.basic_auth_user_info is not None:
            values.append(self.basic_auth_user_info.get_secret_value().split(":", 1)[1])
        for url in self.url.split(","):
            password = urlsplit(url.strip()).password
            if password:
                values.append(password)
        return [v for v in values if v]


class AvroConfig(_Strict):
    """Avro in the Confluent wire format (magic byte 0, 4-byte schema id, Avro binary body)."""

    registry: RegistryConfig | None = Field(
        None,
        description="Schema registry: schemas are fetched by id and cached; a missing "
        "request/outcome schema id is obtained by registering the shipped schema "
        "(subject: `subject_name_strategy`)",
    )
    schemas: dict[int, str] = Field(
        default_factory=dict,
        description="Local schemas, id → `.avsc` file (or `builtin:transaction_request`, "
        "`builtin:outcome`); looked up before the registry",
    )
    request_schema_id: int | None = Field(
        None,
        ge=0,
        description="Schema id `cdc publish` writes requests with (without one: registered)",
    )
    outcome_schema_id: int | None = Field(
        None,
        ge=0,
        description="Schema id the job writes outcomes with (required without `registry`; "
        "with a registry and none: registered)",
    )

    @model_validator(mode="before")
    @classmethod
    def _registry_url_moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "registry_url" in data:
            raise ValueError(
                "registry_url is now registry.url (kafka.avro.registry: {url: …}, with its "
                "authentication and TLS keys beside it)"
            )
        return data

    @field_validator("request_schema_id", "outcome_schema_id")
    @classmethod
    def _known_locally(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None or info.data.get("registry"):
            return value
        if value not in info.data.get("schemas", {}):
            raise ValueError(f"schema id {value} is not in kafka.avro.schemas (no registry)")
        return value


JAVA_ONLY_KAFKA_KEYS = ("sasl.jaas.config", "ssl.truststore.")
"""Kafka options (by prefix) of the Java client that librdkafka refuses
(JAAS configuration, Java trust stores; librdkafka takes ``sasl.username``/``sasl.password`` and
PEM files, ``ssl.ca.location``). Other keys librdkafka does not know fail when the client starts,
with librdkafka's "No such configuration property"."""


DURATION_UNITS = {
    "second": 1,
    "seconds": 1,
    "minute": 60,
    "minutes": 60,
    "hour": 3600,
    "hours": 3600,
    "day": 86400,
    "days": 86400,
}


def duration_seconds(text: str) -> int:
    """Seconds of a duration written ``'<number> <unit>'`` (``30 seconds``, ``1 minute``,
    ``7 days``)."""
    parts = text.split()
    if len(parts) != 2 or not parts[0].isdigit() or parts[1] not in DURATION_UNITS:
        raise ValueError(
            "expected '<number> <unit>' with a unit of seconds, minutes, hours or days, "
            "e.g. '20 seconds'"
        )
    return int(parts[0]) * DURATION_UNITS[parts[1]]


def _valid_duration(value: str) -> str:
    duration_seconds(value)
    return value


Duration = Annotated[str, AfterValidator(_valid_duration)]
"""A config value written ``'<number> seconds'`` or ``'<number> minutes'``."""


class ChangeFeedConfig(_Strict):
    """A database's change events on Kafka, applied to a dataset (docs/interface.md, "Change
    events from a database"): Debezium's envelope, or AWS DMS's Kafka target."""

    name: str = Field(
        description="The feed's name: its transactions are `<format>:<name>:<source id>`",
        pattern=r"^[A-Za-z0-9_.-]+$",
    )
    dataset: str = Field(description="The dataset whose schemas the source tables map to")
    format: Literal["debezium", "dms"] = Field(
        "debezium",
        description="`debezium` (JSON with or without the converter's schema, or "
        "Avro with `kafka.format: avro`) or `dms` (AWS DMS's Kafka target, JSON)",
    )
    topic_prefix: str | None = Field(
        None,
        description="debezium: the connector's `topic.prefix`; its topics are "
        "`<prefix>.<db schema>.<table>`",
    )
    topic: str | None = Field(None, description="dms: the one topic DMS writes every table to")
    tables: dict[str, str] = Field(
        default_factory=dict,
        description="Schema name → source table (`<db schema>.<table>`); empty: every object "
        "schema of the dataset, named as its source table",
    )
    transaction_metadata: bool = Field(
        True,
        description="debezium: read BEGIN/END from `<prefix>.transaction` (the connector's "
        "`provide.transaction.metadata=true`) and apply each source transaction whole, in "
        "commit order; false: per key only",
    )
    position_property: str = Field(
        "sourcePosition",
        description="The string property of every mapped schema that keeps "
        "the source position of a row's last change: the schema's watermark",
    )
    time_property: str | None = Field(
        None,
        description="A datetime property of every mapped schema that each change fills with "
        "the source's commit time (Debezium's `source.ts_ms`, DMS's `metadata.timestamp`): "
        "`scd2: {valid_from: <it>}` gives SCD2 intervals in source time; empty: none",
    )
    max_wait: Duration = Field(
        "10 minutes",
        description="How long a source transaction may stay incomplete; then it "
        "is REJECTED (SOURCE_TRANSACTION_INCOMPLETE), its events kept in quarantine",
    )
    max_pending_events: int = Field(
        100_000,
        gt=0,
        description="Events of incomplete transactions kept at most; beyond, "
        "the oldest incomplete transaction is REJECTED as after `max_wait`",
    )
    unavailable_value_placeholder: str = Field(
        "__debezium_unavailable_value",
        min_length=1,
        description="debezium: the connector's `unavailable.value.placeholder`: a column "
        "holding it (a value PostgreSQL did not send: an unchanged TOASTed text, JSON, bytea "
        "or array) keeps its stored value, or takes the event's `before` value where there is "
        "one (REPLICA IDENTITY FULL); never written as data",
    )
    schema_changes: Literal["evolve", "fail", "ignore"] = Field(
        "evolve",
        description="A column the events carry and the schema lacks (added in the source): "
        "`evolve` adds it to the schema's tables as a nullable property and keeps its values; "
        "`fail` stops the job (SOURCE_SCHEMA_CHANGED) before applying it; `ignore` leaves it "
        "out (one warning per column)",
    )

    @model_validator(mode="after")
    def _topics_given(self) -> ChangeFeedConfig:
        if self.format == "debezium" and not self.topic_prefix:
            raise ValueError("topic_prefix: required with format debezium")
        if self.format == "dms" and not self.topic:
            raise ValueError("topic: required with format dms")
        return self

    @property
    def transaction_topic(self) -> str | None:
        if self.format == "debezium" and self.transaction_metadata:
            return f"{self.topic_prefix}.transaction"
        return None


class KafkaConfig(_Strict):
    """Kafka topics for transaction requests and outcome events."""

    bootstrap: str = Field(description="Kafka bootstrap servers, host:port[,host:port]")
    transactions_topic: str = Field(
        "cdc.transactions", description="Topic of transaction requests (key = dataset)"
    )
    outcomes_topic: str = Field(
        "cdc.outcomes", description="Topic of outcome events (key = transactionId)"
    )
    format: Literal["json", "avro"] = Field(
        "json", description="Message format: JSON, or Avro in the Confluent wire format"
    )
    starting_offsets: Literal["earliest", "latest"] = Field(
        "earliest",
        description="Where a new checkpoint starts reading the requests topic; a requests "
        "topic created after the job started is read from its first message",
    )
    max_offsets_per_trigger: int | None = Field(
        None, gt=0, description="Upper bound of requests read per micro-batch"
    )
    options: dict[str, str] = Field(
        default_factory=dict,
        description="Options for both Kafka clients, Spark's Java client and confluent-kafka "
        "(`security.protocol`, `sasl.mechanism`, …); no Java-only keys",
    )
    spark_options: dict[str, str] = Field(
        default_factory=dict,
        description="Options for Spark's Kafka source only, the Java client "
        "(`sasl.jaas.config`, `ssl.truststore.*`, …); override `options`",
    )
    client_options: dict[str, str] = Field(
        default_factory=dict,
        description="Options for confluent-kafka only (librdkafka: the outcome producer, "
        "`cdc publish`/`results`; `sasl.username`, `ssl.ca.location`, …); override `options`",
    )
    avro: AvroConfig | None = Field(
        None,
        validate_default=True,
        description="Avro schemas; required with `format: avro` (`registry` or `schemas`)",
    )
    change_feeds: list[ChangeFeedConfig] = Field(
        default_factory=list,
        description="Databases' change events to apply (Debezium, DMS on Kafka); docs/interface.md",
    )
    recheck_interval: Duration = Field(
        "10 seconds",
        description="How often the running job opens a new connection with each client's "
        "credentials to see that the broker still accepts them: credentials revoked while it "
        "runs stop it with KAFKA_AUTH_FAILED (exit 2) within about this time, not after Spark's "
        "source has retried for a minute or more. `0 seconds`: no recheck (a connection open "
        "before the revocation keeps working until the broker closes it)",
    )

    @property
    def recheck_seconds(self) -> int:
        return duration_seconds(self.recheck_interval)

    @field_validator("options", "client_options")
    @classmethod
    def _no_java_only_keys(cls, value: dict[str, str]) -> dict[str, str]:
        java = sorted(key for key in value if key.startswith(JAVA_ONLY_KAFKA_KEYS))
        if java:
            raise ValueError(
                f"{java[0]} is an option of the Java client only, which confluent-kafka refuses: "
                "put it in kafka.spark_options"
            )
        return value

    def spark_client_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source (the Java client), without the ``kafka.`` prefix."""
        return {**self.options, **self.spark_options}

    def client_options_for(self, **extra: object) -> dict[str, object]:
        """The confluent-kafka (librdkafka) configuration, ``extra`` last."""
        return {"bootstrap.servers": self.bootstrap, **self.options, **self.client_options, **extra}

    @field_validator("avro")
    @classmethod
    def _avro_has_schemas(cls, value: AvroConfig | None, info: ValidationInfo) -> AvroConfig | None:
        if info.data.get("format") != "avro":
            return value
        if value is None or (not value.registry and not value.schemas):
            raise ValueError("required with format avro: give registry or schemas")
        if not value.registry and value.outcome_schema_id is None:
            raise ValueError(
                "outcome_schema_id is required with format avro and no registry "
                "(the schema id outcomes are written with)"
            )
        return value


class LandingConfig(_Strict):
    """Landing folders watched by the job."""

    transactions: str | None = Field(
        None, description="Folder of request files (JSON lines, `*.json*`)"
    )
    dms: str | None = Field(
        None, description="DMS landing zone: `<dataset>/<schema path>/*.parquet`"
    )
    max_files_per_trigger: int | None = Field(
        None, gt=0, description="Upper bound of landing files read per micro-batch"
    )


class TablesConfig(_Strict):
    """How the job's Delta tables are written."""

    deletion_vectors: bool = Field(
        False,
        description="Deletion vectors on the current tables: a large batch's MERGE marks the "
        "rows it replaces instead of rewriting the files that hold them, so its cost follows "
        "the changes, not the files they touch (a small batch's still rewrites its few files). "
        "Readers must support the `deletionVectors` table feature (delta-rs reads such tables "
        "through `QueryBuilder` only); turning it off later stops new vectors, `cdc maintain "
        "--optimize` purges the old ones",
    )


class UpkeepConfig(_Strict):
    """Table upkeep the job runs by itself between micro-batches (docs/operations.md)

    Compaction, current tables clustered by id, retention properties and VACUUM, after a
    micro-batch's outcomes."""

    enabled: bool = Field(True, description="Run upkeep between micro-batches")
    compact_files: int = Field(
        50,
        ge=2,
        description="A table is compacted (OPTIMIZE) once this many of its files are small "
        "(Delta's auto compaction threshold)",
    )
    small_file_mib: int = Field(
        16,
        ge=1,
        description="Files under this size (MiB) count as small; compaction leaves larger ones",
    )
    cluster: bool = Field(
        True,
        description="Keep current tables ordered by id (OPTIMIZE ZORDER BY id) when their "
        "files' id ranges overlap, so that a batch's MERGE opens few files",
    )
    order_depth: int = Field(
        8,
        ge=2,
        description="A current table is clustered once this many of its files can hold one same "
        "id (checked when it is compacted and at its first write after the job starts)",
    )
    budget: Duration = Field(
        "10 seconds",
        description="After a micro-batch, no new upkeep task starts once this much time went "
        "to upkeep (a task that started runs to its end; the rest waits for the next batch)",
    )
    retention: Duration = Field(
        "7 days",
        description="Time travel kept: each table's `delta.logRetentionDuration` and "
        "`delta.deletedFileRetentionDuration`, and what VACUUM keeps",
    )
    vacuum_every: Duration = Field(
        "1 day",
        description="Time between two VACUUMs of a table (the first one this long after the job "
        "started)",
    )

    @field_validator("retention")
    @classmethod
    def _at_least_an_hour(cls, value: str) -> str:
        if duration_seconds(value) < MIN_RETENTION_SECONDS:
            raise ValueError(
                "must be at least 1 hour: a shorter one lets VACUUM remove files a running "
                "reader or writer may still need"
            )
        return value

    @property
    def budget_seconds(self) -> int:
        return duration_seconds(self.budget)

    @property
    def retention_seconds(self) -> int:
        return duration_seconds(self.retention)

    @property
    def retention_hours(self) -> float:
        return self.retention_seconds / 3600

    @property
    def vacuum_every_seconds(self) -> int:
        return duration_seconds(self.vacuum_every)


class TriggerConfig(_Strict):
    """When the continuous query starts a micro-batch (`cdc run --once` ignores it)."""

    interval: str = Field("5 seconds", description="Processing-time trigger interval")

    @field_validator("interval")
    @classmethod
    def _interval_has_unit(cls, value: str) -> str:
        parts = value.split()
        if len(parts) != 2 or not parts[0].isdigit():
            raise ValueError("expected '<number> <unit>', e.g. '5 seconds'")
        return value


class ShutdownConfig(_Strict):
    """How `cdc run` stops on SIGTERM or SIGINT (README "Stopping it")."""

    grace_period: Duration = Field(
        "20 seconds",
        description="How long the running micro-batch may take to finish once the signal came; "
        "past it (or at a second signal) the batch is left to the replay at the next start and "
        "the process exits at once, as after a crash. `0 seconds`: never wait. Keep it about "
        "10 s under the supervisor's kill timeout (Kubernetes' `terminationGracePeriodSeconds`, "
        "30 s by default; systemd's `TimeoutStopSec`)",
    )

    @property
    def grace_seconds(self) -> int:
        return duration_seconds(self.grace_period)


class StorageRetryConfig(_Strict):
    """How a micro-batch a store failed is run again (STORAGE_UNAVAILABLE; docs/operations.md)

    A store that did not answer or refused a request for a moment (a network blip, S3
    throttling or a 5xx, an access refused then given back) fails the batch, not its
    transactions: it is run again, nothing of it rejected. The waits between attempts are
    `first_delay`, doubled each time, at most `max_delay`; after the last attempt the job stops
    with `STORAGE_UNAVAILABLE` (exit 2) and the batch is replayed at the next start."""

    attempts: int = Field(
        8,
        ge=1,
        description="How many times a batch is tried when a store fails it (1: never again; "
        "the defaults wait 1+2+4+8+16+32+60 s, about 2 minutes, in all)",
    )
    first_delay: Duration = Field(
        "1 second", description="The wait after the first failed attempt; doubled after each"
    )
    max_delay: Duration = Field("1 minute", description="The longest wait between two attempts")

    @field_validator("first_delay", "max_delay")
    @classmethod
    def _at_least_a_second(cls, value: str) -> str:
        if duration_seconds(value) <= 0:
            raise ValueError("must be at least 1 second")
        return value

    @model_validator(mode="after")
    def _max_not_below_first(self) -> StorageRetryConfig:
        if self.max_delay_seconds < self.first_delay_seconds:
            raise ValueError(
                f"max_delay ({self.max_delay}) must not be shorter than first_delay "
                f"({self.first_delay})"
            )
        return self

    @property
    def first_delay_seconds(self) -> int:
        return duration_seconds(self.first_delay)

    @property
    def max_delay_seconds(self) -> int:
        return duration_seconds(self.max_delay)


class LeaseConfig(_Strict):
    """One runner per checkpoint: the lease the running job holds on it (docs/interface.md)

    The job renews it; a second `cdc run` on the checkpoint stops at startup (`CHECKPOINT_HELD`)
    until it is released or expires, and a runner whose lease was taken stops before its next
    commit (`LEASE_LOST`)."""

    duration: str = Field(
        "60 seconds",
        description="How long a lease lasts without renewal: how long a runner that died on "
        "another machine (or whose liveness cannot be seen) keeps the checkpoint from the next "
        "one. A runner that died on the same machine is seen gone at once. Keep it well above "
        "the clock difference between machines",
    )
    renew_every: str = Field(
        "10 seconds",
        description="How often the running job renews its lease; at most a third of `duration`",
    )

    @field_validator("duration", "renew_every")
    @classmethod
    def _duration(cls, value: str) -> str:
        if duration_seconds(value) <= 0:
            raise ValueError("must be at least 1 second")
        return value

    @model_validator(mode="after")
    def _renewed_well_within(self) -> LeaseConfig:
        if 3 * self.renew_seconds > self.duration_seconds:
            raise ValueError(
                f"renew_every ({self.renew_every}) must be at most a third of duration "
                f"({self.duration}), so that a late renewal or two do not lose the lease"
            )
        return self

    @property
    def duration_seconds(self) -> int:
        return duration_seconds(self.duration)

    @property
    def renew_seconds(self) -> int:
        return duration_seconds(self.renew_every)


class SparkConfig(_Strict):
    """The Spark session of the job and of the commands that read tables."""

    master: str | None = Field(
        "local[2]", description="Spark master; null = leave it to spark-submit"
    )
    app_name: str = Field("cdc-processor", description="Spark application name")
    shuffle_partitions: int = Field(4, gt=0, description="`spark.sql.shuffle.partitions`")
    ui: bool = Field(False, description="Start the Spark UI")
    jars_dir: str | None = Field(
        None,
        description="Folder of jars added to the session when `master` is set "
        "(default: `./jars/spark` of the installation)",
    )
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark configuration")


class LogConfig(_Strict):
    """Logging of the job and the command line."""

    format: Literal["text", "json"] = Field(
        "text", description="Text lines, or one JSON object per line (structured logging)"
    )
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Log level (`-v` forces DEBUG)"
    )

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class MetricsConfig(_Strict):
    """Prometheus metrics of the running job (docs/operations.md), off by default."""

    enabled: bool = Field(
        False, description="Serve the metrics at `http://<host>:<port>/metrics` while the job runs"
    )
    port: int = Field(9464, ge=1, le=65535, description="TCP port of the metrics endpoint")
    host: str = Field(
        "0.0.0.0",
        description="Address the endpoint binds: `0.0.0.0` = every interface (what a Prometheus "
        "that scrapes the pod's or host's IP needs, e.g. in Kubernetes); `127.0.0.1` = this "
        "machine only",
    )


class AppConfig(_Strict):
    """Top-level configuration of the CDC processor (``cdc.yaml``)."""

    warehouse: str = Field(
        description="Root of the Delta tables: a local path or `s3a://bucket/prefix`"
    )
    checkpoints: str = Field(description="Root of the streaming checkpoints")
    datasets: dict[str, str] = Field(
        default_factory=dict, description="Dataset name → dataset definition YAML file"
    )
    landing: LandingConfig = Field(default_factory=LandingConfig)
    kafka: KafkaConfig | None = Field(None, description="Absent = landing folders only")
    allowed_locations: list[str] = Field(
        default_factory=list,
        description="A `locationUri` must resolve (after `..` and symlinks) under one of these",
    )
    trigger: TriggerConfig = Field(default_factory=TriggerConfig)
    tables: TablesConfig = Field(default_factory=TablesConfig)
    upkeep: UpkeepConfig = Field(default_factory=UpkeepConfig)
    shutdown: ShutdownConfig = Field(default_factory=ShutdownConfig)
    lease: LeaseConfig = Field(default_factory=LeaseConfig)
    storage_retry: StorageRetryConfig = Field(default_factory=StorageRetryConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    query_name: str = Field(
        "cdc", description="Streaming query name; its checkpoint is `<checkpoints>/<query_name>`"
    )
    base_dir: str = Field(
        "",
        description="Relative paths and `locationUri`s resolve here (default: the config's folder)",
    )

    @field_validator("datasets")
    @classmethod
    def _dataset_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not name.replace("_", "").isalnum():
                raise ValueError(f"dataset name {name!r} must be alphanumeric (and _)")
        return value


def _is_uri(path: str) -> bool:
    return "://" in path


def resolve_path(path: str, base: Path) -> str:
    """Absolute form of a local path relative to ``base``; URIs (s3a://, file://) are kept."""
    if _is_uri(path):
        return path
    return str((base / os.path.expanduser(path)).resolve())


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    """``CDC_A__B=v`` → ``{"a": {"b": v}}``. Values are parsed as YAML (numbers, lists, maps)."""
    tree: dict[str, Any] = {}
    for key, raw in environ.items():
        if not key.startswith(ENV_PREFIX) or key == "CDC_CONFIG":
            continue
        parts = [p.lower() for p in key[len(ENV_PREFIX) :].split(ENV_NESTING)]
        node = tree
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{key}: conflicts with another CDC_ variable")
            node = child
        try:
            node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            node[parts[-1]] = raw
    return tree


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _describe(error: ValidationError, source: str) -> str:
    lines = []
    for item in error.errors():
        key = ".".join(str(p) for p in item["loc"]) or "<root>"
        if item["type"] == "extra_forbidden":
            lines.append(f"{key}: unknown key")
        elif item["type"] == "missing":
            lines.append(f"{key}: required key is missing")
        else:
            lines.append(f"{key}: {item['msg'].removeprefix('Value error, ')}")
    return f"invalid configuration ({source}):\n  " + "\n  ".join(lines)


def parse_config(
    data: dict[str, Any],
    *,
    base: Path,
    environ: dict[str, str] | None = None,
    source: str = "config",
) -> AppConfig:
    """Validate a config mapping (plus ``CDC_*`` overrides) and resolve its relative paths."""
    merged = _deep_merge(data, _env_overrides(dict(os.environ if environ is None else environ)))
    try:
        cfg = AppConfig.model_validate(merged)
    except ValidationError as e:
        raise ConfigError(_describe(e, source)) from e
    landing = cfg.landing.model_copy(
        update={
            "transactions": resolve_path(cfg.landing.transactions, base)
            if cfg.landing.transactions
            else None,
            "dms": resolve_path(cfg.landing.dms, base) if cfg.landing.dms else None,
        }
    )
    kafka = cfg.kafka
    if kafka is not None and kafka.avro is not None:
        schemas = {
            k: v if v.startswith(BUILTIN_SCHEMA_PREFIX) else resolve_path(v, base)
            for k, v in kafka.avro.schemas.items()
        }
        registry = kafka.avro.registry
        if registry is not None:
            registry = registry.model_copy(
                update={
                    name: resolve_path(getattr(registry, name), base)
                    for name in ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location")
                    if getattr(registry, name)
                }
            )
        avro = kafka.avro.model_copy(update={"schemas": schemas, "registry": registry})
        kafka = kafka.model_copy(update={"avro": avro})
    spark = cfg.spark
    if spark.jars_dir:
        spark = spark.model_copy(update={"jars_dir": resolve_path(spark.jars_dir, base)})
    return cfg.model_copy(
        update={
            "base_dir": resolve_path(cfg.base_dir or ".", base),
            "warehouse": resolve_path(cfg.warehouse, base),
            "checkpoints": resolve_path(cfg.checkpoints, base),
            "datasets": {k: resolve_path(v, base) for k, v in cfg.datasets.items()},
            "allowed_locations": [resolve_path(p, base) for p in cfg.allowed_locations],
            "landing": landing,
            "kafka": kafka,
            "spark": spark,
        }
    )


MIN_RETENTION_SECONDS = 3600
"""The shortest time travel a table keeps (``upkeep.retention``, ``cdc maintain --vacuum``)."""


def load_config(path: str | Path | None, environ: dict[str, str] | None = None) -> AppConfig:
    """Load ``cdc.yaml`` (or only the environment when ``path`` is None)."""
    if path is None:
        return parse_config({}, base=Path.cwd(), environ=environ, source="environment")
    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    except FileNotFoundError as e:
        raise ConfigError(f"config file not found: {file}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{file}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: the top level must be a mapping of keys")
    return parse_config(data, base=file.resolve().parent, environ=environ, source=str(file))
