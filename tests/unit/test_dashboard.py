"""The shipped Grafana dashboard (``lagsched/monitoring/dashboard.json``) as a Grafana 10 import reads it.

No Grafana server is installable here: these checks hold its structure (the data source input, the
variables, every panel's queries over metrics `/metrics` serves), and
tests/e2e/test_prometheus.py runs every query against a real Prometheus.
"""

from __future__ import annotations

import json
import re
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from lagsched.core.status import COUNTERS, METRIC_HELP

pytestmark = pytest.mark.unit

DASHBOARD = Path(str(files("lagsched") / "monitoring" / "dashboard.json"))
DOC = Path(__file__).resolve().parents[2] / "docs" / "prometheus.md"
DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def queries(dash: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    return exprs + [a["expr"] for a in dash["annotations"]["list"] if "expr" in a]


def test_it_imports_with_a_prometheus_data_source_input() -> None:
    dash = dashboard()
    assert dash["__inputs"] == [
        {
            "name": "DS_PROMETHEUS",
            "label": "Prometheus",
            "description": "The Prometheus that scrapes /lagsched/metrics",
            "type": "datasource",
            "pluginId": "prometheus",
            "pluginName": "Prometheus",
        }
    ]
    assert dash["uid"] == "lagsched" and dash["id"] is None and dash["schemaVersion"] >= 36  # Grafana 10's
    for panel in dash["panels"]:
        assert panel["datasource"] == DS, panel["title"]
        assert all(t["datasource"] == DS for t in panel["targets"]), panel["title"]
    for variable in dash["templating"]["list"]:
        assert variable["datasource"] == DS


def test_the_variables_are_cluster_and_topic_from_label_values() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert variables["cluster"]["query"]["query"] == "label_values(lagsched_live_slots, cluster)"
    assert (
        variables["topic"]["query"]["query"] == 'label_values(lagsched_topic_linker_workers{cluster="$cluster"}, topic)'
    )
    assert variables["topic"]["multi"] and variables["topic"]["includeAll"]


def test_panels_have_unique_ids_and_do_not_overlap() -> None:
    panels = dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, p["title"]
        assert g["x"] + g["w"] <= 24
        cells |= mine
        assert p["description"] and p["targets"], p["title"]


def test_every_query_reads_metrics_lagsched_serves_filtered_by_the_variables() -> None:
    dash = dashboard()
    used: set[str] = set()
    for expr in queries(dash):
        names = set(re.findall(r"\blagsched_[a-z_]+", expr))
        used |= names
        assert names <= set(METRIC_HELP), (expr, sorted(names - set(METRIC_HELP)))
        assert 'cluster="$cluster"' in expr, expr
        # Counters are read as rates or increases, never as raw totals.
        assert all(re.search(rf"(rate|increase)\({n}\{{", expr) for n in names & COUNTERS), expr
    # The panels the issue asks for: time lag and its SLO, lag, workers and max_workers, rates, slots
    # (live, planned, claims), lost records, table commits and their failures, state.
    wanted = {
        "lagsched_topic_time_lag_seconds",
        "lagsched_topic_time_lag_slo_seconds",
        "lagsched_partition_time_lag_seconds",
        "lagsched_topic_lag_records",
        "lagsched_partition_lag_records",
        "lagsched_topic_linker_workers",
        "lagsched_topic_max_workers",
        "lagsched_topic_ingress_rate_records_per_second",
        "lagsched_topic_consume_rate_records_per_second",
        "lagsched_live_slots",
        "lagsched_planned_slots",
        "lagsched_slot_claimed_partitions",
        "lagsched_topic_lost_records",
        "lagsched_table_commits_total",
        "lagsched_table_commit_failures_total",
        "lagsched_topic_state",
    }
    assert wanted <= used, sorted(wanted - used)


def test_scaling_decisions_are_annotations_on_changes_of_linker_workers() -> None:
    [annotation] = [a for a in dashboard()["annotations"]["list"] if "expr" in a]
    assert annotation["expr"].startswith("changes(lagsched_topic_linker_workers{")
    assert annotation["expr"].endswith("> 0")


def test_every_panel_is_documented() -> None:
    doc = DOC.read_text()
    missing = [p["title"] for p in dashboard()["panels"] if f"| {p['title']} |" not in doc]
    assert not missing, f"docs/prometheus.md has no row for {missing}"
