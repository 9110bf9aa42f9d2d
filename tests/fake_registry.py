"""A small schema registry for tests: the Confluent REST protocol's endpoints the client uses,
served on 127.0.0.1 (HTTP, or HTTPS with a certificate made for the test), checking credentials.

No Confluent-compatible registry server installs from PyPI or Maven Central, so the tests talk
to this one through confluent-kafka's real ``SchemaRegistryClient``:

``GET  /schemas/ids/{id}``                      the schema of an id (404, error code 40403)
``POST /subjects/{subject}/versions``           register (idempotent per subject and text)
``GET  /subjects/{subject}/versions/{version}`` a subject's version (for schema references)

Every request must carry the expected ``Authorization`` header (basic ``user:password``, or a
bearer token with its ``target-sr-cluster``); otherwise the answer is 401, error code 40101.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@dataclass
class Registry:
    """What the server holds and saw."""

    user: str | None = None
    password: str | None = None
    token: str | None = None
    cluster: str | None = None
    schemas: dict[int, dict[str, Any]] = field(default_factory=dict)
    subjects: dict[str, list[int]] = field(default_factory=dict)
    calls: list[tuple[str, str, int]] = field(default_factory=list)
    """(method, path, status) of every request."""
    url: str = ""

    def authorized(self, headers: Any) -> bool:
        given = headers.get("Authorization") or ""
        if self.user is not None:
            pair = f"{self.user}:{self.password}".encode()
            return bool(given == "Basic " + base64.b64encode(pair).decode())
        if self.token is not None:
            return bool(
                given == f"Bearer {self.token}" and headers.get("target-sr-cluster") == self.cluster
            )
        return True

    def add(self, subject: str, body: dict[str, Any]) -> int:
        entry = {
            "schema": body["schema"],
            "schemaType": body.get("schemaType", "AVRO"),
            "references": body.get("references", []),
        }
        for schema_id, known in self.schemas.items():
            if known == entry and schema_id in self.subjects.get(subject, []):
                return schema_id
        schema_id = 100 + len(self.schemas)
        self.schemas[schema_id] = entry
        self.subjects.setdefault(subject, []).append(schema_id)
        return schema_id


def _handler(registry: Registry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: Any) -> None:
            # Recorded before the answer is sent: once the client has its answer, a test that
            # reads ``calls`` must find the call (appended after the write, it raced the test's
            # read, and a GET the client had made was missing: a CI failure of test_avro).
            registry.calls.append((self.command, self.path, status))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self) -> None:
            if not registry.authorized(self.headers):
                self._answer(401, {"error_code": 40101, "message": "Unauthorized"})
                return
            parts = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            match (self.command, parts):
                case ("GET", ["schemas", "ids", number]) if int(number) in registry.schemas:
                    self._answer(200, registry.schemas[int(number)])
                case ("GET", ["schemas", "ids", _]):
                    self._answer(404, {"error_code": 40403, "message": "Schema not found"})
                case ("POST", ["subjects", subject, "versions"]) if isinstance(body, dict):
                    self._answer(200, {"id": registry.add(subject, body)})
                case ("GET", ["subjects", subject, "versions", version]) if (
                    subject in registry.subjects
                ):
                    ids = registry.subjects[subject]
                    position = len(ids) if version == "latest" else int(version)
                    schema_id = ids[position - 1]
                    entry = registry.schemas[schema_id]
                    self._answer(
                        200,
                        {"subject": subject, "version": position, "id": schema_id, **entry},
                    )
                case _:
                    self._answer(404, {"error_code": 40401, "message": "Subject not found"})

        do_GET = do_POST = _route

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files): (cert, key). The
    certificate is its own CA: a client trusts the server by ``ssl.ca.location`` = cert."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "registry.pem", folder / "registry.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@contextmanager
def serve(
    registry: Registry | None = None, *, tls: tuple[Path, Path] | None = None
) -> Iterator[Registry]:
    """Serve ``registry`` on 127.0.0.1 (an ephemeral port; HTTPS with ``tls`` = (cert, key))
    until the block ends; ``registry.url`` is its URL."""
    registry = registry or Registry()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(registry))
    scheme = "http"
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    registry.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield registry
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
