"""vis_embed.data.factorize: the one label -> code encoding (identities, classes, groups)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from vis_embed.data import factorize


def test_codes_follow_first_appearance_not_sort_order() -> None:
    codes, distinct = factorize(["dog", "cat", "dog", "ant"])
    assert codes.tolist() == [0, 1, 0, 2] and distinct == ["dog", "cat", "ant"]
    assert codes.dtype == np.int64


def test_labels_need_only_be_hashable() -> None:
    codes, distinct = factorize([("a", 1), None, 3, ("a", 1), "3"])
    assert codes.tolist() == [0, 1, 2, 0, 3] and distinct == [("a", 1), None, 3, "3"]
    empty, nothing = factorize([])
    assert empty.shape == (0,) and nothing == []


@given(st.lists(st.one_of(st.integers(-3, 3), st.text(max_size=2))))
def test_distinct_of_codes_gives_the_labels_back(labels: list) -> None:
    codes, distinct = factorize(labels)
    assert [distinct[code] for code in codes] == labels
    assert len(set(map(repr, distinct))) == len(distinct)
    # first appearance: each row's code is an old one or the next new one
    assert all(codes[i] <= max(codes[:i], default=-1) + 1 for i in range(len(codes)))


def test_none_is_missing_gets_minus_one_and_no_entry() -> None:
    codes, distinct = factorize(["b", None, "a", "b", None], none_is_missing=True)
    assert codes.tolist() == [0, -1, 1, 0, -1] and distinct == ["b", "a"]
