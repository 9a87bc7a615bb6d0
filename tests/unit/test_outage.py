"""Riding through an outage: the bookkeeping (`lagsched.core.outage`) and which errors qualify."""

from __future__ import annotations

import pymysql
import pytest
import redis

from lagsched.core.outage import BACKOFF_S, Outage
from lagsched.workflows.slot_keeper import ride_through


def test_waits_back_off_then_repeat_the_last_and_never_pass_the_bound() -> None:
    o = Outage(bound_s=20)
    waits, now = [], 0.0
    while (w := o.failed("kafka", now)) is not None:
        waits.append(w.seconds)
        now += w.seconds
    assert waits[: len(BACKOFF_S)] == list(BACKOFF_S)
    assert set(waits[len(BACKOFF_S) :]) <= {BACKOFF_S[-1], 20 - sum(waits[:-1])}
    assert sum(waits) == pytest.approx(20)  # the last wait ends exactly at the bound, then it gives up
    assert o.failed("kafka", now + 100) is None  # still past it


def test_a_state_change_is_reported_once_and_the_outage_counts_from_its_first_failure() -> None:
    o = Outage(bound_s=30)
    assert [o.failed("mysql", t).changed for t in (0, 1, 2)] == [True, False, False]  # type: ignore[union-attr]
    moved = o.failed("kafka", 10)
    assert moved is not None and moved.changed and moved.elapsed_s == 10  # another service, same outage
    assert o.failed("kafka", 31) is None
    assert o.recovered(32) == 32 and not o.active
    assert o.recovered(33) is None  # nothing to report twice
    again = o.failed("kafka", 40)
    assert again is not None and again.changed and again.seconds == BACKOFF_S[0]  # a new outage starts over


@pytest.mark.parametrize("bad", [{"bound_s": -1}, {"bound_s": 5, "backoff_s": ()}, {"bound_s": 5, "backoff_s": (1, 0)}])
def test_bad_settings_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Outage(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "rides"),
    [
        (redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:16379. Connection refused."), True),
        (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"), True),
        (pymysql.err.OperationalError(1205, "Lock wait timeout exceeded"), True),
        (pymysql.err.OperationalError(1045, "Access denied for user 'lagsched'"), False),  # a wrong password
        (redis.exceptions.AuthenticationError("invalid username-password pair"), False),
        (ValueError("a bug"), False),
    ],
)
def test_only_a_service_that_is_down_or_busy_is_ridden_through(error: BaseException, rides: bool) -> None:
    assert (ride_through(Outage(bound_s=60), error, 0.0, "test") is not None) is rides
