"""The auxiliary battery: answers re-derived by brute force, seeds, chance levels, scoring."""

import math

import pytest
import torch

from lab.lm.model import build_model
from probes import battery
from probes.battery import Alphabet, assoc_recall_batch, lego_batch, ruler_vt_batch, run_battery

# ---------------------------------------------------------------- brute-force reading of items


def _statements(row: list[int], a: Alphabet) -> tuple[list[list[int]], int]:
    """Split one sequence into statements (without ';') and return them with the queried var."""
    while row and row[0] == a.pad:
        row = row[1:]
    assert row[-1] == a.eq, "the query must end with '='"
    query, body = row[-2], row[:-2]
    assert body[-1] == a.semi
    stmts, cur = [], []
    for tok in body:
        if tok == a.semi:
            stmts.append(cur)
            cur = []
        else:
            cur.append(tok)
    assert cur == []
    return stmts, query


def _resolve_ruler(row: list[int], a: Alphabet) -> int:
    """Follow var -> var -> … -> value through the declarations, with no knowledge of the chain."""
    stmts, var = _statements(row, a)
    table = {}
    for s in stmts:
        assert len(s) == 3 and s[1] == a.eq
        assert s[0] not in table, "each variable is assigned once"
        table[s[0]] = s[2]
    seen = set()
    vlo, vhi = a.value_range
    while not (vlo <= var < vhi):
        assert var not in seen, "cycle"
        seen.add(var)
        var = table[var]
    return var


def _resolve_lego(row: list[int], a: Alphabet) -> int:
    """Evaluate the queried variable over Z/2: bits are literals, 'flip y' is 1 − y."""
    stmts, var = _statements(row, a)
    table = {}
    for s in stmts:
        assert s[1] == a.eq and s[0] not in table
        table[s[0]] = s[2:]

    def value(v, depth=0):
        assert depth < 100
        rhs = table[v]
        if len(rhs) == 1:
            assert rhs[0] in a.bits
            return a.bits.index(rhs[0])
        op, src = rhs
        assert op in (a.op_identity, a.op_flip)
        return value(src, depth + 1) ^ (op == a.op_flip)

    return a.bits[value(var)]


# ------------------------------------------------------------------------------------ contents


@pytest.mark.parametrize("vocab", [64, 512, 32768])
@pytest.mark.parametrize("hops", [1, 2, 3, 4])
def test_ruler_answers_rederived(vocab, hops):
    a = Alphabet(vocab)
    b = ruler_vt_batch(64, hops, a, generator=hops)
    assert b.x.shape == (64, battery.ruler_vt_length(hops))
    assert b.x.dtype == torch.int64 and 0 <= int(b.x.min()) and int(b.x.max()) < vocab
    for i, row in enumerate(b.x.tolist()):
        ans = _resolve_ruler(row, a)
        assert ans == int(b.answer[i])
        assert int(b.candidates[i, b.answer_index[i]]) == ans
        stmts, _ = _statements(row, a)
        values = sorted(s[2] for s in stmts if a.value_range[0] <= s[2] < a.value_range[1])
        assert sorted(b.candidates[i].tolist()) == values  # the 9 values present
        assert len(set(values)) == len(values) == 1 + battery.N_DISTRACTORS
        lhs = [s[0] for s in stmts]
        assert len(set(lhs)) == hops + battery.N_DISTRACTORS  # fresh variables throughout


@pytest.mark.parametrize("vocab", [64, 512])
@pytest.mark.parametrize("length", [1, 2, 3, 4, 7])
def test_lego_answers_rederived(vocab, length):
    a = Alphabet(vocab)
    b = lego_batch(64, length, a, generator=length)
    assert b.x.shape == (64, battery.lego_length(length))
    assert 0 <= int(b.x.min()) and int(b.x.max()) < vocab
    for i, row in enumerate(b.x.tolist()):
        ans = _resolve_lego(row, a)
        assert ans == int(b.answer[i])
        assert b.candidates[i].tolist() == list(a.bits)
        assert a.bits[int(b.answer_index[i])] == ans
        assert len(_statements(row, a)[0]) == length


