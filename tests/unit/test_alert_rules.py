"""The shipped alert rules (``lagsched/monitoring/alerts.yml``) under Prometheus' own rule tester.

``promtool check rules`` validates the file; ``promtool test rules`` evaluates each alert on
synthetic series, one scrape a minute, as Prometheus would. One table, `CASES`, holds three cases
per alert: a series that fires it (with the labels and annotations it fires with), a healthy series
that stays quiet, and a gap (missing scrapes, a late measurement, or a blip) shorter than the
alert's ``for`` that stays quiet. Each case runs as a promtool test file of its own, so a failure
names its alert and case. promtool missing fails every test with the fix (never a skip).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
import yaml

from lagsched.core.status import METRIC_HELP
from promtool_support import output, promtool

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
RULES = Path(str(files("lagsched") / "monitoring" / "alerts.yml"))
DOC = ROOT / "docs" / "alerts.md"
KINDS = ("fires", "healthy", "gap")


def alerts() -> dict[str, dict[str, Any]]:
    """The rules file's alerts by name."""
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}


def runbook(alert: str) -> str:
    return f"docs/alerts.md#{alert.lower()}"


@dataclass(frozen=True)
class Fired:
    """One alert expected to fire: its labels besides ``alertname`` and its summary and description."""

    labels: dict[str, str]
    summary: str
    description: str


@dataclass(frozen=True)
class Case:
    """Series (one sample a minute from t=0, promtool's notation) and what the alert does on them.

    ``quiet_at``: times at which the alert must not fire. ``fires_at``/``fired``: a time and the
    alerts firing then (exactly those).
    """

    alert: str
    kind: str
    series: dict[str, str]
    quiet_at: tuple[str, ...] = ()
    fires_at: str | None = None
    fired: tuple[Fired, ...] = field(default=())

    @property
    def id(self) -> str:
        return f"{self.alert}-{self.kind}"


