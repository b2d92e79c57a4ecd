"""The matrices' helper: `pairwise` covers every pair of values of every two axes."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
from helpers import in_turn, pairwise


def _pairs_missing(axes: list[list[int]], rows: list[tuple[int, ...]]) -> set[Any]:
    missing = set()
    for a, b in itertools.combinations(range(len(axes)), 2):
        need = {(x, y) for x in axes[a] for y in axes[b]}
        missing |= {(a, b, *pair) for pair in need - {(r[a], r[b]) for r in rows}}
    return missing


@pytest.mark.parametrize("seed", range(4))
def test_pairwise_covers_every_pair_in_fewer_rows_than_the_product(seed: int) -> None:
    rnd = random.Random(seed)
    for _ in range(50):
        axes = [list(range(rnd.randint(1, 8))) for _ in range(rnd.randint(2, 6))]
        rows = pairwise(*axes)
        assert _pairs_missing(axes, rows) == set()
        assert all(len(row) == len(axes) for row in rows)
        assert len(rows) <= len(list(itertools.product(*axes)))
    assert len(pairwise(range(3), range(7), range(4))) == 28
    assert pairwise(range(3), range(7), range(4)) == pairwise(
        range(3), range(7), range(4)
    )


def test_in_turn_gives_each_value_its_share_of_the_others() -> None:
    rows = in_turn(list(range(12)), "abcd", per=2)
    assert [v for v, _ in rows] == [v for v in range(12) for _ in range(2)]
    assert {o: sum(r == o for _, r in rows) for o in "abcd"} == dict.fromkeys("abcd", 6)
