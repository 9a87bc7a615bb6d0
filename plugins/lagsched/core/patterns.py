"""Topic patterns from a Variable: RE2, matched in full, in time linear in the name. Pure.

RE2's syntax is Python's without lookarounds and backreferences. Python's ``re`` can backtrack
exponentially (``(a+)+$`` against 30 a's and a b would hang topic sync and the lag monitor); RE2
cannot. The clusters' ``topic_pattern`` and the routes' use these, so both say the same.

Example:
    >>> matches("clicks\\\\..*", "clicks.web"), matches("clicks\\\\..*", "clicks")
    (True, False)
"""

from __future__ import annotations

import functools
from typing import Any

import re2

__all__ = ["check_pattern", "compiled", "matches", "require_list"]


@functools.lru_cache(maxsize=256)
def compiled(pattern: str) -> Any:
    """``pattern`` compiled by RE2, quietly (RE2 would log a refused pattern on stderr as well)."""
    options = re2.Options()
    options.log_errors = False
    return re2.compile(pattern, options)


def matches(pattern: str, name: str) -> bool:
    """Whether `name` matches `pattern` in full."""
    return compiled(pattern).fullmatch(name) is not None


def check_pattern(pattern: str | None) -> str | None:
    """`pattern` if RE2 takes it; else the ValueError a model's validator raises (pydantic names the field)."""
    if pattern is not None:
        try:
            compiled(pattern)
        except re2.error as exc:
            reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
            raise ValueError(
                "a regular expression in RE2's syntax, matched in linear time: "
                f"no lookarounds or backreferences ({reason})"
            ) from None
    return pattern


def require_list(topics: Any) -> Any:
    """`topics` if it is a JSON list (a lone string would be read as its letters), else a ValueError."""
    if not isinstance(topics, list | tuple):
        raise ValueError("a list of topic names")
    return topics