EU = 'cluster="eu",topic="orders"'
SLO = f"lagsched_topic_time_lag_slo_seconds{{{EU}}}"
STALE = 'lagsched_measurements_stale_after_seconds{cluster="eu"}'
CASES = [
    # -- time lag above the topic's SLO (its own series) for 10m --
    Case(
        "LagschedTopicTimeLagHigh",
        "fires",
        {
            f"lagsched_topic_time_lag_seconds{{{EU}}}": "60x5 900x20",
            SLO: "600x25",
            # its own SLO of 30 minutes: 900 s is within it
            'lagsched_topic_time_lag_seconds{cluster="eu",topic="slow"}': "900x25",
            'lagsched_topic_time_lag_slo_seconds{cluster="eu",topic="slow"}': "1800x25",
        },
        quiet_at=("15m",),  # above since 6m: pending, not firing yet
        fires_at="20m",
        fired=(
            Fired(
                {"cluster": "eu", "topic": "orders", "severity": "warning"},
                "Topic orders of cluster eu is behind its time-lag SLO",
                "The oldest unread record of topic orders (cluster eu) is 15m 0s old, above its SLO "
                "(time_lag_slo_s) for 10 minutes.",
            ),
        ),
    ),
    Case(
        "LagschedTopicTimeLagHigh",
        "healthy",
        {
            f"lagsched_topic_time_lag_seconds{{{EU}}}": "60x30",
            SLO: "600x30",
            'lagsched_topic_time_lag_seconds{cluster="eu",topic="at_slo"}': "600x30",
            'lagsched_topic_time_lag_slo_seconds{cluster="eu",topic="at_slo"}': "600x30",
            # no SLO series (an older lagsched): no alert rather than a guess
            'lagsched_topic_time_lag_seconds{cluster="eu",topic="unknown"}': "5000x30",
        },
        quiet_at=("10m", "20m", "30m"),
    ),
    Case(
        # Above the SLO for 4 scrapes, then 4 missed scrapes (the last value stands for them), then
        # back under: 8 minutes, shorter than the 10m `for`.
        "LagschedTopicTimeLagHigh",
        "gap",
        {f"lagsched_topic_time_lag_seconds{{{EU}}}": "60x5 900x3 _x4 60x20", SLO: "600x32"},
        quiet_at=("13m", "14m", "20m"),
    ),
    # -- stalled and stopped: the lag monitor's state for 5m --
    *(
        c
        for state, alert, severity, words in (
            (
                "stalled",
                "LagschedTopicStalled",
                "critical",
                "Slots hold the partitions of topic orders (cluster eu) and it has a backlog, but no committed offset "
                "has moved for 5 minutes after the lag monitor judged it stalled. More workers do not help: the "
                "evaluator holds it.",
            ),
            (
                "stopped",
                "LagschedTopicStopped",
                "critical",
                "Topic orders (cluster eu) has a backlog and no slot holds any of its partitions: nothing has consumed "
                "it for 5 minutes after the lag monitor judged it stopped.",
            ),
        )
        for c in (
            Case(
                alert,
                "fires",
                {
                    f'lagsched_topic_state{{{EU},state="{state}"}}': "0x5 1x15",
                    f'lagsched_topic_state{{{EU},state="ok"}}': "1x5 0x15",
                },
                quiet_at=("10m",),
                fires_at="15m",
                fired=(
                    Fired(
                        {"cluster": "eu", "topic": "orders", "state": state, "severity": severity},
                        f"Topic orders of cluster eu is {state}",
                        words,
                    ),
                ),
            ),
            Case(
                alert,
                "healthy",
                {
                    f'lagsched_topic_state{{{EU},state="{state}"}}': "0x30",
                    f'lagsched_topic_state{{{EU},state="ok"}}': "1x30",
                },
                quiet_at=("10m", "30m"),
            ),
            Case(
                # 2 scrapes in the state, 2 missed (the last value stands), then ok: 4 minutes < 5m.
                alert,
                "gap",
                {f'lagsched_topic_state{{{EU},state="{state}"}}': "0x5 1x1 _x2 0x10"},
                quiet_at=("9m", "10m", "15m"),
            ),
        )
    ),
    # -- records lost to retention: any increase over 15 minutes --
    Case(
        "LagschedRecordsLost",
        "fires",
        {
            f"lagsched_topic_lost_records{{{EU}}}": "0x10 1500x25",
            # recorded gaps deleted (a fall), then a new loss of 200
            'lagsched_topic_lost_records{cluster="eu",topic="clicks"}': "1500x5 0x5 200x25",
        },
        quiet_at=("10m", "27m"),  # before the loss; and once 15 minutes have passed without a new one
        fires_at="12m",
        fired=tuple(
            Fired(
                {"cluster": "eu", "topic": t, "severity": "critical"},
                f"Topic {t} of cluster eu lost records to retention",
                f"Retention deleted {n} records of topic {t} (cluster eu) in the last 15 minutes before "
                "the pipeline read them.",
            )
            for t, n in (("clicks", "200"), ("orders", "1.5k"))
        ),
    ),
    Case(
        # Losses of long ago stand still; recorded gaps deleted by the maintenance DAG make it fall.
        "LagschedRecordsLost",
        "healthy",
        {
            f"lagsched_topic_lost_records{{{EU}}}": "1500x30",
            'lagsched_topic_lost_records{cluster="eu",topic="clicks"}': "1500x10 0x20",
        },
        quiet_at=("5m", "11m", "20m", "30m"),
    ),
    Case(
        "LagschedRecordsLost",
        "gap",
        {f"lagsched_topic_lost_records{{{EU}}}": "1500x5 _x8 1500x10"},
        quiet_at=("10m", "14m", "20m"),
    ),
    # -- an open transaction held 300 s or more, for 5m --
    Case(
        "LagschedOpenTransactionOld",
        "fires",
        {
            f"lagsched_topic_open_transaction_seconds{{{EU}}}": "0x4 60+60x20",
            f"lagsched_topic_transaction_held_offsets{{{EU}}}": "0x4 40x20",
            f"lagsched_topic_open_transaction_bound_seconds{{{EU}}}": "300x25",
            # a bound of an hour: 20 minutes open is within it
            'lagsched_topic_open_transaction_seconds{cluster="eu",topic="batchy"}': "0x4 60+60x20",
            'lagsched_topic_transaction_held_offsets{cluster="eu",topic="batchy"}': "0x4 40x20",
            'lagsched_topic_open_transaction_bound_seconds{cluster="eu",topic="batchy"}': "3600x25",
        },
        quiet_at=("13m",),  # 300 s and more since 9m: pending
        fires_at="15m",
        fired=(
            Fired(
                {"cluster": "eu", "topic": "orders", "severity": "warning"},
                "An open transaction holds topic orders of cluster eu",
                "A producer's transaction on topic orders (cluster eu) has been open 11m 0s: the records behind it "
                "cannot be read until it commits or aborts.",
            ),
        ),
    ),
    Case(
        # A transaction open 4 minutes, then committed.
        "LagschedOpenTransactionOld",
        "healthy",
        {
            f"lagsched_topic_open_transaction_seconds{{{EU}}}": "0x4 60+60x3 0x15",
            f"lagsched_topic_transaction_held_offsets{{{EU}}}": "0x4 40x3 0x15",
            f"lagsched_topic_open_transaction_bound_seconds{{{EU}}}": "300x25",
        },
        quiet_at=("8m", "15m", "20m"),
    ),
    Case(
        # Held 300 s and more at 9m-10m, two missed scrapes, then committed: 4 minutes < 5m.
        "LagschedOpenTransactionOld",
        "gap",
        {
            f"lagsched_topic_open_transaction_seconds{{{EU}}}": "0x4 60+60x5 _x2 0x10",
            f"lagsched_topic_transaction_held_offsets{{{EU}}}": "0x4 40x5 _x2 0x10",
            f"lagsched_topic_open_transaction_bound_seconds{{{EU}}}": "300x25",
        },
        quiet_at=("12m", "13m", "20m"),
    ),
    # -- the newest measurement older than 600 s, for 5m --
    Case(
        "LagschedMeasurementsStale",
        "fires",
        {
            f"lagsched_topic_measured_timestamp_seconds{{{EU}}}": "0+60x10 600x30",  # the monitor stops at 10m
            STALE: "600x40",
            # another cluster measured every 15 minutes, stale after 45: never stale
            'lagsched_topic_measured_timestamp_seconds{cluster="us",topic="orders"}': "0x15 900x15 1800x10",
            'lagsched_measurements_stale_after_seconds{cluster="us"}': "2700x40",
        },
        quiet_at=("25m",),  # older than 600 s since 21m: pending
        fires_at="30m",
        fired=(
            Fired(
                {"cluster": "eu", "topic": "orders", "severity": "critical"},
                "Topic orders of cluster eu is no longer measured",
                "The newest lag measurement of topic orders (cluster eu) is 20m 0s old: the lag monitor has stopped "
                "measuring it, so its lag figures and the other lagsched alerts on it are out of date.",
            ),
        ),
    ),
    Case(
        "LagschedMeasurementsStale",
        "healthy",
        {f"lagsched_topic_measured_timestamp_seconds{{{EU}}}": "0+60x40", STALE: "600x40"},
        quiet_at=("10m", "40m"),
    ),
    Case(
        # orders: 8 missed scrapes while the monitor went on; clicks: the monitor late 13 minutes (older
        # than 600 s at 21m-23m only, shorter than 5m).
        "LagschedMeasurementsStale",
        "gap",
        {
            f"lagsched_topic_measured_timestamp_seconds{{{EU}}}": "0+60x10 _x8 1140+60x20",
            'lagsched_topic_measured_timestamp_seconds{cluster="eu",topic="clicks"}': "0+60x10 600x12 1440+60x10",
            STALE: "600x40",
        },
        quiet_at=("15m", "19m", "23m", "24m", "30m"),
    ),
    # -- a registered topic with no measurement, for 15m --
    Case(
        "LagschedTopicNotMeasured",
        "fires",
        {
            'lagsched_topic_linker_workers{cluster="eu",topic="new"}': "1x40",
            # measured until 10m, then the stored measurements expire: the series ends.
            f"lagsched_topic_linker_workers{{{EU}}}": "2x40",
            f"lagsched_topic_measured_timestamp_seconds{{{EU}}}": "0+60x10",
        },
        quiet_at=("14m",),
        fires_at="35m",
        fired=tuple(
            Fired(
                {"cluster": "eu", "topic": t, "severity": "critical"},
                f"Topic {t} of cluster eu has no lag measurement",
                f"Topic {t} (cluster eu) is registered but has had no lag measurement for 15 minutes: the lag monitor "
                "is not measuring it, and no lag alert can fire for it.",
            )
            for t in ("new", "orders")
        ),
    ),
    Case(
        "LagschedTopicNotMeasured",
        "healthy",
        {
            f"lagsched_topic_linker_workers{{{EU}}}": "2x30",
            f"lagsched_topic_measured_timestamp_seconds{{{EU}}}": "0+60x30",
        },
        quiet_at=("20m", "30m"),
    ),
    Case(
        # orders: a scrape gap of 8 minutes takes both series away together; new: first measured
        # 10 minutes after it was registered.
        "LagschedTopicNotMeasured",
        "gap",
        {
            f"lagsched_topic_linker_workers{{{EU}}}": "2x10 _x8 2x10",
            f"lagsched_topic_measured_timestamp_seconds{{{EU}}}": "0+60x10 _x8 1140+60x10",
            'lagsched_topic_linker_workers{cluster="eu",topic="new"}': "1x30",
            'lagsched_topic_measured_timestamp_seconds{cluster="eu",topic="new"}': "_x10 600+60x20",
        },
        quiet_at=("9m", "15m", "20m", "28m"),
    ),
    # -- no lagsched metric scraped at all, for 5m --
    Case(
        "LagschedMetricsAbsent",
        "fires",
        {'lagsched_live_slots{cluster="eu"}': "1x5", 'up{job="lagsched"}': "1x5 0x20"},  # the scrape fails from 6m
        quiet_at=("15m",),  # absent since 11m (the last sample stands 5 minutes): pending
        fires_at="20m",
        fired=(
            Fired(
                {"severity": "critical"},
                "No lagsched metrics",
                "Prometheus has had no lagsched_live_slots series for 5 minutes: /lagsched/metrics is not scraped, "
                "fails, or lists no cluster. No other lagsched alert can fire meanwhile.",
            ),
        ),
    ),
    Case(
        "LagschedMetricsAbsent",
        "healthy",
        {'lagsched_live_slots{cluster="eu"}': "0x30"},  # no live slot is still a scrape
        quiet_at=("10m", "30m"),
    ),
    Case(
        # 8 missed scrapes: absent for 3 of them after the 5 minutes the last sample stands.
        "LagschedMetricsAbsent",
        "gap",
        {'lagsched_live_slots{cluster="eu"}': "1x5 _x8 1x10"},
        quiet_at=("12m", "13m", "14m", "20m"),
    ),
    # -- fewer live slots than the consume DAG planned, for 5m --
    Case(
        "LagschedFewerLiveSlotsThanPlanned",
        "fires",
        {
            'lagsched_planned_slots{cluster="eu"}': "3x30",
            'lagsched_live_slots{cluster="eu"}': "3x5 2x25",
            'lagsched_planned_slots{cluster="us"}': "2x30",
            'lagsched_live_slots{cluster="us"}': "2x30",
        },
        quiet_at=("9m",),
        fires_at="12m",
        fired=(
            Fired(
                {"cluster": "eu", "severity": "warning"},
                "Cluster eu runs fewer slots than the consume DAG planned",
                "The consume DAG planned 3 slots for cluster eu, but fewer have had a live heartbeat for 5 "
                "minutes: some of its lanes are not consumed.",
            ),
        ),
    ),
    Case(
        # As many live slots as planned, or more (a slot leaving at its budget overlaps its successor);
        # a cluster the consume DAG never planned has no series and no alert.
        "LagschedFewerLiveSlotsThanPlanned",
        "healthy",
        {
            'lagsched_planned_slots{cluster="eu"}': "3x30",
            'lagsched_live_slots{cluster="eu"}': "3x30",
            'lagsched_planned_slots{cluster="us"}': "2x30",
            'lagsched_live_slots{cluster="us"}': "4x30",
            'lagsched_live_slots{cluster="new"}': "0x30",
        },
        quiet_at=("15m", "30m"),
    ),
    Case(
        # eu: a slot restarting for 4 minutes; us: 8 missed scrapes of the slots.
        "LagschedFewerLiveSlotsThanPlanned",
        "gap",
        {
            'lagsched_planned_slots{cluster="eu"}': "3x30",
            'lagsched_live_slots{cluster="eu"}': "3x5 2x4 3x20",
            'lagsched_planned_slots{cluster="us"}': "2x30",
            'lagsched_live_slots{cluster="us"}': "2x5 _x8 2x16",
        },
        quiet_at=("9m", "13m", "15m", "20m"),
    ),
    # -- lag rising for 15m at max_workers --
    Case(
        "LagschedLagRisingAtMaxWorkers",
        "fires",
        {
            f"lagsched_topic_lag_records{{{EU}}}": "1000x10 1000+600x30",  # +10 records/s from 10m
            f"lagsched_topic_linker_workers{{{EU}}}": "4x40",
            f"lagsched_topic_max_workers{{{EU}}}": "4x40",
            f"lagsched_topic_time_lag_seconds{{{EU}}}": "60x10 400x30",
            SLO: "600x40",
            # rising as fast, but below its ceiling: the evaluator can still scale it
            'lagsched_topic_lag_records{cluster="eu",topic="clicks"}': "1000x10 1000+600x30",
            'lagsched_topic_linker_workers{cluster="eu",topic="clicks"}': "2x40",
            'lagsched_topic_max_workers{cluster="eu",topic="clicks"}': "8x40",
            'lagsched_topic_time_lag_seconds{cluster="eu",topic="clicks"}': "400x40",
            'lagsched_topic_time_lag_slo_seconds{cluster="eu",topic="clicks"}': "600x40",
        },
        quiet_at=("10m", "24m"),  # rising from 10m: the trend is up from 11m, pending for 15m
        fires_at="30m",
        fired=(
            Fired(
                {"cluster": "eu", "topic": "orders", "severity": "warning"},
                "Topic orders of cluster eu falls behind at max_workers",
                "The lag of topic orders (cluster eu) has risen by 10 records/s for 15 minutes, past half its "
                "time-lag SLO, while the topic runs its max_workers: the evaluator cannot add workers.",
            ),
        ),
    ),
    Case(
        # At max_workers with a steady or draining lag; or rising, but well within the SLO.
        "LagschedLagRisingAtMaxWorkers",
        "healthy",
        {
            f"lagsched_topic_lag_records{{{EU}}}": "50000-300x40",
            f"lagsched_topic_linker_workers{{{EU}}}": "4x40",
            f"lagsched_topic_max_workers{{{EU}}}": "4x40",
            f"lagsched_topic_time_lag_seconds{{{EU}}}": "500x40",
            SLO: "600x40",
            'lagsched_topic_lag_records{cluster="eu",topic="clicks"}': "1200x40",
            'lagsched_topic_linker_workers{cluster="eu",topic="clicks"}': "2x40",
            'lagsched_topic_max_workers{cluster="eu",topic="clicks"}': "2x40",
            'lagsched_topic_time_lag_seconds{cluster="eu",topic="clicks"}': "500x40",
            'lagsched_topic_time_lag_slo_seconds{cluster="eu",topic="clicks"}': "600x40",
            'lagsched_topic_lag_records{cluster="eu",topic="small"}': "100+10x40",
            'lagsched_topic_linker_workers{cluster="eu",topic="small"}': "1x40",
            'lagsched_topic_max_workers{cluster="eu",topic="small"}': "1x40",
            'lagsched_topic_time_lag_seconds{cluster="eu",topic="small"}': "20x40",
            'lagsched_topic_time_lag_slo_seconds{cluster="eu",topic="small"}': "600x40",
        },
        quiet_at=("20m", "40m"),
    ),
    Case(
        # A burst of 10 minutes at max_workers, drained after: the trend turns before 15m.
        "LagschedLagRisingAtMaxWorkers",
        "gap",
        {
            f"lagsched_topic_lag_records{{{EU}}}": "1000x5 1000+3000x10 31000-3000x10 1000x15",
            f"lagsched_topic_linker_workers{{{EU}}}": "4x40",
            f"lagsched_topic_max_workers{{{EU}}}": "4x40",
            f"lagsched_topic_time_lag_seconds{{{EU}}}": "60x5 400x20 60x15",
            SLO: "600x40",
        },
        quiet_at=("15m", "25m", "40m"),
    ),
    # -- table commits failing in every 5 minutes for 10m --
    Case(
        "LagschedTableCommitsFailing",
        "fires",
        {
            'lagsched_table_commit_failures_total{cluster="eu",table="lake.eu",reason="error"}': "0x5 0+1x25",
            'lagsched_table_commit_failures_total{cluster="eu",table="lake.eu",reason="refused"}': "0x30",
        },
        quiet_at=("12m",),
        fires_at="20m",
        fired=(
            Fired(
                {"cluster": "eu", "table": "lake.eu", "reason": "error", "severity": "critical"},
                "Commits to table lake.eu of cluster eu keep failing",
                "Table commits of cluster eu to lake.eu have failed (error) in every 5 minutes of the last 10: "
                "batches are redone, and nothing new lands while it lasts.",
            ),
        ),
    ),
    Case(
        # Commits landing, no failure; one refusal after a failover, then none.
        "LagschedTableCommitsFailing",
        "healthy",
        {
            'lagsched_table_commit_failures_total{cluster="eu",table="lake.eu",reason="refused"}': "0x10 1x30",
            'lagsched_table_commit_failures_total{cluster="eu",table="lake.eu",reason="error"}': "0x40",
        },
        quiet_at=("12m", "16m", "20m", "40m"),
    ),
    Case(
        # Failing for 6 minutes (the catalog restarting), then fine; and a scrape gap meanwhile.
        "LagschedTableCommitsFailing",
        "gap",
        {
            'lagsched_table_commit_failures_total{cluster="eu",table="lake.eu",reason="error"}': (
                "0x5 0+1x6 6x4 _x4 6x10"
            ),
        },
        quiet_at=("12m", "15m", "20m", "25m"),
    ),
    # -- dead letters in the last 10 minutes --
    Case(
        "LagschedDeadLetters",
        "fires",
        {
            'lagsched_dead_letters_total{cluster="eu",topic="orders"}': "0x10 3x30",
            'lagsched_dead_letters_total{cluster="eu",topic="clicks"}': "0x40",
        },
        quiet_at=("9m",),
        fires_at="12m",
        fired=(
            Fired(
                {"cluster": "eu", "topic": "orders", "severity": "warning"},
                "Records of topic orders (cluster eu) land in the dead-letter table",
                "3 record(s) of topic orders in the last 10 minutes could not be decoded into its typed table and "
                "were written to cluster eu's dead-letter table with the reason.",
            ),
        ),
    ),
    Case(
        # Dead letters long ago, none since: the counter stays where it was.
        "LagschedDeadLetters",
        "healthy",
        {'lagsched_dead_letters_total{cluster="eu",topic="orders"}': "7x40"},
        quiet_at=("5m", "20m", "40m"),
    ),
    Case(
        # A scrape gap and a Redis that lost its counters (a reset to 0): no dead letter, no alert.
        "LagschedDeadLetters",
        "gap",
        {'lagsched_dead_letters_total{cluster="eu",topic="orders"}': "5x10 _x5 0x25"},
        quiet_at=("12m", "18m", "30m"),
    ),
    # -- the newest table care attempt failed, for 15m --
    Case(
        "LagschedTableCareFailing",
        "fires",
        {
            # succeeded at 0m; attempts fail at 5m and at 10m (its retry)
            'lagsched_table_care_last_run_timestamp_seconds{cluster="eu",outcome="ok"}': "0x40",
            'lagsched_table_care_last_run_timestamp_seconds{cluster="eu",outcome="failed"}': "_x5 300x5 600x30",
            # never succeeded
            'lagsched_table_care_last_run_timestamp_seconds{cluster="us",outcome="failed"}': "60x40",
        },
        quiet_at=("4m", "14m"),  # pending: us since 0m, eu since 5m
        fires_at="25m",
        fired=tuple(
            Fired(
                {"cluster": c, "severity": "warning"},
                f"Table care of cluster {c} is failing",
                f"The newest table care attempt of cluster {c} failed and none has succeeded since (15 minutes): "
                "small files, old snapshots and orphans accumulate.",
            )
            for c in ("eu", "us")
        ),
    ),
    Case(
        "LagschedTableCareFailing",
        "healthy",
        {
            'lagsched_table_care_last_run_timestamp_seconds{cluster="eu",outcome="ok"}': "0x20 1200x20",
            'lagsched_table_care_last_run_timestamp_seconds{cluster="eu",outcome="failed"}': "_x40",
        },
        quiet_at=("15m", "40m"),
    ),
    Case(
        # An attempt failed at 5m, its retry succeeded at 10m: within the 15m, no alert.
        "LagschedTableCareFailing",
        "gap",
        {
            'lagsched_table_care_last_run_timestamp_seconds{cluster="eu",outcome="ok"}': "0x10 600x30",
            'lagsched_table_care_last_run_timestamp_seconds{cluster="eu",outcome="failed"}': "_x5 300x35",
        },
        quiet_at=("9m", "15m", "25m", "40m"),
    ),
    # -- a watermark further behind the clock than its SLO for 10m --
    Case(
        "LagschedWatermarkBehind",
        "fires",
        {
            # stuck at the epoch's start: its age is the evaluation time
            f"lagsched_topic_watermark_timestamp_seconds{{{EU}}}": "0x30",
            f"lagsched_topic_watermark_slo_seconds{{{EU}}}": "300x30",
            # its own SLO of an hour: 30 minutes behind is within it
            'lagsched_topic_watermark_timestamp_seconds{cluster="eu",topic="slow"}': "0x30",
            'lagsched_topic_watermark_slo_seconds{cluster="eu",topic="slow"}': "3600x30",
        },
        quiet_at=("14m",),  # behind since 5m: pending
        fires_at="20m",
        fired=(
            Fired(
                {"cluster": "eu", "topic": "orders", "severity": "warning"},
                "The watermark of topic orders of cluster eu is behind its SLO",
                "Topic orders (cluster eu) is complete only up to 20m 0s ago, beyond its SLO (watermark_slo_s) for "
                "10 minutes: the hourly events of its table wait.",
            ),
        ),
    ),
    Case(
        "LagschedWatermarkBehind",
        "healthy",
        {
            # keeps up with the clock (a minute a minute)
            f"lagsched_topic_watermark_timestamp_seconds{{{EU}}}": "0+60x30",
            f"lagsched_topic_watermark_slo_seconds{{{EU}}}": "300x30",
            # no watermark yet (a partition known by neither rule): no series, no alert
            'lagsched_topic_watermark_slo_seconds{cluster="eu",topic="new"}': "300x30",
        },
        quiet_at=("10m", "20m", "30m"),
    ),
    Case(
        # Stuck from 10m to 21m (behind its SLO from 15m), then caught up: 7 minutes, within the 10m.
        "LagschedWatermarkBehind",
        "gap",
        {
            f"lagsched_topic_watermark_timestamp_seconds{{{EU}}}": "0+60x10 600x10 1320+60x10",
            f"lagsched_topic_watermark_slo_seconds{{{EU}}}": "300x32",
        },
        quiet_at=("16m", "20m", "25m", "30m"),
    ),
]