def test_lego_answers_balanced_and_ops_mixed():
    a = Alphabet(512)
    b = lego_batch(2000, 4, a, generator=0)
    assert 0.45 < b.answer_index.float().mean() < 0.55
    flips = (b.x == a.op_flip).sum().item()
    ids = (b.x == a.op_identity).sum().item()
    assert abs(flips - ids) < 0.1 * (flips + ids)


def test_statements_are_shuffled():
    a = Alphabet(512)
    b = ruler_vt_batch(400, 3, a, generator=1)
    # where does the value statement of the chain sit among the 11 statements? all slots occur
    slots = set()
    for row in b.x.tolist():
        stmts, _ = _statements(row, a)
        slots.add(next(j for j, s in enumerate(stmts) if s[2] == _resolve_ruler(row, a)))
    assert slots == set(range(3 + battery.N_DISTRACTORS))


def test_left_padding_and_too_short():
    a = Alphabet(64)
    b = ruler_vt_batch(4, 2, a, seq_len=60, generator=0)
    n = battery.ruler_vt_length(2)
    assert b.x.shape == (4, 60) and (b.x[:, : 60 - n] == a.pad).all()
    assert torch.equal(b.x[:, 60 - n :], ruler_vt_batch(4, 2, a, generator=0).x)
    with pytest.raises(ValueError, match="seq_len"):
        lego_batch(4, 4, a, seq_len=10, generator=0)


def test_alphabet_layout_and_errors():
    a = Alphabet(32768)
    assert (a.n_vars, a.n_values) == (200, 200)
    assert a.var_range == (7, 207) and a.value_range == (207, 407)
    a = Alphabet(1000, first_id=500)
    assert a.pad == 500 and a.value_range[1] <= 1000
    with pytest.raises(ValueError, match="vocab_size"):
        Alphabet(8)
    with pytest.raises(ValueError, match="vocab_size"):
        Alphabet(64, n_vars=40, n_values=40)
    with pytest.raises(ValueError, match="vocab_size"):
        Alphabet(64, first_id=60)
    with pytest.raises(ValueError, match="n_vars"):
        ruler_vt_batch(2, 4, Alphabet(64, n_vars=10, n_values=9), generator=0)
    with pytest.raises(ValueError, match="n_values"):
        ruler_vt_batch(2, 2, Alphabet(64, n_vars=20, n_values=5), generator=0)
    with pytest.raises(ValueError, match="generator"):
        lego_batch(2, 2, Alphabet(64), generator="x")


def test_seeds_reproduce():
    a = Alphabet(512)
    for make in (
        lambda g: ruler_vt_batch(16, 3, a, generator=g),
        lambda g: lego_batch(16, 3, a, generator=g),
    ):
        b1, b2, b3 = make(7), make(7), make(8)
        for f1, f2 in zip(b1, b2):
            assert torch.equal(f1, f2)
        assert not torch.equal(b1.x, b3.x)
        g = torch.Generator().manual_seed(7)
        first, second = make(g), make(g)  # a generator advances
        assert torch.equal(first.x, b1.x) and not torch.equal(second.x, b1.x)


def test_assoc_recall_items_rederived():
    """Each item: ``pairs`` statements ``k = v ;`` with distinct keys and values, the query one
    of the keys, the answer its value (read by hand), every value a candidate once."""
    a = Alphabet(128)
    b = assoc_recall_batch(60, 12, a, generator=torch.Generator().manual_seed(5))
    assert b.x.shape == (60, battery.assoc_recall_length(12)) == (60, 50)
    queried = set()
    for row, ans, cands, idx in zip(b.x.tolist(), b.answer, b.candidates, b.answer_index):
        stmts, key = _statements(row, a)
        table = {s[0]: s[2] for s in stmts}
        assert len(stmts) == len(table) == 12 and all(len(s) == 3 and s[1] == a.eq for s in stmts)
        assert all(a.var_range[0] <= k < a.var_range[1] for k in table)
        assert all(a.value_range[0] <= v < a.value_range[1] for v in table.values())
        assert len(set(table.values())) == 12
        assert int(ans) == table[key] == int(cands[idx])
        assert sorted(cands.tolist()) == sorted(table.values())
        queried.add([k for k, _ in sorted(table.items())].index(key))
    assert len(queried) > 6  # the queried pair is not always the same slot
    with pytest.raises(ValueError, match="pairs"):
        assoc_recall_batch(2, 1, a)


