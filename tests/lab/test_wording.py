"""Counted nouns read as English: "1 cell", "2 cells" (issue 14, item 8: "1 cells")."""

import pytest

from lab.ladder.schedules import check_alphas
from lab.util.wording import plural


@pytest.mark.parametrize(
    "n, noun, want",
    [
        (1, "cell", "1 cell"),
        (2, "cell", "2 cells"),
        (0, "run", "0 runs"),
        (1, "process", "1 process"),
        (3, "process", "3 processes"),
        (2, "entry", "2 entries"),
        (2, "day", "2 days"),
        (2, "batch", "2 batches"),
        (2, "α line", "2 α lines"),
    ],
)
def test_plural(n, noun, want):
    assert plural(n, noun) == want


def test_irregular_and_numpy_counts():
    import numpy as np

    assert plural(2, "index", "indices") == "2 indices"
    assert plural(1, "index", "indices") == "1 index"
    assert plural(np.int64(1), "layer") == "1 layer"
    assert plural(np.int64(4), "layer") == "4 layers"


def test_a_schedule_of_one_value():
    with pytest.raises(ValueError, match="has 1 value but the model has 2 layers"):
        check_alphas([1.0], 2)
    with pytest.raises(ValueError, match="has 2 values but the model has 1 layer:"):
        check_alphas([1.0, 1.0], 1)
