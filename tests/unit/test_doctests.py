"""The docstrings' examples run: every module's doctests, the runtime's and the tooling's, as part of
`make test`."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import lagsched
import lagsched_dev

MODULES = sorted(
    m.name
    for package in (lagsched, lagsched_dev)
    for m in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
    if not m.name.endswith(".__main__")  # importing one runs its command
)


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
