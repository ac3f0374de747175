"""generate: exactly max_new_tokens, the prompt kept, greedy = the argmax of model(ids) step by
step (with the window cropped to seq_len), seeded sampling reproducible and seed-dependent,
top-k and temperature against a float64 softmax by hand, EOT stopping only when asked."""

from __future__ import annotations

import math

import pytest
import torch

from lab.lm.generate import generate, next_token_probs
from lab.lm.model import build_model


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = build_model("tiny", schedule="stagger")  # vocab 64, seq_len 64
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.2 * torch.randn_like(p))  # sharper, less uniform logits than the init
    return m.eval()


def _prompt(B=2, T=5, seed=3):
    return torch.randint(0, 64, (B, T), generator=torch.Generator().manual_seed(seed))


def _greedy_by_hand(model, ids, n):
    out = ids.clone()
    with torch.no_grad():
        for _ in range(n):
            logits, _ = model(out[:, -model.cfg.seq_len :])
            out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return out


@pytest.mark.parametrize("n", [0, 1, 7])
def test_exactly_max_new_tokens_after_the_prompt(model, n):
    ids = _prompt()
    out = generate(model, ids, n, seed=0)
    assert out.shape == (2, 5 + n) and out.dtype == torch.long
    assert torch.equal(out[:, :5], ids)
    assert int(out.min()) >= 0 and int(out.max()) < 64


def test_greedy_is_the_argmax_of_the_model_step_by_step(model):
    ids = _prompt()
    assert torch.equal(generate(model, ids, 6, temperature=0), _greedy_by_hand(model, ids, 6))


def test_greedy_crops_the_window_to_seq_len(model):
    ids = _prompt(B=1, T=60)  # 60 + 10 > seq_len 64: the last steps see a cropped window
    out = generate(model, ids, 10, temperature=0)
    assert out.shape == (1, 70)
    assert torch.equal(out, _greedy_by_hand(model, ids, 10))


def test_top_k_1_is_greedy(model):
    ids = _prompt()
    assert torch.equal(generate(model, ids, 6, top_k=1, seed=5), _greedy_by_hand(model, ids, 6))


def test_same_seed_same_tokens_another_seed_others(model):
    ids = _prompt()
    a = generate(model, ids, 12, seed=0)
    assert torch.equal(generate(model, ids, 12, seed=0), a)
    assert not torch.equal(generate(model, ids, 12, seed=1), a)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(generate(model, ids, 12, generator=g), a)  # a generator = its seed


def test_a_seed_leaves_the_global_rng_alone(model):
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    generate(model, _prompt(), 5, seed=9)
    assert torch.equal(torch.rand(3), want)


def test_top_k_draws_only_among_the_k_most_likely(model):
    ids = _prompt(B=1, T=3)
    out = generate(model, ids, 15, top_k=3, temperature=2.0, seed=0)
    with torch.no_grad():
        for t in range(3, out.shape[1]):
            logits = model(out[:, :t])[0][0, -1]
            top3 = set(torch.topk(logits, 3).indices.tolist())
            assert int(out[0, t]) in top3


def test_probs_are_a_tempered_softmax_of_the_top_k_by_hand():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0, 0.0]])
    p = next_token_probs(logits, 0.5, top_k=3)  # keeps 3.0, 2.0, 0.5
    e = {i: math.exp(v / 0.5) for i, v in {3: 3.0, 0: 2.0, 2: 0.5}.items()}
    z = sum(e.values())
    want = [e.get(i, 0.0) / z for i in range(5)]
    assert p[0].tolist() == pytest.approx(want, rel=1e-6, abs=1e-12)
    flat = next_token_probs(logits, 1.0, top_k=None)
    z1 = sum(math.exp(v) for v in logits[0].tolist())
    assert flat[0].tolist() == pytest.approx([math.exp(v) / z1 for v in logits[0].tolist()])


def test_stops_at_eot_only_when_asked(model):
    ids = _prompt(B=1)
    first = int(_greedy_by_hand(model, ids, 1)[0, -1])  # make the first greedy token "the EOT"
    assert generate(model, ids, 8, temperature=0, eot_id=first).shape == (1, 13)
    out = generate(model, ids, 8, temperature=0, stop_at_eot=True, eot_id=first)
    assert out.shape == (1, 6) and int(out[0, -1]) == first


def test_eot_rows_that_end_early_are_filled_until_all_end(model):
    ids = _prompt(B=2)
    greedy = _greedy_by_hand(model, ids, 8)
    eot = int(greedy[0, 5])  # row 0's first new token
    out = generate(model, ids, 8, temperature=0, stop_at_eot=True, eot_id=eot)
    hits = [int(i) for i in (greedy[1, 5:] == eot).nonzero().flatten()]  # row 1's EOT steps
    n = 8 if not hits else hits[0] + 1
    assert out.shape == (2, 5 + n)
    assert out[0, 5:].tolist() == [eot] * n
    assert torch.equal(out[1], greedy[1, : 5 + n])


def test_training_mode_is_put_back(model):
    model.train()
    try:
        generate(model, _prompt(), 2, seed=0)
        assert model.training
    finally:
        model.eval()


def test_the_model_method_is_generate(model):
    ids = _prompt()
    assert torch.equal(
        model.generate(ids, 4, seed=2, top_k=5), generate(model, ids, 4, seed=2, top_k=5)
    )


@pytest.mark.parametrize(
    "kw, needle",
    [
        (dict(ids=torch.tensor([1, 2, 3])), "2-D"),
        (dict(ids=torch.zeros(1, 0, dtype=torch.long)), "no tokens"),
        (dict(ids=torch.tensor([[1, 64]])), r"outside \[0, vocab_size=64\)"),
        (dict(max_new_tokens=-1), "max_new_tokens=-1"),
        (dict(temperature=-0.5), "temperature=-0.5"),
        (dict(top_k=0), "top_k=0"),
    ],
)
def test_bad_input_is_a_value_error_naming_it(model, kw, needle):
    args = dict(ids=torch.tensor([[1, 2]]), max_new_tokens=3)
    args.update(kw)
    with pytest.raises(ValueError, match=needle):
        generate(model, args.pop("ids"), args.pop("max_new_tokens"), **args)
