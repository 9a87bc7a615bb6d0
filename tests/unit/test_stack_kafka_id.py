"""The stack's KRaft cluster ids: never one a command line reads as an option."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lagsched_dev.stack.services import new_cluster_id

pytestmark = pytest.mark.unit


def _draws(*values: bytes) -> Iterator[bytes]:
    yield from values


def test_an_id_that_would_start_with_a_dash_is_drawn_again() -> None:
    dash_first = bytes([0xF8]) + bytes(15)  # 111110... : base64 digit 62, "-" in the URL-safe alphabet
    plain = bytes([0x04]) + bytes(15)
    draws = _draws(dash_first, plain)
    cluster_id = new_cluster_id(lambda: next(draws))
    assert cluster_id == "BAAAAAAAAAAAAAAAAAAAAA"


def test_ids_are_22_url_safe_characters_without_padding() -> None:
    ids = {new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    for cluster_id in ids:
        assert len(cluster_id) == 22
        assert not cluster_id.startswith("-")
        assert set(cluster_id) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