def test_promtool_check_rules_accepts_the_file() -> None:
    result = promtool("check", "rules", "--lint=all", "--lint-fatal", RULES)
    assert result.returncode == 0, output(result)


def test_every_alert_has_three_cases_and_every_case_an_alert() -> None:
    have = {(c.alert, c.kind) for c in CASES}
    assert len(have) == len(CASES), "two cases share an alert and a kind"
    assert have == {(a, k) for a in alerts() for k in KINDS}


#: Alerts over series of a whole cluster (no topic label to name).
CLUSTER_WIDE = {"LagschedFewerLiveSlotsThanPlanned"}


def about(name: str, expr: str) -> list[str]:
    """The labels an alert's summary and description must name: what its series are about."""
    by = {label.strip() for group in re.findall(r"by \(([^)]*)\)", expr) for label in group.split(",")}
    if "absent(" in expr:
        return []
    if by:
        return sorted(by - {"reason"})  # the reason is named in the description only
    return ["cluster"] if name in CLUSTER_WIDE else ["topic", "cluster"]


def test_every_alert_is_labelled_annotated_and_documented() -> None:
    doc = DOC.read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", doc, re.M)}
    for name, rule in alerts().items():
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        notes = rule["annotations"]
        assert set(notes) == {"summary", "description", "runbook_url"}, name
        assert notes["runbook_url"] == runbook(name), name
        assert name.lower() in anchors, f"docs/alerts.md has no section {name}"
        # Each names what it is about: topic and cluster where the alert has them.
        wanted = about(name, rule["expr"])
        for label in wanted:
            for key in ("summary", "description"):
                assert f"$labels.{label}" in notes[key], f"{name} {key} does not name the {label}"


