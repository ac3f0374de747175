"""lab.publish.hf: fiblab models as transformers Llama checkpoints with equal logits.

Oracles: fiblab's own forward (and greedy decoding by repeated full forwards) on random — not
init — weights, hand-written Llama config values, the lab tokenizer's own ids; a dense fiblab
model with the same weights shows the sparse export really runs the sparse attention.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from lab.data.tokenizer import EOT, BPETokenizer
from lab.lm.model import build_model
from lab.publish import hf as H

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-4


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    # the pure-PyTorch kernel on both sides: no C++ build inside this file's time budget (the
    # kernels' equality is tests/lab/test_kernels.py's business)
    monkeypatch.setenv("FIBLAB_ATTN_IMPL", "torch")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")


def random_model(seed: int = 0, **overrides):
    """A tiny model with every parameter drawn at random (norm gains around 1, θ around 0)."""
    torch.manual_seed(seed)
    model = build_model("tiny", **overrides)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.dim() == 2:
                p.copy_(0.3 * noise)
            elif p.dim() == 1:  # RMSNorm gains
                p.copy_(1.0 + 0.3 * noise)
            else:  # learned θ (0-d)
                p.copy_(noise)
    return model.eval()


def ids_for(model, T: int, B: int = 2, seed: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.cfg.vocab_size, (B, T), generator=g)


def fib_logits(model, ids):
    with torch.no_grad():
        return model(ids)[0]


def hf_logits(hf, ids):
    with torch.no_grad():
        return hf(input_ids=ids).logits


def test_llama_config_matches_the_architecture_by_hand():
    cfg = build_model("tiny", attention="dense").cfg
    c = H.llama_config(cfg)
    assert (c.vocab_size, c.hidden_size, c.num_hidden_layers) == (64, 32, 2)
    assert (c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (4, 2, 8)
    assert c.intermediate_size == 86  # int(32 · 8/3) = 85, rounded up to even
    assert c.rms_norm_eps == 1e-6 and c.rope_parameters["rope_theta"] == 1e4
    assert c.rope_parameters["rope_type"] == "default" and c.hidden_act == "silu"
    assert c.tie_word_embeddings and not c.attention_bias and not c.mlp_bias
    assert c.max_position_embeddings == 64
    assert not hasattr(c, "fiblab")


def test_sparse_spec_carries_the_lab_settings():
    spec = H.sparse_spec(build_model("tiny", schedule="stagger").cfg)
    assert spec["alphas"] == [0.5, 1.5]  # L = 2 stagger
    assert (spec["window"], spec["rungs"], spec["base"], spec["rounding"]) == (2, 8, "fib", "round")
    assert (spec["reach"], spec["rung_policy"], spec["path"]) == (64, "recompute", "shift")
    frozen = H.sparse_spec(
        build_model("tiny", seq_len=128, train_seq_len=64, rung_policy="freeze").cfg
    )
    assert (frozen["reach"], frozen["rung_policy"]) == (64, "freeze")
    learned = random_model(schedule="learned")
    spec = H.sparse_spec(learned.cfg, learned.alphas())
    assert spec["path"] == "interp" and spec["alphas"] == learned.alphas()
    with pytest.raises(ValueError, match="path='blur'"):
        H.sparse_spec(build_model("tiny", schedule="learned", path="blur").cfg)


def test_dense_model_is_a_plain_llama_with_equal_logits(tmp_path):
    model = random_model(attention="dense")
    hf = H.to_llama(model)
    assert hf.config._attn_implementation != H.ATTN_NAME
    for T in (64, 17):
        ids = ids_for(model, T)
        ref = fib_logits(model, ids)
        assert (hf_logits(hf, ids) - ref).abs().max().item() <= TOL
    out = H.save_hf(model, tmp_path / "dense")
    data = json.loads((out / "config.json").read_text())
    assert "fiblab" not in data and "attn_implementation" not in data
    assert (out / "model.safetensors").is_file()
    from transformers import LlamaForCausalLM

    plain = LlamaForCausalLM.from_pretrained(out)  # no custom code
    ids = ids_for(model, 64)
    assert (hf_logits(plain, ids) - fib_logits(model, ids)).abs().max().item() <= TOL


@pytest.mark.parametrize(
    "overrides",
    [dict(schedule="fixed"), dict(schedule="stagger"), dict(base="pow2"), dict(schedule="learned")],
    ids=["fixed", "stagger", "pow2", "learned"],
)
def test_sparse_export_loads_with_equal_logits(tmp_path, overrides):
    model = random_model(**overrides)
    out = H.save_hf(model, tmp_path / "sparse")
    data = json.loads((out / "config.json").read_text())
    assert data["attn_implementation"] == H.ATTN_NAME
    assert data["fiblab"]["alphas"] == model.alphas()
    hf = H.load_hf(out)
    assert hf.config._attn_implementation == H.ATTN_NAME
    ids = ids_for(model, 64)
    ref = fib_logits(model, ids)
    got = hf_logits(hf, ids)
    assert (got - ref).abs().max().item() <= TOL
    dense = build_model("tiny", attention="dense").eval()
    dense.load_state_dict(model.state_dict(), strict=False)  # same weights, θ dropped
    assert (got - fib_logits(dense, ids)).abs().max().item() > 1e-2  # the sparse rule ran


@pytest.mark.parametrize("schedule", ["stagger", "learned"])
def test_cached_generation_equals_greedy_full_forwards(schedule):
    model = random_model(schedule=schedule)
    hf = H.to_llama(model)
    prompt = ids_for(model, 10, B=1)
    ones = torch.ones_like(prompt)
    got = hf.generate(prompt, attention_mask=ones, max_new_tokens=6, do_sample=False)
    x = prompt
    for _ in range(6):  # the oracle: fiblab forwards over the whole prefix, no cache
        x = torch.cat([x, fib_logits(model, x)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(got, x)


@pytest.mark.parametrize("policy", ["recompute", "freeze"])
def test_longer_than_training_follows_the_rung_policy(policy):
    # rungs=10 reaches f = 89: layer 1 (α = 1.5) has rung 1.5·55 = 82.5, beyond the training
    # length 64 but inside 96, so the two policies read different columns at T = 96
    model = random_model(schedule="stagger", rungs=10, rung_policy=policy)
    hf = H.to_llama(model)
    ids = ids_for(model, 96)
    longer = model.with_seq_len(96, rung_policy=policy)
    assert (82 in longer.plans()[1].lo) == (policy == "recompute")
    assert (hf_logits(hf, ids) - fib_logits(longer, ids)).abs().max().item() <= TOL


def test_attention_mask_is_refused():
    model = random_model(schedule="fixed")
    hf = H.to_llama(model)
    attn = hf.model.layers[0].self_attn
    q, kv = torch.zeros(1, 4, 5, 8), torch.zeros(1, 2, 5, 8)
    with pytest.raises(ValueError, match="no attention mask"):
        H.fiblab_sparse_attention(attn, q, kv, kv, torch.zeros(1, 1, 5, 5))


def test_padded_positions_are_refused():
    model = random_model(schedule="fixed")
    hf = H.to_llama(model)
    ids = ids_for(model, 8, B=2)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding: generate would shift row 0's positions
    with pytest.raises(ValueError, match="no padding"):
        hf.generate(ids, attention_mask=mask, max_new_tokens=2, do_sample=False)


@pytest.mark.slow  # 9 s (transformers in a fresh process); the loads above run in-process
def test_fresh_process_loads_with_just_import_lab_hf(tmp_path):
    model = random_model(schedule="stagger")
    out = H.save_hf(model, tmp_path / "export")
    ids = ids_for(model, 64)
    torch.save(ids, tmp_path / "ids.pt")
    script = (
        "import sys, torch\n"
        "import lab.publish.hf\n"
        "from transformers import AutoModelForCausalLM\n"
        "m = AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()\n"
        "with torch.no_grad():\n"
        "    torch.save(m(input_ids=torch.load(sys.argv[2])).logits, sys.argv[3])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    args = [str(out), str(tmp_path / "ids.pt"), str(tmp_path / "logits.pt")]
    r = subprocess.run(
        [sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    got = torch.load(tmp_path / "logits.pt")
    assert (got - fib_logits(model, ids)).abs().max().item() <= TOL


def test_tokenizer_exports_for_auto_tokenizer(tmp_path):
    texts = ["In the beginning God created the heaven and the earth."] * 20 + [
        "And the earth was without form, and void; and darkness was upon the face of the deep."
    ] * 20
    tok = BPETokenizer.train(texts, vocab_size=300)
    tok_file = tok.save(tmp_path / "tokenizer.json")
    model = random_model(attention="dense", vocab_size=300)
    out = H.save_hf(model, tmp_path / "export", tokenizer_file=tok_file)
    assert (out / "tokenizer.json").is_file() and (out / "tokenizer_config.json").is_file()
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    auto = AutoTokenizer.from_pretrained(out)
    assert auto.eos_token == EOT and auto.eos_token_id == tok.eot_id == 0
    text = "And God said, Let there be light: and there was light."
    assert auto(text)["input_ids"] == tok.encode(text)
    assert auto.decode(tok.encode(text)) == text
    assert AutoConfig.from_pretrained(out).eos_token_id == 0
    assert GenerationConfig.from_pretrained(out).eos_token_id == 0
    small = random_model(attention="dense")  # vocab 64 < the tokenizer's 300
    with pytest.raises(ValueError, match="vocab_size is 64"):
        H.save_hf(small, tmp_path / "bad", tokenizer_file=tok_file)


def test_missing_transformers_names_the_install(monkeypatch):
    model = random_model(attention="dense")
    monkeypatch.setitem(sys.modules, "transformers", None)  # import raises ImportError
    with pytest.raises(ValueError, match=r"pip install 'fiblab\[hf\]'"):
        H.to_llama(model)
    with pytest.raises(ValueError, match=r"pip install 'fiblab\[hf\]'"):
        H.load_hf(".")


def test_export_refuses_a_folder_it_would_damage_and_replaces_its_own(tmp_path):
    """Files but no earlier export (a user's README, their tokenizer.json), or a config.json
    that is not a transformers Llama's (a run folder, a fiblab save): refused, left as they
    were; an earlier transformers export is replaced."""
    model = random_model(attention="dense")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match="holds files but no earlier transformers export"):
        H.save_hf(model, mine)
    assert [p.name for p in mine.iterdir()] == ["tokenizer.json"]
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"model": {}, "steps": 3}')
    with pytest.raises(ValueError, match="holds another config.json"):
        H.save_hf(model, run)
    assert (run / "config.json").read_text() == '{"model": {}, "steps": 3}'
    out = H.save_hf(random_model(schedule="stagger"), tmp_path / "again")
    H.save_hf(model, out)  # the same folder again: replaced, now the dense model
    assert "attn_implementation" not in json.loads((out / "config.json").read_text())
