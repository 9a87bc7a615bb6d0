"""The docstrings' examples run: every lagsched module's doctests, as part of `make test`."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import lagsched

MODULES = sorted(m.name for m in pkgutil.walk_packages(lagsched.__path__, "lagsched."))


@pytest.mark.parametrize("name", MODULES)
def test_module_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} example(s) in {name} failed (see the output)"


def test_examples_exist_and_are_found() -> None:
    # A guard against a finder that finds nothing: these modules carry examples.
    attempted = sum(
        doctest.testmod(importlib.import_module(n), verbose=False).attempted
        for n in ("lagsched.core.lag", "lagsched.core.names", "lagsched.core.registry")
    )
    assert attempted >= 6