def test_the_rules_read_only_metrics_lagsched_serves() -> None:
    used = set(re.findall(r"\blagsched_[a-z_]+", "\n".join(r["expr"] for r in alerts().values())))
    assert used <= set(METRIC_HELP), sorted(used - set(METRIC_HELP))


def promtool_test(case: Case) -> dict[str, Any]:
    tests: list[dict[str, Any]] = [{"eval_time": at, "alertname": case.alert, "exp_alerts": []} for at in case.quiet_at]
    if case.fires_at is not None:
        tests.append(
            {
                "eval_time": case.fires_at,
                "alertname": case.alert,
                "exp_alerts": [
                    {
                        "exp_labels": f.labels,
                        "exp_annotations": {
                            "summary": f.summary,
                            "description": f.description,
                            "runbook_url": runbook(case.alert),
                        },
                    }
                    for f in case.fired
                ],
            }
        )
    return {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
                "alert_rule_test": tests,
            }
        ],
    }


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_alert_case(case: Case, tmp_path: Path) -> None:
    assert (case.fires_at is not None) == (case.kind == "fires") and (bool(case.fired) == (case.kind == "fires"))
    assert case.quiet_at, "every case checks a time at which the alert is quiet"
    test_file = tmp_path / f"{case.id}.yml"
    test_file.write_text(yaml.safe_dump(promtool_test(case), sort_keys=False))
    result = promtool("test", "rules", test_file)
    assert result.returncode == 0, output(result)


