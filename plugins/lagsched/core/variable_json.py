"""The JSON of an Airflow Variable, read strictly: a syntax error or a key given twice is an error. Pure.

``json.loads`` keeps the last of two equal keys without a word, so a value pasted in a second time
(a cluster, a topic's override, a field) would silently win; every lagsched Variable is read here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from lagsched.core.errors import ConfigError

__all__ = ["loads", "short_repr"]

_ONCE = "each key at most once per object"


def loads(raw: str | bytes, variable: str, *, root: str = "") -> object:
    """``raw`` decoded; ``variable`` names the Variable in errors, ``root`` is the field path of the whole.

    >>> loads('{"a": {"b": 1}}', "lagsched_x")
    {'a': {'b': 1}}
    >>> loads('{"eu": {}, "eu": {"max_slots": 2}}', "lagsched_clusters")
    Traceback (most recent call last):
    ...
    lagsched.core.errors.ConfigError: invalid lagsched_clusters: eu: duplicate key (values {} and \
{'max_slots': 2}); each key at most once per object

    Raises:
        ConfigError: not JSON (``field`` is ``root``), or a key given twice in one object (``field``
            is the first such key's path; the message lists every one).
    """
    duplicates: dict[int, list[tuple[str, object, object]]] = {}

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                duplicates.setdefault(id(out), []).append((key, out[key], value))
            out[key] = value
        return out

    try:
        data: object = json.loads(raw, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        where = f"{root} = {short_repr(raw)}: " if root else ""
        raise ConfigError(
            f"invalid {variable}: {where}not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            "expected a JSON object",
            field=root,
            value=raw[:80],
            allowed="a JSON object",
        ) from None
    if duplicates:
        found = list(_duplicate_paths(data, (), duplicates))
        detail = "; ".join(
            f"{path}: duplicate key (values {short_repr(a, 30)} and {short_repr(b, 30)}); {_ONCE}"
            for path, a, b in found
        )
        path, _, last = found[0]
        raise ConfigError(f"invalid {variable}: {detail}", field=path, value=last, allowed=_ONCE)
    return data


def short_repr(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters.

    >>> short_repr("x" * 100, 10)
    "'xxxxxx..."
    """
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _duplicate_paths(
    node: object, path: tuple[str, ...], duplicates: Mapping[int, list[tuple[str, object, object]]]
) -> Iterable[tuple[str, object, object]]:
    if isinstance(node, dict):
        for key, first, second in duplicates.get(id(node), ()):
            yield ".".join((*path, key)), first, second
            yield from _duplicate_paths(first, (*path, key), duplicates)  # the value json dropped
        for key, value in node.items():
            yield from _duplicate_paths(value, (*path, key), duplicates)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _duplicate_paths(value, (*path, str(i)), duplicates)