def test_chance_levels():
    assert battery.chance("assoc_recall") == pytest.approx(1 / 12)
    assert battery.chance("assoc_recall", pairs=16) == pytest.approx(1 / 16)
    assert battery.chance("ruler_vt") == pytest.approx(1 / 9)
    assert battery.chance("ruler_vt", n_distractors=4) == pytest.approx(1 / 5)
    assert battery.chance("lego") == 0.5
    with pytest.raises(ValueError, match="task"):
        battery.chance("lambada")


# ------------------------------------------------------------------------------------- scoring


class Oracle(torch.nn.Module):
    """Cheats: reads the answer off the sequence by brute force and puts all mass on it."""

    def __init__(self, vocab, alphabet):
        super().__init__()
        self.vocab, self.a = vocab, alphabet

    def forward(self, ids):
        logits = torch.zeros(*ids.shape, self.vocab)
        for i, row in enumerate(ids.tolist()):
            lego = any(t in (*self.a.bits, self.a.op_identity, self.a.op_flip) for t in row)
            resolve = _resolve_lego if lego else _resolve_ruler
            logits[i, -1, resolve(row, self.a)] = 10.0
        return logits, None


class Constant(torch.nn.Module):
    """Equal logits everywhere: the forced choice falls on the first candidate."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab

    def forward(self, ids):
        return torch.zeros(*ids.shape, self.vocab), None


class Noise(torch.nn.Module):
    """Random logits independent of the input."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab, self.g = vocab, torch.Generator().manual_seed(3)

    def forward(self, ids):
        return torch.randn(*ids.shape, self.vocab, generator=self.g), None


def _within(acc, p, n, z=4.0):
    return abs(acc - p) <= z * math.sqrt(p * (1 - p) / n)


def test_oracle_scores_one():
    vocab = 128
    rep = run_battery(Oracle(vocab, Alphabet(vocab)), vocab, n=40, seed=1)
    for task in ("ruler_vt", "lego"):
        assert rep[task]["acc"] == pytest.approx(1.0)
        assert rep[task]["n"] == 120
    assert rep["assoc_recall"]["acc"] == pytest.approx(1.0) and rep["assoc_recall"]["n"] == 40
    assert set(rep["ruler_vt"]) == {"acc", "acc_h2", "acc_h3", "acc_h4", "chance", "n"}
    assert set(rep["lego"]) == {"acc", "acc_L2", "acc_L3", "acc_L4", "chance", "n"}
    assert set(rep["assoc_recall"]) == {"acc", "acc_p12", "chance", "n"}


@pytest.mark.parametrize("model_cls", [Constant, Noise])
def test_uninformed_models_score_chance(model_cls):
    vocab, n = 128, 400
    rep = run_battery(model_cls(vocab), vocab, seq_len=60, n=n, seed=2)
    for task in ("ruler_vt", "lego", "assoc_recall"):
        r = rep[task]
        assert _within(r["acc"], r["chance"], r["n"]), (task, r)
    assert rep["ruler_vt"]["chance"] == pytest.approx(1 / 9) and rep["lego"]["chance"] == 0.5
    assert rep["assoc_recall"]["chance"] == pytest.approx(1 / 12)


def test_run_battery_on_fiblm():
    torch.manual_seed(0)
    model = build_model("tiny")
    model.train()
    rep = run_battery(model, 64, seq_len=None, n=8, seed=0, device="cpu")
    assert model.training  # mode restored
    for task in ("ruler_vt", "lego"):
        assert 0.0 <= rep[task]["acc"] <= 1.0 and rep[task]["n"] == 24
    assert 0.0 <= rep["assoc_recall"]["acc"] <= 1.0 and rep["assoc_recall"]["n"] == 8
    again = run_battery(model, 64, n=8, seed=0)
    assert again == rep  # seeded end to end
    with pytest.raises(ValueError, match="seq_len"):
        run_battery(model, 64, seq_len=65, n=2)  # longer than the model's context
    with pytest.raises(ValueError, match="vocab"):
        run_battery(model, 512, n=2)  # ids beyond the model's vocab
