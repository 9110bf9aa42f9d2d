"""docker-compose.yml, the Dockerfile and cdc.docker.yaml agree with each other.

No Docker engine runs here, so the three files are parsed and cross-checked instead: every
check is a line of ``problems()``, and each one is shown to fire on a broken copy of the files.
"""

from __future__ import annotations

import copy
import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from streaming.core.config import parse_config
from streaming.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONFIG_FILE = "cdc.docker.yaml"


@dataclass
class Setup:
    compose: dict[str, Any]
    config: dict[str, Any]  # cdc.docker.yaml
    dockerfile: str | None  # None: there is no Dockerfile
    header: str = ""  # docker-compose.yml's comment lines: the commands it tells users to run
    repo: Path = ROOT


def load() -> Setup:
    dockerfile = ROOT / "Dockerfile"
    text = (ROOT / "docker-compose.yml").read_text()
    return Setup(
        compose=yaml.safe_load(text),
        config=yaml.safe_load((ROOT / CONFIG_FILE).read_text()),
        dockerfile=dockerfile.read_text() if dockerfile.is_file() else None,
        header="\n".join(line for line in text.splitlines() if line.startswith("#   docker")),
    )


# -- parsing ---------------------------------------------------------------------------------
def listeners(value: str) -> dict[str, tuple[str, int]]:
    """``NAME://host:port,…`` → ``{NAME: (host, port)}`` (an empty host means all interfaces)."""
    out: dict[str, tuple[str, int]] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, _, address = item.partition("://")
        host, _, port = address.rpartition(":")
        out[name] = (host, int(port))
    return out


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.partition("=")[::2] for item in env)
    return {str(k): str(v) for k, v in env.items()}


def mounts(service: dict[str, Any]) -> dict[PurePosixPath, str]:
    """Container path → source (named volume or host path), short and long syntax."""
    out: dict[PurePosixPath, str] = {}
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            out[PurePosixPath(volume["target"])] = str(volume.get("source", ""))
        else:
            source, _, rest = str(volume).partition(":")
            out[PurePosixPath(rest.split(":")[0] if rest else source)] = source if rest else ""
    return out


def under(path: str, roots: list[PurePosixPath]) -> bool:
    return any(PurePosixPath(path).is_relative_to(root) for root in roots)


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction; continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in dockerfile.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        out.append((keyword.upper(), args.strip()))
        pending = ""
    return out


def stages(steps: list[tuple[str, str]]) -> list[tuple[str | None, list[tuple[str, str]]]]:
    """(the stage's name, its instructions) per ``FROM``, in order; the last is the image."""
    out: list[tuple[str | None, list[tuple[str, str]]]] = []
    for keyword, args in steps:
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            out.append((name, []))
        elif out:
            out[-1][1].append((keyword, args))
    return out


def duration_seconds(text: str) -> float:
    """Compose's durations: ``30s``, ``1m30s``, ``90`` (seconds)."""
    total, number = 0.0, ""
    units = {"h": 3600, "m": 60, "s": 1}
    for char in str(text):
        if char.isdigit() or char == ".":
            number += char
        else:
            total += float(number) * units[char]
            number = ""
    return total + (float(number) if number else 0.0)


def exec_form(args: str) -> list[str]:
    return list(json.loads(args)) if args.startswith("[") else shlex.split(args)


def image_files(repo: Path, steps: list[tuple[str, str]]) -> dict[PurePosixPath, Path]:
    """Where each repository file or folder that a COPY takes lands in the image."""
    workdir = PurePosixPath("/")
    out: dict[PurePosixPath, Path] = {}
    for keyword, args in steps:
        if keyword == "WORKDIR":
            workdir = workdir / args
        elif keyword == "COPY" and not args.startswith("--from"):
            *sources, dest = [a for a in shlex.split(args) if not a.startswith("--")]
            target = workdir / dest
            into_folder = dest.endswith("/") or dest == "." or len(sources) > 1
            for source in sources:
                src = repo / source
                # a file lands in the folder or as the named file; a folder's content is copied
                out[target / src.name if src.is_file() and into_folder else target] = src
    return out


