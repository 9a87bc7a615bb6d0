"""Where the local stack lives and which ports it uses.

Everything the stack writes (data, logs, pid files, generated secrets) goes under one folder,
``$LAGSCHED_HOME`` (default: ``.local/`` in the repository), so ``rm -rf .local`` is a full reset.
Ports come from the environment so two checkouts, or a busy machine, can run side by side.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]


def _port(name: str, default: int) -> int:
    raw = os.environ.get(name, str(default))
    try:
        port = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a port number; set it to an integer 1024-65535") from None
    if not 1024 <= port <= 65535:
        raise ValueError(f"{name}={port} is out of range; use 1024-65535")
    return port


@dataclass(frozen=True, slots=True)
class StackConfig:
    """Paths and ports of the local stack; built from the environment by :func:`load`."""

    repo: Path
    home: Path
    kafka_port: int
    kafka_controller_port: int
    mysql_port: int
    redis_port: int
    airflow_port: int

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def run(self) -> Path:
        """Pid files and sockets."""
        return self.home / "run"

    @property
    def jars(self) -> Path:
        return self.home / "jars"

    @property
    def airflow_home(self) -> Path:
        return self.home / "airflow"

    @property
    def secrets_file(self) -> Path:
        return self.home / "secrets.env"

    @property
    def kafka_bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"


def load() -> StackConfig:
    """Read the stack's settings from the environment (no I/O beyond reading variables)."""
    home = Path(os.environ.get("LAGSCHED_HOME", REPO_ROOT / ".local")).resolve()
    return StackConfig(
        repo=REPO_ROOT,
        home=home,
        kafka_port=_port("LAGSCHED_KAFKA_PORT", 19092),
        kafka_controller_port=_port("LAGSCHED_KAFKA_CONTROLLER_PORT", 19093),
        mysql_port=_port("LAGSCHED_MYSQL_PORT", 13306),
        redis_port=_port("LAGSCHED_REDIS_PORT", 16379),
        airflow_port=_port("LAGSCHED_AIRFLOW_PORT", 8080),
    )


def stack_secrets(cfg: StackConfig) -> dict[str, str]:
    """The local stack's generated credentials, created once with mode 0600.

    They never appear in code or logs: the MySQL password and Airflow's JWT secret are random per
    machine and read back from ``secrets.env``.
    """
    path = cfg.secrets_file
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        values = {
            "LAGSCHED_MYSQL_PASSWORD": secrets.token_urlsafe(18),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        }
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.writelines(f"{k}={v}\n" for k, v in values.items())
    result: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            result[key.strip()] = value.strip()
    return result
