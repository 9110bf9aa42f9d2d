"""docker-compose.yml is for users (no Docker engine here): check it against the config instead."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from streaming.config import parse_config

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def listeners(value: str) -> dict[str, tuple[str, int]]:
    """'NAME://host:port,…' → {NAME: (host, port)}."""
    out = {}
    for item in value.split(","):
        name, _, address = item.partition("://")
        host, _, port = address.rpartition(":")
        out[name] = (host, int(port))
    return out


def mounts(service: dict[str, Any]) -> list[PurePosixPath]:
    return [PurePosixPath(v.split(":")[1]) for v in service.get("volumes", [])]


def under(path: str, roots: list[PurePosixPath]) -> bool:
    return any(PurePosixPath(path).is_relative_to(root) for root in roots)


def test_services_and_dependency() -> None:
    services = compose()["services"]
    assert {"kafka", "cdc"} <= set(services)
    assert "kafka" in services["cdc"]["depends_on"]


def test_processor_bootstrap_names_a_listener_kafka_advertises() -> None:
    services = compose()["services"]
    kafka_env = services["kafka"]["environment"]
    host, _, port = services["cdc"]["environment"]["CDC_KAFKA__BOOTSTRAP"].rpartition(":")
    assert host in ("kafka", services["kafka"].get("hostname"))
    advertised = listeners(kafka_env["KAFKA_ADVERTISED_LISTENERS"])
    assert (host, int(port)) in advertised.values()
    bound = listeners(kafka_env["KAFKA_LISTENERS"])
    assert all(name in bound and bound[name][1] == p for name, (_, p) in advertised.items())
    assert kafka_env["KAFKA_CONTROLLER_LISTENER_NAMES"] in bound


def test_published_port_is_the_external_listener() -> None:
    kafka = compose()["services"]["kafka"]
    advertised = listeners(kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"])
    published = {int(p.split(":")[0]): int(p.split(":")[1]) for p in kafka["ports"]}
    host, port = advertised["EXTERNAL"]
    assert host == "localhost" and published.get(port) == port


def test_processor_paths_live_on_volumes_and_the_config_validates() -> None:
    data = compose()
    cdc = data["services"]["cdc"]
    roots = mounts(cdc)
    named = {v.split(":")[0] for v in cdc["volumes"] if not v.startswith((".", "/"))}
    assert named <= set(data["volumes"])
    env = {k: str(v) for k, v in cdc["environment"].items()}
    for key in (
        "CDC_WAREHOUSE",
        "CDC_CHECKPOINTS",
        "CDC_LANDING__TRANSACTIONS",
        "CDC_LANDING__DMS",
    ):
        assert under(env[key], roots), key
    config_file = PurePosixPath(env["CDC_CONFIG"])
    text = (ROOT / config_file.name).read_text()
    cfg = parse_config(yaml.safe_load(text), base=Path("/app"), environ=env)
    for path in (cfg.warehouse, cfg.checkpoints, *cfg.allowed_locations):
        assert under(path, roots), path
    for dataset in cfg.datasets.values():
        assert (ROOT / PurePosixPath(dataset).relative_to("/app")).is_file(), dataset


def test_dockerfile_resolves_the_pinned_jars_and_ships_the_config() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY pom.xml" in dockerfile
    assert "-P spark dependency:copy-dependencies" in dockerfile
    assert "COPY cdc.docker.yaml" in dockerfile
    assert "openjdk-17" in dockerfile
