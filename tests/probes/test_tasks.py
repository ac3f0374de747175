"""Synthetic retrieval tasks against brute-force per-position Python oracles.

Chance-level checks use seeded random logits, so each is deterministic; the tolerances are five
binomial standard deviations, sqrt(p(1-p)/N), of the accuracy over the N scored positions, so a
correct helper would fail them with probability < 1e-6 for a fresh seed, while an off-by-one or a
wrong mask (accuracy 1.0, 0 or a different p) falls far outside.
"""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from probes.tasks import (
    EVAL_DISTANCES,
    IGNORE,
    KVRetrieval,
    MarkedCopy,
    ShiftCopy,
    forced_choice_accuracy,
    kv_retrieval_batch,
    marked_copy_accuracy,
    marked_copy_batch,
    sample_distance,
    shift_copy_accuracy,
    shift_copy_batch,
)

SMALL_KV = KVRetrieval(
    seq_len=12, vocab=64, filler=(0, 16), keys=(16, 32), values=(32, 48), n_distract=2
)


def five_sigma(p, n):
    return 5 * math.sqrt(p * (1 - p) / n)


def random_logits(shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------------- marked copy


def test_marked_copy_targets_brute_force():
    cfg = MarkedCopy()
    x, y = marked_copy_batch(3, cfg, generator=0)
    assert x.shape == y.shape == (3, 512) and x.dtype == y.dtype == torch.int64
    for b in range(3):
        row, tgt = x[b].tolist(), y[b].tolist()
        for t in range(512):
            assert 0 <= row[t] < 512
            d = (200, 350)[row[t] // 256]  # marker read back from the id
            assert tgt[t] == (row[t - d] if t >= d else -100), (b, t)
    marker = x // 256
    assert 0.45 < marker.float().mean() < 0.55  # both markers drawn, about equally


def test_marked_copy_three_markers():
    cfg = MarkedCopy(seq_len=64, vocab=48, n_payload=16, distances=(3, 7, 20))
    x, y = marked_copy_batch(4, cfg, generator=5)
    assert set((x // 16).unique().tolist()) == {0, 1, 2}
    for b in range(4):
        for t in range(64):
            d = cfg.distances[int(x[b, t]) // 16]
            assert int(y[b, t]) == (int(x[b, t - d]) if t >= d else IGNORE)


def test_marked_copy_accuracy_perfect_and_chance():
    cfg = MarkedCopy()
    x, y = marked_copy_batch(4, cfg, generator=1)
    perfect = F.one_hot(y.clamp(min=0), 512).float()
    assert marked_copy_accuracy(perfect, x, cfg) == {0: 1.0, 1: 1.0}

    # chance with a 32-id vocabulary (p = 1/32) so the band is tight; N ≈ 64·(512−d)/2 per class
    small = MarkedCopy(seq_len=512, vocab=32, n_payload=16, distances=(200, 350))
    x, y = marked_copy_batch(64, small, generator=2)
    acc = marked_copy_accuracy(random_logits((64, 512, 32), 3), x, small)
    for j, d in enumerate(small.distances):
        n = int(((x // 16)[:, d:] == j).sum())
        assert abs(acc[j] - 1 / 32) < five_sigma(1 / 32, n), (j, acc[j])

    # class-resolved: logits right only where the marker is 0 → class 0 perfect, class 1 at chance
    logits = random_logits((64, 512, 32), 4)
    m0 = (x // 16 == 0) & (y >= 0)
    logits[m0] = F.one_hot(y[m0], 32).float() * 100
    acc = marked_copy_accuracy(logits, x, small)
    assert acc[0] == 1.0 and acc[1] < 1 / 32 + five_sigma(1 / 32, 64 * 162 // 2)


# ------------------------------------------------------------------------------ key-value recall


def check_kv_row(row, answer, cands, ans_idx, d, cfg):
    """Loop over every position and check it holds what the task says; return distractor starts."""
    T, n = cfg.seq_len, cfg.n_distract
    in_keys = lambda v: cfg.keys[0] <= v < cfg.keys[1]
    in_vals = lambda v: cfg.values[0] <= v < cfg.values[1]
    assert len(row) == T and len(cands) == 1 + n
    assert cands[ans_idx] == answer and in_vals(answer)
    k_star = row[T - 1]
    assert in_keys(k_star) and row[T - 2 - d] == k_star and row[T - 1 - d] == answer
    target = {T - 2 - d, T - 1 - d, T - 1}
    starts, used = [], set(target)
    for t in range(T):
        if t in target:
            continue
        v = row[t]
        if in_keys(v):
            assert t + 1 < T and t + 1 not in target, f"distractor key at {t} hits the target"
            assert in_vals(row[t + 1]), f"key at {t} not followed by a value"
            assert t not in used and t + 1 not in used, f"pairs overlap at {t}"
            used |= {t, t + 1}
            starts.append(t)
        elif in_vals(v):
            assert t - 1 in starts, f"value at {t} without its key"
        else:
            assert cfg.filler[0] <= v < cfg.filler[1], f"filler {v} at {t} out of range"
    assert len(starts) == n
    keys = [k_star] + [row[s] for s in starts]
    values = [answer] + [row[s + 1] for s in starts]
    assert len(set(keys)) == 1 + n and len(set(values)) == 1 + n
    assert sorted(values) == sorted(cands)
    assert row.count(k_star) == 2  # K* only at the target and the query
    return starts


@pytest.mark.parametrize("d", [1, 2, 37, 500, 900, 1022])
def test_kv_layout_brute_force(d):
    cfg = KVRetrieval()
    bt = kv_retrieval_batch(3, d, cfg, generator=d)
    assert bt.x.shape == (3, 1024) and bt.answer.shape == bt.answer_index.shape == (3,)
    assert bt.candidates.shape == (3, 5)
    assert all(t.dtype == torch.int64 for t in bt)
    for b in range(3):
        check_kv_row(
            bt.x[b].tolist(),
            int(bt.answer[b]),
            bt.candidates[b].tolist(),
            int(bt.answer_index[b]),
            d,
            cfg,
        )


@pytest.mark.parametrize("d", [1, 2, 5, 9, 10])
def test_kv_tight_fit(d):
    # T=16: the free runs hold exactly ⌊(13−d)/2⌋ + ⌊(d−1)/2⌋ pairs; fill them all
    runs = (16 - 2 - d) // 2 + (d - 1) // 2
    cfg = KVRetrieval(
        seq_len=16, vocab=64, filler=(0, 16), keys=(16, 32), values=(32, 48), n_distract=runs
    )
    bt = kv_retrieval_batch(20, d, cfg, generator=0)
    for b in range(20):
        check_kv_row(
            bt.x[b].tolist(),
            int(bt.answer[b]),
            bt.candidates[b].tolist(),
            int(bt.answer_index[b]),
            d,
            cfg,
        )
    with pytest.raises(ValueError, match=f"n_distract={runs + 1}"):
        kv_retrieval_batch(
            2,
            d,
            KVRetrieval(
                seq_len=16,
                vocab=64,
                filler=(0, 16),
                keys=(16, 32),
                values=(32, 48),
                n_distract=runs + 1,
            ),
            generator=0,
        )


def test_kv_placement_uniform_over_all_arrangements():
    # enumerate every legal placement of 2 pairs at T=12, d=4 and compare sampled frequencies
    cfg, d, N = SMALL_KV, 4, 20000
    T = cfg.seq_len
    blocked = {T - 2 - d, T - 1 - d, T - 1}
    legal_starts = [s for s in range(T - 1) if s not in blocked and s + 1 not in blocked]
    arrangements = [c for c in itertools.combinations(legal_starts, 2) if c[1] - c[0] >= 2]
    bt = kv_retrieval_batch(N, d, cfg, generator=11)
    is_key = (bt.x >= 16) & (bt.x < 32)
    is_key[:, [T - 2 - d, T - 1]] = False
    starts = is_key.nonzero()[:, 1].view(N, 2)
    code = torch.bincount(starts[:, 0] * T + starts[:, 1], minlength=T * T).tolist()
    legal = {s0 * T + s1 for s0, s1 in arrangements}
    assert all(c == 0 for i, c in enumerate(code) if i not in legal)  # nothing illegal drawn
    p = 1 / len(arrangements)  # 16 arrangements: 6 both left, 10 split
    for i in legal:
        assert abs(code[i] / N - p) < five_sigma(p, N), (divmod(i, T), code[i], N * p)


def test_kv_answer_index_uniform_and_candidates_distinct():
    bt = kv_retrieval_batch(5000, 4, SMALL_KV, generator=3)
    freq = torch.bincount(bt.answer_index, minlength=3).float() / 5000
    assert (freq - 1 / 3).abs().max() < five_sigma(1 / 3, 5000)
    assert all(len(set(r)) == 3 for r in bt.candidates.tolist())


def test_forced_choice_accuracy():
    cfg = KVRetrieval()
    bt = kv_retrieval_batch(8, 300, cfg, generator=0)
    perfect = F.one_hot(bt.answer, cfg.vocab).float()
    assert forced_choice_accuracy(perfect, bt.candidates, bt.answer_index) == 1.0
    # a logit boosted on a value that is not a candidate must not count
    off = perfect.clone()
    off[:, 27999] = 10.0
    assert forced_choice_accuracy(off, bt.candidates, bt.answer_index) == 1.0

    # chance = 1/(1+n_distract) = 1/3 here; N = 5000 rows
    bt = kv_retrieval_batch(5000, 4, SMALL_KV, generator=1)
    acc = forced_choice_accuracy(random_logits((5000, 64), 2), bt.candidates, bt.answer_index)
    assert abs(acc - 1 / 3) < five_sigma(1 / 3, 5000)
    # all-equal logits: argmax takes the first candidate, right only as often as chance
    acc = forced_choice_accuracy(torch.zeros(5000, 64), bt.candidates, bt.answer_index)
    assert abs(acc - 1 / 3) < five_sigma(1 / 3, 5000)


def test_distance_samplers():
    g = torch.Generator().manual_seed(0)
    cov = [sample_distance("coverage", g) for _ in range(500)]
    assert all(16 <= d <= 900 for d in cov) and min(cov) < 60 and max(cov) > 850
    band = [sample_distance("band", g) for _ in range(300)]
    assert all(773 <= d <= 823 for d in band) and len(set(band)) > 35
    multi = [sample_distance("multiband", g) for _ in range(600)]
    hits = [sum(abs(d - c) <= 20 for d in multi) for c in (300, 600, 800)]
    assert sum(hits) == 600 and min(hits) > 150  # every draw in a band; each band ≈ 200
    assert sample_distance("band", 7) == sample_distance("band", 7)
    assert EVAL_DISTANCES["coverage"] == tuple(range(40, 881, 40))
    assert EVAL_DISTANCES["band"] == (120, 250, 400, 610, 700, 770, 798, 820, 850, 937)
    assert EVAL_DISTANCES["multiband"] == (120, 300, 450, 600, 720, 800, 880)
    for ds in EVAL_DISTANCES.values():  # every eval distance builds a default batch
        for d in ds:
            kv_retrieval_batch(1, d, generator=0)


# ------------------------------------------------------------------------------------ shift copy


@pytest.mark.parametrize("d", [1, 200, 1023])
def test_shift_copy_targets_brute_force(d):
    x, y = shift_copy_batch(2, d, generator=d)
    assert x.shape == y.shape == (2, 1024) and x.dtype == y.dtype == torch.int64
    for b in range(2):
        row, tgt = x[b].tolist(), y[b].tolist()
        for t in range(1024):
            assert 0 <= row[t] < 256
            assert tgt[t] == (row[t - d] if t >= d else -100)


def test_shift_copy_accuracy_perfect_and_chance():
    x, y = shift_copy_batch(4, 100, generator=0)
    assert shift_copy_accuracy(F.one_hot(y.clamp(min=0), 512).float(), x, 100) == 1.0
    # random logits over the 256 ids in use: chance 1/256, N = 32·(1024−24) positions
    x, _ = shift_copy_batch(32, 24, generator=1)
    acc = shift_copy_accuracy(random_logits((32, 1024, 256), 2), x, 24)
    assert abs(acc - 1 / 256) < five_sigma(1 / 256, 32 * 1000)
    # an off-by-one distance on perfect logits scores chance, not 1.0
    x, y = shift_copy_batch(32, 25, generator=3)
    assert shift_copy_accuracy(F.one_hot(y.clamp(min=0), 256).float(), x, 24) < 0.02


# ------------------------------------------------------------------------------------ seeds


@pytest.mark.parametrize(
    "make",
    [
        lambda g: marked_copy_batch(4, MarkedCopy(), g),
        lambda g: tuple(kv_retrieval_batch(4, 300, KVRetrieval(), g)),
        lambda g: shift_copy_batch(4, 10, ShiftCopy(), g),
    ],
)
def test_seeds_reproduce_and_differ(make):
    same = lambda a, b: all(torch.equal(u, v) for u, v in zip(a, b))
    a = make(123)
    assert same(a, make(123))
    assert same(a, make(torch.Generator().manual_seed(123)))  # int seed ≡ fresh generator
    assert not same(a, make(124))
    g = torch.Generator().manual_seed(123)
    first, second = make(g), make(g)  # a generator advances
    assert same(first, a) and not same(first, second)


# ------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: shift_copy_batch(2, 1024, generator=0), "d=1024"),
        (lambda: shift_copy_batch(2, 0, generator=0), "d=0"),
        (lambda: shift_copy_batch(0, 5, generator=0), "batch=0"),
        (
            lambda: shift_copy_accuracy(
                torch.zeros(1, 8, 4), torch.zeros(1, 8, dtype=torch.long), 8
            ),
            "d=8",
        ),
        (lambda: ShiftCopy(vocab=100), "vocab=100"),
        (lambda: kv_retrieval_batch(2, 1023, generator=0), "d=1023"),
        (lambda: kv_retrieval_batch(2, 0, generator=0), "d=0"),
        (lambda: kv_retrieval_batch(2, 5, generator="seed"), "generator='seed'"),
        (
            lambda: kv_retrieval_batch(
                2,
                4,
                KVRetrieval(
                    seq_len=12,
                    vocab=64,
                    filler=(0, 16),
                    keys=(16, 32),
                    values=(32, 48),
                    n_distract=5,
                ),
                generator=0,
            ),
            "n_distract=5",
        ),  # 9 free cells hold 4 pairs
        (lambda: KVRetrieval(keys=(20000, 20003)), "n_distract=4"),
        (lambda: KVRetrieval(vocab=20000), "vocab=20000"),
        (lambda: KVRetrieval(keys=(19000, 24000)), r"keys=\(19000, 24000\)"),
        (lambda: KVRetrieval(values=(28000, 24000)), r"values=\(28000, 24000\)"),
        (lambda: MarkedCopy(distances=(200, 512)), "distance=512"),
        (lambda: MarkedCopy(vocab=300), "vocab=300"),
        (lambda: marked_copy_batch(2, generator=None), "generator=None"),
        (lambda: sample_distance("wide", 0), "kind='wide'"),
    ],
)
def test_bad_input_names_the_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()
