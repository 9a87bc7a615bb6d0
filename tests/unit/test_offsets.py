from __future__ import annotations

import json

import pytest

from lagsched.core.offsets import OffsetRange, spark_kafka_options


def test_options_cover_exactly_the_ranges() -> None:
    opts = spark_kafka_options(
        [OffsetRange("b", 2, 100, 600), OffsetRange("b", 0, 100, 600), OffsetRange("a", 1, 5, 6)]
    )
    assert json.loads(opts["assign"]) == {"a": [1], "b": [0, 2]}
    assert json.loads(opts["startingOffsets"]) == {"a": {"1": 5}, "b": {"0": 100, "2": 100}}
    assert json.loads(opts["endingOffsets"]) == {"a": {"1": 6}, "b": {"0": 600, "2": 600}}


@pytest.mark.parametrize(
    ("args", "message"),
    [(("t", -1, 0, 1), "partition"), (("t", 0, 5, 4), "start <= end"), (("t", 0, -1, 4), "start <= end")],
)
def test_bad_range_is_refused(args: tuple[str, int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OffsetRange(*args)


def test_duplicate_partition_and_empty_input_are_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        spark_kafka_options([OffsetRange("t", 0, 0, 1), OffsetRange("t", 0, 1, 2)])
    with pytest.raises(ValueError, match="no offset ranges"):
        spark_kafka_options([])
