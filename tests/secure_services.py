"""Secured services for the tests, each on free ports in a folder of its own: a Kafka node with a
SASL_SSL listener (SCRAM-SHA-512), a MariaDB that requires TLS, a TLS-only redis-server with an ACL
user. Each is a context manager yielding the Airflow Connection (JSON form) that reaches it, with a
CA made for the test. Used by the per-service tests (tests/integration/test_*_security.py,
test_kafka_sasl_ssl.py, test_mysql_tls.py) and by the whole secured deployment
(tests/dags/test_secured_deployment.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import ipaddress
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lagsched_dev.stack.config import StackConfig, stack_secrets
from lagsched_dev.stack.services import MYSQL_USER, Kafka, MariaDB

KAFKA_USER, KAFKA_PASSWORD = "lagsched-app", "k4fka-SCRAM-pw"
REDIS_USER, REDIS_PASSWORD = "lagsched-app", "s3cret-Redis-pw"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate for 127.0.0.1 signed by it: (ca.pem, server.pem, server.key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("lagsched test CA"))
        .issuer_name(name("lagsched test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


class SaslSslKafka(Kafka):
    """The stack's Kafka node plus a SASL_SSL listener (SCRAM-SHA-512) on ``secure_port``."""

    name = "kafka-sasl-ssl"

    def __init__(self, cfg: StackConfig, secure_port: int, keystore: Path) -> None:
        super().__init__(cfg)
        self.secure_port, self.keystore = secure_port, keystore

    def _write_config(self) -> Path:
        path = super()._write_config()
        props = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        c, port = self.cfg, self.secure_port
        props.update(
            {
                "listeners": f"PLAINTEXT://127.0.0.1:{c.kafka_port},SASL_SSL://127.0.0.1:{port},"
                f"CONTROLLER://127.0.0.1:{c.kafka_controller_port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{c.kafka_port},SASL_SSL://127.0.0.1:{port}",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                ),
                "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
                "listener.name.sasl_ssl.ssl.keystore.location": str(self.keystore),
            }
        )
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def prepare(self) -> None:
        config = self._write_config()
        if (self.dir / "data" / "meta.properties").exists():
            return
        scram = f"SCRAM-SHA-512=[name={KAFKA_USER},password={KAFKA_PASSWORD}]"
        self._format_storage(config, "lagsched-sasl-ssl-test", "--standalone", "--add-scram", scram)


@contextlib.contextmanager
def sasl_ssl_kafka(stack: StackConfig) -> Iterator[dict[str, Any]]:
    """A SASL_SSL Kafka node; yields its Connection extra (confluent-kafka's words)."""
    home = Path(tempfile.mkdtemp(prefix="lagsched-kafka-sasl-", dir="/tmp"))
    ca, cert, key = certificates(home)
    keystore = home / "server-keystore.pem"
    keystore.write_text(key.read_text() + cert.read_text())  # Kafka's PEM keystore: key, then chain
    secure_port = free_port()
    cfg = dataclasses.replace(
        stack,
        home=home,
        kafka_port=free_port(),
        kafka_controller_port=free_port(),
        kafka_jars_override=stack.kafka_jars,
    )
    broker = SaslSslKafka(cfg, secure_port, keystore)
    broker.start()
    try:
        yield {
            "bootstrap.servers": f"127.0.0.1:{secure_port}",
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": KAFKA_USER,
            "sasl.password": KAFKA_PASSWORD,
            "ssl.ca.location": str(ca),
        }
    finally:
        broker.stop()
        shutil.rmtree(home, ignore_errors=True)


class TlsMariaDB(MariaDB):
    """The stack's MariaDB with TLS required on TCP, and the lagsched user REQUIRE SSL."""

    name = "mariadb-tls"

    def __init__(self, cfg: StackConfig, certs: tuple[Path, Path, Path]) -> None:
        super().__init__(cfg)
        self.certs = certs

    def command(self) -> list[str]:
        ca, cert, key = self.certs
        return [
            *super().command(),
            f"--ssl-ca={ca}",
            f"--ssl-cert={cert}",
            f"--ssl-key={key}",
            "--require-secure-transport=ON",
        ]

    def after_start(self) -> None:
        super().after_start()
        result = self._sql(f"ALTER USER '{MYSQL_USER}'@'127.0.0.1' REQUIRE SSL;")
        assert result.returncode == 0, result.stderr


@contextlib.contextmanager
def tls_mariadb(stack: StackConfig) -> Iterator[dict[str, Any]]:
    """A MariaDB requiring TLS (the lagsched user REQUIRE SSL); yields its MySQL Connection."""
    # MariaDB runs as the mysql user: its folder must be reachable, not under pytest's 0700 tmp.
    home = Path(tempfile.mkdtemp(prefix="lagsched-mysql-tls-", dir="/tmp"))
    home.chmod(0o755)
    certs = certificates(home)
    for path in certs:
        path.chmod(0o644)  # the key too: a throwaway key for a throwaway server, read by the mysql user
    cfg = dataclasses.replace(stack, home=home, mysql_port=free_port())
    server = TlsMariaDB(cfg, certs)
    server.start()
    try:
        yield {
            "conn_type": "mysql",
            "host": "127.0.0.1",
            "port": cfg.mysql_port,
            "login": MYSQL_USER,
            "password": stack_secrets(cfg)["LAGSCHED_MYSQL_PASSWORD"],
            "schema": "lagsched",
            "extra": {"ssl": {"ca": str(certs[0])}},
        }
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def tls_acl_redis(folder: Path) -> Iterator[dict[str, Any]]:
    """A TLS-only redis-server with the ACL user REDIS_USER (the default user off); yields its Connection."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is missing: apt-get install redis-server")
    ca, cert, key = certificates(folder)
    port = free_port()
    argv = [
        binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
        "--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca),
        "--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--dir", str(folder),
        "--user", "default", "off",
        "--user", REDIS_USER, "on", f">{REDIS_PASSWORD}", "~*", "&*", "+@all",
    ]  # fmt: skip
    with (folder / "redis.log").open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while True:
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the TLS redis-server did not start: {(folder / 'redis.log').read_text()}")
                time.sleep(0.1)
            yield {
                "conn_type": "redis",
                "host": "127.0.0.1",
                "port": port,
                "login": REDIS_USER,
                "password": REDIS_PASSWORD,
                "extra": {"db": 3, "ssl": True, "ssl_ca_certs": str(ca), "ssl_cert_reqs": "required"},
            }
        finally:
            proc.terminate()
            proc.wait(timeout=30)
