"""The held-out window rule (`lab.data.windows`) against hand counts.

n = 10 tokens, L = 3: windows read tokens 0–3, 3–6, 6–9 (three; nothing left over).  n = 9: the
third would need token 9, so two windows and a tail of two targets (tokens 7, 8) dropped.
"""

import numpy as np
import pytest

from lab.data.windows import n_windows, window_starts


@pytest.mark.parametrize(
    "n, L, expected",
    [
        (10, 3, 3),
        (9, 3, 2),
        (4, 3, 1),  # exactly L + 1 tokens: one window
        (3, 3, 0),  # L tokens: no target for the last input
        (1, 1, 0),
        (2, 1, 1),
        (0, 5, 0),  # an empty split holds none (not −1)
        (1000, 64, 15),  # 999 targets: 15 windows, a tail of 39
        (15 * 64 + 1, 64, 15),
        (15 * 64, 64, 14),
    ],
)
def test_hand_counts(n, L, expected):
    assert n_windows(n, L) == expected


def _by_hand(n, L):
    """Starts s = 0, L, 2L, … while the window's last target s + L is a token (s + L ≤ n − 1)."""
    starts, s = [], 0
    while s + L <= n - 1:
        starts.append(s)
        s += L
    return starts


@pytest.mark.parametrize("n", [0, 1, 2, 5, 17, 64, 65, 100])
@pytest.mark.parametrize("L", [1, 2, 7, 16])
@pytest.mark.parametrize("B", [1, 3, 8])
def test_starts_match_the_hand_enumeration(n, L, B):
    batches = list(window_starts(n, L, B))
    flat = [int(s) for b in batches for s in b]
    assert flat == _by_hand(n, L) and len(flat) == n_windows(n, L)
    assert all(len(b) == B for b in batches[:-1]) and all(0 < len(b) <= B for b in batches)
    assert all(b.dtype == np.int64 for b in batches)


def test_limit_keeps_the_first_windows():
    assert n_windows(100, 7, limit=3) == 3 and n_windows(100, 7, limit=1000) == 14
    got = [int(s) for b in window_starts(100, 7, 2, limit=3) for s in b]
    assert got == [0, 7, 14]


@pytest.mark.parametrize(
    "call, needle",
    [
        (lambda: n_windows(10, 0), "seq_len=0"),
        (lambda: n_windows(10, 2, limit=0), "limit=0"),
        (lambda: n_windows(10, True), "seq_len=True"),
        (lambda: next(window_starts(10, 2, 0)), "batch_size=0"),
    ],
)
def test_bad_input(call, needle):
    with pytest.raises(ValueError, match=needle):
        call()
