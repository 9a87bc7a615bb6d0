"""The stack's Prometheus service, without starting it: its generated configuration and token file."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib.resources import files
from pathlib import Path

import pytest

from lagsched_dev.stack.config import load, stack_secrets
from lagsched_dev.stack.services import Prometheus

pytestmark = pytest.mark.unit


def test_the_configuration_scrapes_the_page_with_the_token_file_and_loads_the_shipped_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAGSCHED_HOME", str(tmp_path))
    monkeypatch.setenv("LAGSCHED_PROMETHEUS_PORT", "19555")
    cfg = replace(load(), airflow_port=18080)
    service = Prometheus(cfg)
    service.prepare()
    assert service.url == "http://127.0.0.1:19555"
    conf = json.loads(service.config_file.read_text())  # JSON is YAML: what Prometheus reads
    assert conf == {
        "global": {"scrape_interval": "15000ms", "scrape_timeout": "10000ms", "evaluation_interval": "15000ms"},
        "rule_files": [str(Path(str(files("lagsched") / "monitoring" / "alerts.yml")))],
        "scrape_configs": [
            {
                "job_name": "lagsched",
                "metrics_path": "/lagsched/metrics",
                "authorization": {"type": "Bearer", "credentials_file": str(service.token_file)},
                "static_configs": [{"targets": ["127.0.0.1:18080"]}],
            }
        ],
    }
    token = stack_secrets(cfg)["LAGSCHED_METRICS_TOKEN"]
    assert len(token) >= 32
    assert service.token_file.read_text() == token
    assert service.token_file.stat().st_mode & 0o777 == 0o600
    assert token not in service.config_file.read_text()
    assert not any(token in arg for arg in service.command())
    assert f"--storage.tsdb.path={service.dir / 'data'}" in service.command()
    assert "--web.listen-address=127.0.0.1:19555" in service.command()
    assert service.dir == tmp_path / "prometheus" / "prometheus"


def test_a_tests_own_server_has_its_name_port_intervals_and_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAGSCHED_HOME", str(tmp_path))
    rules = tmp_path / "short.yml"
    service = Prometheus(
        load(), name="prometheus-t", port=19777, scrape_interval_s=1, evaluation_interval_s=0.5, rule_files=[rules]
    )
    conf = service.configuration()
    assert conf["global"] == {"scrape_interval": "1000ms", "scrape_timeout": "1000ms", "evaluation_interval": "500ms"}
    assert conf["rule_files"] == [str(rules)]
    assert service.dir == tmp_path / "prometheus" / "prometheus-t" and service.port == 19777


def test_the_stack_hands_airflow_the_same_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lagsched_dev.stack.environment import stack_environment

    monkeypatch.setenv("LAGSCHED_HOME", str(tmp_path))
    cfg = load()
    assert stack_environment(cfg)["LAGSCHED_METRICS_TOKEN"] == stack_secrets(cfg)["LAGSCHED_METRICS_TOKEN"]
