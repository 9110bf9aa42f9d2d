"""Secrets of the Kafka client settings, kept out of every message and log line.

The Kafka option maps (``kafka.options``, ``kafka.spark_options``, ``kafka.client_options``) hold
plain strings, so what is secret is decided by the key: a key naming a password, a secret, a
token, basic-auth user info or a private key is secret as a whole; in a JAAS configuration
(``sasl.jaas.config``) the options naming a password, a secret or a token are (``password="…"``),
the rest of it (login module, ``username``) is not. A redacted value reads ``**********``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = [
    "JAAS_KEY",
    "MASK",
    "is_secret_key",
    "option_secrets",
    "redact_options",
    "redact_value",
    "scrub",
]

MASK = "**********"

JAAS_KEY = "sasl.jaas.config"

_SECRET_KEY = re.compile(
    r"password|secret|user\.info|(?:^|\.)token$|^ssl\.key\.pem$|^ssl\.keystore\.key$"
    r"|^sasl\.oauthbearer\.config$",
    re.IGNORECASE,
)
_JAAS_SECRET = re.compile(
    r"""(?P<name>[\w.-]*(?:password|secret|token)[\w.-]*)\s*=\s*"""
    r"""(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;"]+))""",
    re.IGNORECASE,
)


def is_secret_key(key: str) -> bool:
    """Whether the whole value of the Kafka option ``key`` is a secret."""
    return bool(_SECRET_KEY.search(key))


def _mask_jaas(match: re.Match[str]) -> str:
    masked = f'"{MASK}"' if match.group("quoted") is not None else MASK
    return f"{match.group('name')}={masked}"


def redact_value(key: str, value: str) -> str:
    """``value`` of the option ``key`` as it may be shown."""
    if is_secret_key(key):
        return MASK
    if key == JAAS_KEY:
        return _JAAS_SECRET.sub(_mask_jaas, value)
    return value


def redact_options(options: Mapping[str, str]) -> dict[str, str]:
    """The options as they may be shown: secrets replaced by ``**********``."""
    return {key: redact_value(key, value) for key, value in options.items()}


def option_secrets(options: Mapping[str, str]) -> list[str]:
    """The secret values of ``options`` (whole values, and those inside a JAAS config both as
    written and unescaped), to be blanked out of any text with ``scrub``."""
    found: list[str] = []
    for key, value in options.items():
        if is_secret_key(key):
            found.append(value)
        elif key == JAAS_KEY:
            for match in _JAAS_SECRET.finditer(value):
                raw = match.group("quoted")
                if raw is None:
                    found.append(match.group("bare"))
                else:
                    found += [raw, re.sub(r"\\(.)", r"\1", raw)]
    return [s for s in dict.fromkeys(found) if s]


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of a secret replaced by ``**********`` (longest first, so
    a secret that contains another is blanked whole)."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
