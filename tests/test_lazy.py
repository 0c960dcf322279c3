"""LazySequence: indexing, negative indexes, slices, iteration and bounds, with each item made on every read."""

from __future__ import annotations

import pytest

from debug_training_logs.lazy import LazySequence


class _Squares(LazySequence[int]):
    def __init__(self, n: int) -> None:
        self.n, self.made = n, 0

    def __len__(self) -> int:
        return self.n

    def _at(self, i: int) -> int:
        self.made += 1
        return i * i


@pytest.mark.parametrize("n", [0, 1, 5])
def test_behaves_like_the_list_it_stands_for(n: int) -> None:
    seq, ref = _Squares(n), [i * i for i in range(n)]
    assert list(seq) == ref and len(seq) == n
    assert [seq[i] for i in range(-n, n)] == [ref[i] for i in range(-n, n)]
    for sl in (slice(None), slice(1, None), slice(None, None, -1), slice(-2, None), slice(0, 9, 2)):
        assert seq[sl] == ref[sl]
    for bad in (n, -n - 1):
        with pytest.raises(IndexError):
            seq[bad]


def test_items_are_made_on_each_read_never_all_at_once() -> None:
    seq = _Squares(1000)
    assert seq[999] == 998001 and seq.made == 1
    assert sum(1 for _ in zip(range(3), seq, strict=False)) == 3 and seq.made <= 5
