"""The findings the notifications send (`lagsched.core.findings`): each rule, and the diff that sends a
finding once when new and once when cleared."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lagsched.core.findings import (
    EVALUATOR_KINDS,
    MONITOR_KINDS,
    Finding,
    Notice,
    Scope,
    diff,
    is_lag_at_max_workers,
    lost_records_finding,
    override_expiring_finding,
    stuck_finding,
)

pytestmark = pytest.mark.unit

STALLED = Finding("stalled", "eu", "orders", "lag 170 and no committed offset moved")
STOPPED = Finding("stopped", "eu", "orders", "no partition has a live holder")
LOST = Finding("lost_records", "eu", "clicks", "4 record(s) lost")
AT_MAX = Finding("lag_at_max_workers", "eu", "orders", "rising")
EXPIRING = Finding("override_expiring", "eu", "orders", "ends soon", ref="7")


def keys(findings: list[Finding]) -> list[str]:
    return [f.key for f in findings]


@pytest.mark.parametrize(
    ("previous", "current", "scope", "new", "cleared"),
    [
        pytest.param([], [STALLED], Scope.of(MONITOR_KINDS), ["stalled:orders"], [], id="appears: new"),
        pytest.param([STALLED], [STALLED], Scope.of(MONITOR_KINDS), [], [], id="still there: nothing"),
        pytest.param([STALLED], [], Scope.of(MONITOR_KINDS), [], ["stalled:orders"], id="gone: cleared"),
        pytest.param(
            [STALLED], [STOPPED], Scope.of(MONITOR_KINDS), ["stopped:orders"], ["stalled:orders"], id="stalled->stopped"
        ),
        pytest.param([AT_MAX], [], Scope.of(MONITOR_KINDS), [], [], id="another task's kind: left alone"),
        pytest.param([STALLED], [AT_MAX], Scope.of(MONITOR_KINDS), [], ["stalled:orders"], id="out-of-scope current"),
        pytest.param(
            [AT_MAX], [], Scope.of(EVALUATOR_KINDS, {"lag_at_max_workers": ["clicks"]}), [], [], id="not looked at"
        ),
        pytest.param(
            [AT_MAX],
            [],
            Scope.of(EVALUATOR_KINDS, {"lag_at_max_workers": ["orders"]}),
            [],
            ["lag_at_max_workers:orders"],
            id="topic looked at: cleared",
        ),
        pytest.param(
            [EXPIRING],
            [Finding("override_expiring", "eu", "orders", "ends soon", ref="8")],
            Scope.of(EVALUATOR_KINDS),
            ["override_expiring:orders:8"],
            ["override_expiring:orders:7"],
            id="a new override is a new finding",
        ),
        pytest.param([], [LOST, LOST], Scope.of(MONITOR_KINDS), ["lost_records:clicks"], [], id="twice counts once"),
    ],
)
def test_diff(
    previous: list[Finding], current: list[Finding], scope: Scope, new: list[str], cleared: list[str]
) -> None:
    got_new, got_cleared = diff({f.key: f for f in previous}, current, scope)
    assert (keys(got_new), keys(got_cleared)) == (new, cleared)


def test_a_finding_survives_its_json_and_names_its_runbook() -> None:
    assert Finding.from_dict(EXPIRING.as_dict()) == EXPIRING
    assert STALLED.as_dict()["runbook"] == "docs/alerts.md#lagschedtopicstalled"
    assert Notice("cleared", STALLED).as_dict()["summary"] == "lagsched eu/orders: pipeline stalled cleared"
    with pytest.raises(ValueError, match="unknown finding kind"):
        Finding.from_dict({"kind": "bored", "cluster": "eu", "topic": "a", "detail": ""})


def test_stuck_findings_follow_the_pipeline_state() -> None:
    assert stuck_finding("eu", "a", "ok", "") is None
    assert stuck_finding("eu", "a", "stalled", "why") == Finding("stalled", "eu", "a", "why")
    assert stuck_finding("eu", "a", "stopped", "why") == Finding("stopped", "eu", "a", "why")


@pytest.mark.parametrize(
    ("losses", "active"),
    [
        ([(0.0, 0), (60.0, 0), (120.0, 0)], False),
        ([(0.0, 0), (60.0, 0), (120.0, 30)], True),  # a loss now
        ([(0.0, 30), (60.0, 30), (120.0, 30)], False),  # lost before the first measurement seen
        # Active while the last measurement before the loss is within 15 min, then no longer.
        ([(0.0, 0), (60.0, 30), (900.0, 30)], True),
        ([(0.0, 0), (60.0, 30), (901.0, 30)], False),
        ([(0.0, 50), (60.0, 20)], False),  # old gaps deleted by maintenance: fewer, not a loss
    ],
)
def test_lost_records_is_a_loss_within_the_window(losses: list[tuple[float, int]], active: bool) -> None:
    found = lost_records_finding("eu", "a", losses)
    assert (found is not None) is active


@pytest.mark.parametrize(
    ("counts", "active"),
    [
        ([(0.0, 0), (60.0, 0)], False),
        ([(0.0, 0), (60.0, 3)], True),  # dead letters since the last measurement
        ([(0.0, 3), (60.0, 3)], False),  # counted before the first measurement seen
        ([(0.0, 0), (60.0, 3), (900.0, 3)], True),
        ([(0.0, 0), (60.0, 3), (901.0, 3)], False),  # none for 15 minutes: cleared
        ([(0.0, 9), (60.0, 0)], False),  # Redis lost the counter: fewer is not a dead letter
    ],
)
def test_dead_letters_is_a_rise_of_the_counter_within_the_window(counts: list[tuple[float, int]], active: bool) -> None:
    from lagsched.core.findings import TITLES, dead_letters_finding
    from lagsched.workflows.notifications import monitor_findings

    found = dead_letters_finding("eu", "orders", counts)
    assert (found is not None) is active
    assert "dead_letters" in MONITOR_KINDS and TITLES["dead_letters"]
    # Through the monitor's findings, from the lag records' counter.
    from datetime import UTC, datetime

    from lagsched.adapters.lag_store import LagRecord

    history = {"orders": [LagRecord(at=at, lag=0, dead_letters=n) for at, n in counts]}
    at = datetime.fromtimestamp(counts[-1][0], tz=UTC)
    found_all, _scope = monitor_findings("eu", [("orders", "ok", "")], history, at)
    assert [f.key for f in found_all] == (["dead_letters:orders"] if active else [])
    # The record keeps the counter through Redis' JSON, and older records read as 0.
    assert LagRecord.from_member(LagRecord(at=1.0, lag=0, dead_letters=4).to_member()).dead_letters == 4
    assert LagRecord.from_member('{"at": 1.0, "lag": 0}').dead_letters == 0


def test_lag_at_max_workers_has_hysteresis_on_the_fit() -> None:
    base = {"ceiling": 8, "lag": 500_000, "max_lag": 100_000, "min_fit_r2": 0.5}
    assert is_lag_at_max_workers(linker_workers=8, slope=10.0, fit_r2=0.9, was_active=False, **base)
    assert not is_lag_at_max_workers(linker_workers=8, slope=10.0, fit_r2=0.2, was_active=False, **base)
    assert is_lag_at_max_workers(linker_workers=8, slope=10.0, fit_r2=0.2, was_active=True, **base)
    assert not is_lag_at_max_workers(linker_workers=7, slope=10.0, fit_r2=0.9, was_active=True, **base)
    assert not is_lag_at_max_workers(linker_workers=8, slope=0.0, fit_r2=0.9, was_active=True, **base)
    lower = base | {"lag": 100_000}
    assert not is_lag_at_max_workers(linker_workers=8, slope=10.0, fit_r2=0.9, was_active=True, **lower)


def test_override_expiring_within_the_window_only() -> None:
    now = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)

    def found(minutes: float) -> Finding | None:
        return override_expiring_finding(
            "eu", "orders", override_id=7, linker_workers=8, expires_at=now + timedelta(minutes=minutes),
            created_by="ana", reason="sale", now=now,
        )  # fmt: skip

    assert found(16) is None
    assert found(15) is not None
    assert found(0.5) is not None
    assert found(0) is None  # ended: no longer active