def test_a_healthy_cluster_fires_nothing(tmp_path: Path) -> None:
    """Every family a healthy cluster serves, for an hour, at the scrape's pace: no alert at all."""
    series: dict[str, str] = {
        'lagsched_live_slots{cluster="eu"}': "2x60",
        'lagsched_planned_slots{cluster="eu"}': "2x60",
        'lagsched_measurements_stale_after_seconds{cluster="eu"}': "600x60",
        'lagsched_table_commits_total{cluster="eu",table="lake.eu"}': "0+10x60",
        'lagsched_table_commit_failures_total{cluster="eu",table="lake.eu",reason="refused"}': "0x60",
        'lagsched_table_commit_failures_total{cluster="eu",table="lake.eu",reason="error"}': "0x60",
        'lagsched_table_care_runs_total{cluster="eu",outcome="ok"}': "1x60",
        'lagsched_table_care_runs_total{cluster="eu",outcome="failed"}': "0x60",
        'lagsched_table_care_last_run_timestamp_seconds{cluster="eu",outcome="ok"}': "0x60",
    }
    for t, workers in (("orders", 2), ("clicks", 1)):
        lb = f'cluster="eu",topic="{t}"'
        series |= {
            f"lagsched_topic_time_lag_seconds{{{lb}}}": "30x60",
            f"lagsched_topic_lag_records{{{lb}}}": "1200x60",
            f"lagsched_topic_lost_records{{{lb}}}": "0x60",
            f"lagsched_topic_linker_workers{{{lb}}}": f"{workers}x60",
            f"lagsched_topic_max_workers{{{lb}}}": f"{workers}x60",  # at its ceiling, and keeping up
            f"lagsched_topic_time_lag_slo_seconds{{{lb}}}": "600x60",
            f"lagsched_topic_open_transaction_bound_seconds{{{lb}}}": "300x60",
            f"lagsched_topic_owners{{{lb}}}": f"{workers}x60",
            f"lagsched_topic_measured_timestamp_seconds{{{lb}}}": "0+60x60",
            f"lagsched_topic_transaction_held_offsets{{{lb}}}": "0x60",
            f"lagsched_topic_open_transaction_seconds{{{lb}}}": "0x60",
            **{
                f'lagsched_topic_state{{{lb},state="{s}"}}': ("1x60" if s == "ok" else "0x60")
                for s in ("ok", "stalled", "stopped")
            },
        }
    test = promtool_test(Case("", "healthy", series))
    test["tests"][0]["alert_rule_test"] = [
        {"eval_time": at, "alertname": name, "exp_alerts": []} for name in alerts() for at in ("20m", "60m")
    ]
    test_file = tmp_path / "healthy.yml"
    test_file.write_text(yaml.safe_dump(test, sort_keys=False))
    result = promtool("test", "rules", test_file)
    assert result.returncode == 0, output(result)
