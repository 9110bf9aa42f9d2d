"""The job configuration: ``cdc.yaml`` validated by pydantic, every key overridable by ``CDC_*``.

Environment overrides use ``__`` for nesting: ``CDC_KAFKA__BOOTSTRAP=host:9092``,
``CDC_TRIGGER__INTERVAL="10 seconds"``. Relative paths are resolved against the directory of the
config file (or the working directory when there is no file), so a config means the same thing
wherever the job is started from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from streaming.errors import ConfigError

ENV_PREFIX = "CDC_"
ENV_NESTING = "__"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


BUILTIN_SCHEMA_PREFIX = "builtin:"
"""``kafka.avro.schemas`` values starting with this name a schema shipped with the package:
``builtin:transaction_request`` or ``builtin:outcome`` (streaming/resources/schemas/*.avsc)."""


class AvroConfig(_Strict):
    """Avro in the Confluent wire format (magic byte 0, 4-byte schema id, Avro binary body)."""

    registry_url: str | None = Field(
        None,
        description="Schema registry URL: schemas are fetched by id (`GET /schemas/ids/{id}`) "
        "and cached; a missing request/outcome schema id is obtained by registering the "
        "shipped schema under `<topic>-value`",
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
        description="Schema id the job writes outcomes with (required without `registry_url`; "
        "with a registry and none: registered)",
    )

    @field_validator("request_schema_id", "outcome_schema_id")
    @classmethod
    def _known_locally(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None or info.data.get("registry_url"):
            return value
        if value not in info.data.get("schemas", {}):
            raise ValueError(f"schema id {value} is not in kafka.avro.schemas (no registry_url)")
        return value


JAVA_ONLY_KAFKA_KEYS = ("sasl.jaas.config", "ssl.truststore.")
"""Kafka options (by prefix) of the Java client that librdkafka refuses
(JAAS configuration, Java trust stores; librdkafka takes ``sasl.username``/``sasl.password`` and
PEM files, ``ssl.ca.location``). Other keys librdkafka does not know fail when the client starts,
with librdkafka's "No such configuration property"."""


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
        "earliest", description="Where a new checkpoint starts reading the requests topic"
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
        description="Avro schemas; required with `format: avro` (`registry_url` or `schemas`)",
    )

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
        if value is None or (not value.registry_url and not value.schemas):
            raise ValueError("required with format avro: give registry_url or schemas")
        if not value.registry_url and value.outcome_schema_id is None:
            raise ValueError(
                "outcome_schema_id is required with format avro and no registry_url "
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
    spark: SparkConfig = Field(default_factory=SparkConfig)
    log: LogConfig = Field(default_factory=LogConfig)
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
        avro = kafka.avro.model_copy(update={"schemas": schemas})
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
