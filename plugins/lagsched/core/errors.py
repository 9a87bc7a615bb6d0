"""Exception types a user can act on, one per failure, each naming the bad value and the fix."""

from __future__ import annotations

__all__ = ["ConfigError", "LagschedError"]


class LagschedError(Exception):
    """Base class, so callers can catch everything lagsched raises on purpose and nothing else."""


class ConfigError(LagschedError, ValueError):
    """The settings Variable (or another configuration source) holds a value we cannot use.

    `field` is the dotted path of the first offending field (``topics.orders.max_lag``), `value` the
    value found there and `allowed` what would have been accepted; the message lists every problem
    found, so one edit of the Variable can fix them all.
    """

    def __init__(self, message: str, *, field: str = "", value: object = None, allowed: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.value = value
        self.allowed = allowed