def in_image(path: str, files: dict[PurePosixPath, Path]) -> Path | None:
    """The repository file behind an image path, if some COPY puts it there."""
    wanted = PurePosixPath(path)
    for landed, source in files.items():
        if wanted == landed:
            return source
        if wanted.is_relative_to(landed) and source.is_dir():
            return source / wanted.relative_to(landed)
    return None


def option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.partition("=")[2]
    return None


# -- the checks ------------------------------------------------------------------------------
def problems(setup: Setup) -> list[str]:
    """Every disagreement between the three files, as readable sentences."""
    found: list[str] = []
    services = setup.compose.get("services") or {}
    for name in ("kafka", "cdc"):
        if name not in services:
            found.append(f"no {name} service")
    if found:
        return found
    kafka, cdc = services["kafka"], services["cdc"]
    kafka_names = {"kafka", kafka.get("hostname"), kafka.get("container_name")} - {None}
    declared_volumes = set(setup.compose.get("volumes") or {})

    # -- kafka: listeners, quorum, storage
    kenv = environment(kafka)
    for key in (
        "KAFKA_NODE_ID",
        "KAFKA_PROCESS_ROLES",
        "KAFKA_LISTENERS",
        "KAFKA_ADVERTISED_LISTENERS",
        "KAFKA_CONTROLLER_LISTENER_NAMES",
        "KAFKA_CONTROLLER_QUORUM_VOTERS",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
    ):
        if key not in kenv:
            found.append(f"kafka: {key} is not set")
    if found:
        return found
    if set(kenv["KAFKA_PROCESS_ROLES"].split(",")) != {"broker", "controller"}:
        found.append("kafka: KAFKA_PROCESS_ROLES must be broker,controller (single KRaft node)")
    bound = listeners(kenv["KAFKA_LISTENERS"])
    advertised = listeners(kenv["KAFKA_ADVERTISED_LISTENERS"])
    protocols = dict(p.split(":") for p in kenv["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    controller = kenv["KAFKA_CONTROLLER_LISTENER_NAMES"]
    for name, (_, port) in advertised.items():
        if name not in bound or bound[name][1] != port:
            found.append(f"kafka: advertised listener {name} port {port} is not a KAFKA_LISTENERS")
    for name in bound:
        if name not in protocols:
            found.append(f"kafka: listener {name} has no security protocol")
    if controller not in bound:
        found.append(f"kafka: controller listener {controller} is not in KAFKA_LISTENERS")
    if controller in advertised:
        found.append("kafka: the controller listener must not be advertised")
    inter = kenv.get("KAFKA_INTER_BROKER_LISTENER_NAME")
    if inter is not None and inter not in advertised:
        found.append(f"kafka: inter-broker listener {inter} is not advertised")
    for voter in kenv["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(","):
        node, _, address = voter.partition("@")
        voter_host, _, voter_port = address.rpartition(":")
        if (
            node != kenv["KAFKA_NODE_ID"]
            or voter_host not in kafka_names
            or (controller in bound and int(voter_port) != bound[controller][1])
        ):
            found.append(f"kafka: quorum voter {voter} is not this node's controller listener")
    for key in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ):
        if kenv.get(key) != "1":
            found.append(f"kafka: {key} must be 1 on a single node")
    kafka_mounts = mounts(kafka)
    log_dirs = kenv.get("KAFKA_LOG_DIRS", "/tmp/kraft-combined-logs")
    if not all(under(d, list(kafka_mounts)) for d in log_dirs.split(",")):
        found.append(f"kafka: KAFKA_LOG_DIRS {log_dirs} is not on a volume (data lost on restart)")

    # -- the port published to the host is the EXTERNAL listener
    if "EXTERNAL" not in advertised:
        found.append("kafka: no EXTERNAL advertised listener for clients on the host")
    else:
        host, port = advertised["EXTERNAL"]
        published: dict[int, int] = {}
        for entry in kafka.get("ports") or []:
            host_port, _, container_port = str(entry).rpartition(":")
            published[int(container_port.split("/")[0])] = int(host_port.rpartition(":")[2])
        if host not in ("localhost", "127.0.0.1") or published.get(port) != port:
            found.append(
                f"kafka: EXTERNAL advertises {host}:{port} but the published ports are "
                f"{kafka.get('ports')}"
            )

    # -- cdc: depends on kafka, reaches it on an advertised listener
    if "kafka" not in (cdc.get("depends_on") or []):
        found.append("cdc: does not depend on kafka")
    elif isinstance(cdc["depends_on"], dict):
        condition = (cdc["depends_on"]["kafka"] or {}).get("condition")
        if condition == "service_healthy" and "healthcheck" not in kafka:
            found.append("cdc: waits for kafka to be healthy but kafka has no healthcheck")
    cenv = environment(cdc)
    bootstrap = cenv.get("CDC_KAFKA__BOOTSTRAP", "")
    for address in filter(None, bootstrap.split(",")):
        server, _, server_port = address.rpartition(":")
        if server not in kafka_names:
            found.append(f"cdc: CDC_KAFKA__BOOTSTRAP {address} is not the kafka service")
        elif (server, int(server_port)) not in advertised.values():
            found.append(f"cdc: CDC_KAFKA__BOOTSTRAP {address} is no listener kafka advertises")
    if not bootstrap:
        found.append("cdc: CDC_KAFKA__BOOTSTRAP is not set")
    if (setup.config.get("kafka") or {}).get("bootstrap") != bootstrap:
        found.append(f"{CONFIG_FILE}: kafka.bootstrap differs from CDC_KAFKA__BOOTSTRAP")

    # -- volumes
    for service_name, service in services.items():
        for target, source in mounts(service).items():
            if source and not source.startswith((".", "/", "~")) and source not in declared_volumes:
                found.append(f"{service_name}: volume {source} ({target}) is not declared")
    cdc_mounts = list(mounts(cdc))

    # -- the Dockerfile: a build stage may resolve the jars; the last stage is the image
    if setup.dockerfile is None:
        found.append("no Dockerfile")
        return found
    every = instructions(setup.dockerfile)
    if every and every[0][0] != "FROM":
        found.append("Dockerfile: does not start with FROM")
    built = stages(every)
    steps = built[-1][1] if built else every
    files = image_files(setup.repo, steps)
    image_env: dict[str, str] = {}
    for keyword, args in steps:
        if keyword == "ENV":
            image_env.update(item.partition("=")[::2] for item in shlex.split(args))
    runs = [shlex.split(args) for keyword, args in steps if keyword == "RUN"]
    if not any("openjdk-17" in arg for run in runs for arg in run):
        found.append("Dockerfile: Java 17 (openjdk-17-*) is not installed")
    if any(
        a in ("maven", "openjdk-17-jdk", "openjdk-17-jdk-headless") for run in runs for a in run
    ):
        found.append("Dockerfile: the image keeps build tools (Maven or a JDK): build them apart")
    users = [a.split(":")[0] for k, a in steps if k == "USER"]
    if not users or users[-1] in ("root", "0"):
        found.append("Dockerfile: the image runs as root (no USER of its own)")
    jars = image_env.get("CDC_SPARK__JARS_DIR")
    # Where mvn puts the jars, in the image: its own output, or copied from its stage's output.
    mvn_at: tuple[str | None, int] | None = None
    for name, stage_steps in built:
        for i, (k, a) in enumerate(stage_steps):
            if k == "RUN" and "mvn " in a:
                mvn_at = (name, i)
                mvn_steps = stage_steps
    if mvn_at is None:
        found.append("Dockerfile: never runs mvn")
    else:
        stage, mvn = mvn_at
        pom = next(
            (i for i, (k, a) in enumerate(mvn_steps) if k == "COPY" and "pom.xml" in a.split()),
            None,
        )
        if pom is None:
            found.append("Dockerfile: pom.xml is not copied")
        elif pom > mvn:
            found.append("Dockerfile: mvn runs before pom.xml is copied")
        mvn_args = mvn_steps[mvn][1].split()
        output = option(mvn_args, "-DoutputDirectory")
        if "dependency:copy-dependencies" not in mvn_args or "spark" not in mvn_args:
            found.append("Dockerfile: mvn does not copy the spark profile's dependencies")
        workdir = next((a for k, a in reversed(mvn_steps[:mvn]) if k == "WORKDIR"), "/")
        made = PurePosixPath(workdir, output) if output else None
        landed = made if mvn_steps is steps else None
        if mvn_steps is not steps and made is not None:
            for k, a in steps:
                words = a.split()
                if k == "COPY" and f"--from={stage}" in words and PurePosixPath(words[-2]) == made:
                    image_workdir = next((w for kk, w in steps if kk == "WORKDIR"), "/")
                    landed = PurePosixPath(image_workdir, words[-1])
        if landed is None or jars is None or landed != PurePosixPath(jars):
            found.append(f"Dockerfile: CDC_SPARK__JARS_DIR {jars} is not where mvn puts the jars")
    if not any(k == "RUN" and "pip install" in a for k, a in steps):
        found.append("Dockerfile: never pip-installs the project")
    override = cdc.get("command")  # replaces the image's CMD
    cmd = next((exec_form(a) for k, a in reversed(steps) if k == "CMD"), [])
    command = exec_form(override) if isinstance(override, str) else list(override or cmd)
    config_path = (
        option(command, "--config") or cenv.get("CDC_CONFIG") or image_env.get("CDC_CONFIG")
    )
    if command[:2] != ["cdc", "run"]:
        found.append(f"cdc: the container command {command} is not `cdc run`")
    if config_path is None or in_image(config_path, files) != setup.repo / CONFIG_FILE:
        found.append(f"cdc: the config it runs with ({config_path}) is not {CONFIG_FILE}")
    for where, env in (("compose", cenv), ("Dockerfile", image_env)):
        if env.get("CDC_CONFIG", config_path) != config_path:  # `cdc publish` etc. read it
            found.append(f"cdc: CDC_CONFIG in {where} is not {config_path}, the one `run` uses")

    # -- every path the processor writes or reads lies on a volume
    for key, value in {**image_env, **cenv}.items():
        if not key.startswith("CDC_") or not value.startswith("/"):
            continue
        if key in ("CDC_CONFIG", "CDC_SPARK__JARS_DIR"):  # inside the image: checked above
            continue
        if not under(value, cdc_mounts):
            found.append(f"cdc: {key}={value} is not on a mounted volume")
    raw = setup.config
    raw_paths = {
        "warehouse": raw.get("warehouse"),
        "checkpoints": raw.get("checkpoints"),
        **{f"landing.{k}": (raw.get("landing") or {}).get(k) for k in ("transactions", "dms")},
        **{f"allowed_locations[{i}]": v for i, v in enumerate(raw.get("allowed_locations") or [])},
    }
    for key, value in raw_paths.items():
        if key.startswith("allowed_locations") and isinstance(value, str):
            shipped = in_image(value, files)
            if shipped is not None and shipped.is_dir():
                continue  # sample data the image holds
        if not isinstance(value, str) or not under(value, cdc_mounts):
            found.append(f"{CONFIG_FILE}: {key} ({value}) is not on a mounted volume")
    try:
        cfg = parse_config(copy.deepcopy(raw), base=Path("/app"), environ={**image_env, **cenv})
    except ConfigError as e:
        found.append(f"{CONFIG_FILE}: does not validate: {e}")
        return found
    for path in (cfg.warehouse, cfg.checkpoints, cfg.landing.transactions, cfg.landing.dms):
        if path is None or not under(path, cdc_mounts):
            found.append(f"{CONFIG_FILE} + environment: {path} is not on a mounted volume")
    for name, dataset in cfg.datasets.items():
        shipped = in_image(dataset, files)
        if shipped is None or not shipped.is_file():
            found.append(f"{CONFIG_FILE}: dataset {name} ({dataset}) is not a file in the image")

    # -- stopping and metrics
    grace = cfg.shutdown.grace_seconds
    stop = duration_seconds(cdc.get("stop_grace_period", "10s"))
    if stop < grace + 10:
        found.append(
            f"cdc: stop_grace_period {stop:g} s is not shutdown.grace_period ({grace} s) + 10 s: "
            "Docker would kill a batch that is finishing"
        )
    if not cfg.metrics.enabled or cfg.metrics.host not in ("0.0.0.0", "::"):
        found.append(f"{CONFIG_FILE}: metrics are not served to other containers (metrics.*)")
    ports = [str(p).rpartition(":")[2].split("/")[0] for p in cdc.get("ports") or []]
    if str(cfg.metrics.port) not in ports:
        found.append(f"cdc: the metrics port {cfg.metrics.port} is not published")

    # -- the header's commands use files the image holds
    allowed = [PurePosixPath(p) for p in cfg.allowed_locations]
    for line in setup.header.splitlines():
        words = shlex.split(line.lstrip("# "))
        if words[:5] == ["docker", "compose", "exec", "cdc", "cdc"] and words[5:6] == ["publish"]:
            for path in words[6:]:
                shipped = in_image(path, files)
                if shipped is None or not shipped.is_file():
                    found.append(f"header: `cdc publish {path}`: no such file in the image")
                    continue
                for request in shipped.read_text().splitlines():
                    for action in json.loads(request)["actions"]:
                        uri = action.get("locationUri", "")
                        if in_image(uri, files) is None or not under(uri, allowed):
                            found.append(f"header: {path} reads {uri}: not allowed or not there")
    found.extend(feed_problems(setup, services, cfg))
    return found


def feed_problems(setup: Setup, services: dict[str, Any], cfg: Any) -> list[str]:
    """Profile ``cdc``: PostgreSQL, Connect with Debezium, the connector's registration, and the
    job's change feed agree (the tutorial's section 7 runs with ``--profile cdc up``)."""
    found: list[str] = []
    wanted = ("postgres", "connect", "connector")
    for name in wanted:
        if name not in services:
            found.append(f"profile cdc: no {name} service")
        elif "cdc" not in (services[name].get("profiles") or []):
            found.append(f"{name}: not in profile cdc (it would start with every `up`)")
    if found:
        return found
    postgres, connect, connector = (services[n] for n in wanted)
    penv = environment(postgres)
    if "wal_level=logical" not in " ".join(postgres.get("command") or []):
        found.append("postgres: wal_level=logical is not set (no logical decoding)")
    init = next(
        (
            setup.repo / source
            for target, source in mounts(postgres).items()
            if target.is_relative_to("/docker-entrypoint-initdb.d")
        ),
        None,
    )
    connector_file = next(
        (setup.repo / source for source in mounts(connector).values() if source.endswith(".json")),
        None,
    )
    if init is None or not init.is_file():
        found.append("postgres: no init script from the repository creates the tables")
    if connector_file is None or not connector_file.is_file():
        found.append("connector: no connector config from the repository")
        return found
    config = json.loads(connector_file.read_text())
    command = " ".join(connector.get("command") or [])
    if "connect:8083/connectors/" not in command or f"@/{connector_file.name}" not in command:
        found.append("connector: does not send its config to the connect service")
    cenv = environment(connect)
    if cenv.get("BOOTSTRAP_SERVERS") != cfg.kafka.bootstrap:
        found.append("connect: BOOTSTRAP_SERVERS is not the broker the job reads")
    expected = {
        "database.hostname": "postgres",
        "database.user": penv.get("POSTGRES_USER"),
        "database.password": penv.get("POSTGRES_PASSWORD"),
        "database.dbname": penv.get("POSTGRES_DB"),
        "provide.transaction.metadata": "true",
    }
    for key, value in expected.items():
        if config.get(key) != value:
            found.append(f"connector: {key} is {config.get(key)!r}, not {value!r}")
    feeds = [f for f in cfg.kafka.change_feeds if f.topic_prefix == config.get("topic.prefix")]
    if not feeds:
        found.append(
            f"{CONFIG_FILE}: no change feed reads topic.prefix {config.get('topic.prefix')}"
        )
        return found
    included = set(str(config.get("table.include.list", "")).split(","))
    script = init.read_text() if init is not None and init.is_file() else ""
    for source in feeds[0].tables.values():
        if source not in included:
            found.append(f"connector: table.include.list lacks {source}, which the feed maps")
        if f"CREATE TABLE {source.split('.')[-1]} " not in script:
            found.append(f"postgres: the init script does not create {source}")
    return found


# -- tests -----------------------------------------------------------------------------------
def test_compose_dockerfile_and_container_config_agree() -> None:
    assert problems(load()) == []


def test_the_config_names_what_the_processor_expects() -> None:
    setup = load()
    cdc = setup.compose["services"]["cdc"]
    assert setup.config["kafka"]["transactions_topic"] == "cdc.transactions"
    assert setup.config["kafka"]["outcomes_topic"] == "cdc.outcomes"
    assert set(environment(cdc)) >= {
        "CDC_KAFKA__BOOTSTRAP",
        "CDC_WAREHOUSE",
        "CDC_CHECKPOINTS",
        "CDC_LANDING__TRANSACTIONS",
        "CDC_LANDING__DMS",
    }
    assert setup.compose["services"]["kafka"]["image"] == "apache/kafka:4.2.0"
    assert any(
        target == PurePosixPath("/var/lib/kafka/data")
        for target in mounts(setup.compose["services"]["kafka"])
    )


def _env(setup: Setup, service: str) -> dict[str, Any]:
    env: dict[str, Any] = setup.compose["services"][service]["environment"]
    return env


def _drop_volume(setup: Setup, target: str) -> None:
    cdc = setup.compose["services"]["cdc"]
    cdc["volumes"] = [v for v in cdc["volumes"] if str(v).split(":")[1] != target]


def _dockerfile(old: str, new: str) -> Callable[[Setup], None]:
    def edit(setup: Setup) -> None:
        assert setup.dockerfile is not None and old in setup.dockerfile
        setup.dockerfile = setup.dockerfile.replace(old, new)

    return edit


BREAKAGES: dict[str, tuple[Callable[[Setup], None], str]] = {
    "no kafka service": (lambda s: s.compose["services"].pop("kafka"), "no kafka service"),
    "cdc without depends_on": (
        lambda s: s.compose["services"]["cdc"].pop("depends_on"),
        "does not depend on kafka",
    ),
    "bootstrap on another host": (
        lambda s: _env(s, "cdc").update(CDC_KAFKA__BOOTSTRAP="broker:9092"),
        "is not the kafka service",
    ),
    "bootstrap on the controller port": (
        lambda s: _env(s, "cdc").update(CDC_KAFKA__BOOTSTRAP="kafka:9093"),
        "no listener kafka advertises",
    ),
    "config bootstrap differs": (
        lambda s: s.config["kafka"].update(bootstrap="localhost:9094"),
        "kafka.bootstrap differs",
    ),
    "published port is not EXTERNAL": (
        lambda s: s.compose["services"]["kafka"].update(ports=["9095:9094"]),
        "EXTERNAL advertises",
    ),
    "EXTERNAL bound elsewhere": (
        lambda s: _env(s, "kafka").update(
            KAFKA_LISTENERS="INTERNAL://:9092,CONTROLLER://:9093,EXTERNAL://:9095"
        ),
        "advertised listener EXTERNAL port 9094",
    ),
    "quorum voter on the broker port": (
        lambda s: _env(s, "kafka").update(KAFKA_CONTROLLER_QUORUM_VOTERS="1@kafka:9092"),
        "quorum voter",
    ),
    "kafka data off its volume": (
        lambda s: _env(s, "kafka").update(KAFKA_LOG_DIRS="/tmp/kafka-logs"),
        "KAFKA_LOG_DIRS",
    ),
    "replication factor 3": (
        lambda s: _env(s, "kafka").update(KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR="3"),
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR must be 1",
    ),
    "warehouse env off the volumes": (
        lambda s: _env(s, "cdc").update(CDC_WAREHOUSE="/warehouse"),
        "CDC_WAREHOUSE=/warehouse is not on a mounted volume",
    ),
    "warehouse volume unmounted": (
        lambda s: _drop_volume(s, "/data/warehouse"),
        "CDC_WAREHOUSE=/data/warehouse is not on a mounted volume",
    ),
    "landing volume undeclared": (
        lambda s: s.compose["volumes"].pop("landing"),
        "volume landing (/data/landing) is not declared",
    ),
    "config checkpoints off the volumes": (
        lambda s: s.config.update(checkpoints="/tmp/checkpoints"),
        "checkpoints (/tmp/checkpoints) is not on a mounted volume",
    ),
    "config allowed location off the volumes": (
        lambda s: s.config.update(allowed_locations=["/data"]),
        "allowed_locations[0] (/data) is not on a mounted volume",
    ),
    "dataset not in the image": (
        lambda s: s.config.update(datasets={"petstore": "/app/examples/petstore/petstore.yaml"}),
        "dataset petstore",
    ),
    "invalid config": (lambda s: s.config.update(trigger={"every": "5s"}), "does not validate"),
    "no Dockerfile": (lambda s: setattr(s, "dockerfile", None), "no Dockerfile"),
    "pom.xml not copied": (_dockerfile("COPY pom.xml ./\n", ""), "pom.xml is not copied"),
    "mvn never runs": (
        _dockerfile("RUN mvn ", "RUN echo "),
        "never runs mvn",
    ),
    "jars elsewhere": (
        _dockerfile("-DoutputDirectory=jars/spark", "-DoutputDirectory=/opt/jars"),
        "CDC_SPARK__JARS_DIR",
    ),
    "no Java": (_dockerfile("openjdk-17-jre-headless", "default-jre"), "Java 17"),
    "config not shipped": (
        _dockerfile("COPY cdc.docker.yaml ./\n", ""),
        "is not cdc.docker.yaml",
    ),
    "maven in the image": (
        _dockerfile("openjdk-17-jre-headless", "openjdk-17-jre-headless maven"),
        "keeps build tools",
    ),
    "runs as root": (_dockerfile("USER cdc\n", ""), "runs as root"),
    "jars not copied from their stage": (
        _dockerfile("COPY --from=jars /build/jars/spark ./jars/spark\n", ""),
        "CDC_SPARK__JARS_DIR",
    ),
    "short stop grace period": (
        lambda s: s.compose["services"]["cdc"].update(stop_grace_period="10s"),
        "stop_grace_period 10 s",
    ),
    "metrics off": (
        lambda s: s.config["metrics"].update(enabled=False),
        "metrics are not served",
    ),
    "metrics port unpublished": (
        lambda s: s.compose["services"]["cdc"].pop("ports"),
        "metrics port 9464 is not published",
    ),
    "header publishes a file nothing creates": (
        lambda s: setattr(
            s, "header", "#   docker compose exec cdc cdc publish /data/landing/requests.jsonl"
        ),
        "no such file in the image",
    ),
    "sample data not allowed": (
        lambda s: s.config.update(allowed_locations=["/data/input", "/data/landing"]),
        "not allowed or not there",
    ),
    "no connect service": (lambda s: s.compose["services"].pop("connect"), "no connect service"),
    "postgres outside the profile": (
        lambda s: s.compose["services"]["postgres"].pop("profiles"),
        "postgres: not in profile cdc",
    ),
    "no logical decoding": (
        lambda s: s.compose["services"]["postgres"].update(command=["postgres"]),
        "wal_level=logical",
    ),
    "connect on another broker": (
        lambda s: _env(s, "connect").update(BOOTSTRAP_SERVERS="broker:9092"),
        "BOOTSTRAP_SERVERS is not the broker",
    ),
    "feed on another prefix": (
        lambda s: s.config["kafka"]["change_feeds"][0].update(topic_prefix="other"),
        "no change feed reads topic.prefix pg",
    ),
    "feed maps a table the connector leaves out": (
        lambda s: s.config["kafka"]["change_feeds"][0].update(
            tables={"shop.Customer": "public.clients"}
        ),
        "table.include.list lacks public.clients",
    ),
    "connector with another password": (
        lambda s: _env(s, "postgres").update(POSTGRES_PASSWORD="secret"),
        "database.password",
    ),
    "command runs another config": (
        lambda s: s.compose["services"]["cdc"].update(
            command=["cdc", "run", "--config", "/app/other.yaml"]
        ),
        "is not cdc.docker.yaml",
    ),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_every_check_catches_a_broken_copy(breakage: str) -> None:
    setup = load()
    setup.compose, setup.config = copy.deepcopy(setup.compose), copy.deepcopy(setup.config)
    edit, expected = BREAKAGES[breakage]
    edit(setup)
    found = problems(setup)
    assert any(expected in p for p in found), found
