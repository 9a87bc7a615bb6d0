"""The one retry loop of MySQL work (`lagsched.adapters.transactions.retry_transient`): what it
retries, how many times, and what it raises when the attempts are spent."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pymysql
import pytest

from lagsched.adapters.transactions import DEADLOCK, LOCK_WAIT_TIMEOUT, RetriesExhausted, retry_transient
from lagsched.core.claims import RetryPolicy

POLICY = RetryPolicy(max_attempts=4, base_s=0.01, cap_s=0.04)


def attempts(*outcomes: object) -> tuple[Callable[[], object], list[int]]:
    """An attempt that raises or returns each outcome in turn, and the list of calls made."""
    calls: list[int] = []
    queue: Iterator[object] = iter(outcomes)

    def attempt() -> object:
        calls.append(len(calls) + 1)
        outcome = next(queue)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return attempt, calls


def deadlock() -> pymysql.MySQLError:
    return pymysql.err.OperationalError(DEADLOCK, "Deadlock found when trying to get lock")


def lock_wait() -> pymysql.MySQLError:
    return pymysql.err.OperationalError(LOCK_WAIT_TIMEOUT, "Lock wait timeout exceeded")


def test_transient_errors_are_retried_with_the_policys_backoff_until_an_attempt_succeeds() -> None:
    attempt, calls = attempts(deadlock(), lock_wait(), "done")
    sleeps: list[float] = []
    heard: list[BaseException | None] = []
    result = retry_transient(
        attempt, what="t", retry=POLICY, sleep=sleeps.append, rng=random.Random(3), on_retry=heard.append
    )
    assert result == "done" and calls == [1, 2, 3]
    assert sleeps == POLICY.backoffs(random.Random(3))[:2]  # the same jitter, attempt by attempt
    assert [type(e) for e in heard] == [pymysql.err.OperationalError] * 2


def test_other_errors_are_raised_at_once() -> None:
    attempt, calls = attempts(pymysql.err.OperationalError(1045, "Access denied"), "never")
    with pytest.raises(pymysql.err.OperationalError, match="Access denied"):
        retry_transient(attempt, what="t", retry=POLICY, sleep=lambda _s: None)
    attempt, calls2 = attempts(KeyError("a bug"))
    with pytest.raises(KeyError):
        retry_transient(attempt, what="t", retry=POLICY, sleep=lambda _s: None)
    assert calls == [1] and calls2 == [1]


def test_spent_attempts_raise_the_last_transient_error() -> None:
    last = lock_wait()
    attempt, calls = attempts(deadlock(), deadlock(), deadlock(), last)
    sleeps: list[float] = []
    with pytest.raises(pymysql.MySQLError) as info:
        retry_transient(attempt, what="t", retry=POLICY, sleep=sleeps.append)
    assert info.value is last and calls == [1, 2, 3, 4] and len(sleeps) == 3  # no backoff after the last


@pytest.mark.parametrize("last", [False, True], ids=["last-rejected", "last-deadlocked"])
def test_with_again_rejected_results_are_retried_and_spent_attempts_raise_retries_exhausted(last: bool) -> None:
    attempt, calls = attempts(True, deadlock(), True, deadlock() if last else True)
    heard: list[BaseException | None] = []
    with pytest.raises(RetriesExhausted):
        retry_transient(attempt, what="claim", retry=POLICY, sleep=lambda _s: None, again=bool, on_retry=heard.append)
    assert calls == [1, 2, 3, 4]
    assert [None if e is None else "deadlock" for e in heard] == [None, "deadlock", None]


def test_with_again_an_accepted_result_is_returned() -> None:
    attempt, calls = attempts(True, False)
    assert retry_transient(attempt, what="claim", retry=POLICY, sleep=lambda _s: None, again=bool) is False
    assert calls == [1, 2]
