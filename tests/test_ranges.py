import pytest

from debug_training_logs.ranges import format_ranges, parse_ranges


def test_ranges_round_trip() -> None:
    ranks = set(range(0, 37)) | set(range(38, 64))
    assert format_ranges(ranks) == "0-36,38-63"
    assert parse_ranges("0-36,38-63") == ranks
    assert format_ranges([5, 3, 4, 9]) == "3-5,9"
    assert format_ranges([]) == ""
    assert parse_ranges("") == set()


def test_parse_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        parse_ranges("5-3")
    with pytest.raises(ValueError):
        parse_ranges("a-b")
