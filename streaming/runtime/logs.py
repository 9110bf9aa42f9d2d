"""Logging of the job and the CLI: text lines or one JSON object per line (``log.format``).

This is the product's own logging (Python). Spark's driver logs through the log4j2 configuration
the package ships (``streaming.runtime.session``); ``cdc -v`` brings Spark's default lines back.

A JSON line carries ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, the structured
fields a call passes as ``extra={"cdc": {...}}`` (e.g. the query progress: ``event``,
``batchId``, ``inputRowsPerSecond``, ``lag``) and ``exception`` when there is one.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from streaming.core.config import LogConfig
from streaming.platform.spark import GATEWAY_LOGGER

__all__ = ["QUIET_LOGGERS", "TEXT_FORMAT", "JsonFormatter", "configure_logging"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
QUIET_LOGGERS = (GATEWAY_LOGGER, "httpx2", "httpcore2", "httpx", "httpcore", "authlib")
"""Third-party loggers kept at WARNING whatever the level: py4j logs every JVM call at DEBUG,
the schema registry client's HTTP stack (httpx2) every request at INFO."""


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "cdc", None)
        if isinstance(fields, dict):
            entry.update({k: v for k, v in fields.items() if k not in entry})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is at the time (it may be replaced, e.g. by pytest)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def configure_logging(cfg: LogConfig | None = None, *, verbose: bool = False) -> logging.Handler:
    """Install (or replace) the ``cdc`` handler on the root logger; returns it. ``verbose``
    forces DEBUG. Other handlers of the root logger are left alone."""
    cfg = cfg or LogConfig()
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, _StderrHandler):
            root.removeHandler(handler)
    handler = _StderrHandler()
    handler.setFormatter(
        JsonFormatter() if cfg.format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else cfg.level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    return handler
