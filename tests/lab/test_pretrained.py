"""save_pretrained / from_pretrained: the same logits bit for bit (sparse, dense, learned α with
its α back), loading with no data in sight, the tokenizer and the card back, and every bad
folder refused with a ValueError that names the path."""

from __future__ import annotations

import json
import math

import pytest
import torch

import fiblab
from lab.data.tokenizer import BPETokenizer
from lab.lm.model import FibLM, build_model
from lab.publish.pretrained import (
    FORMAT_KEY,
    ModelCard,
    from_pretrained,
    load_tokenizer,
    read_card,
    save_pretrained,
)

THETAS = (-0.7, 1.3)  # a learned model's θ per layer, away from the init


def _model(kind: str, vocab: int = 64) -> FibLM:
    """A tiny model with random weights (not the init): every parameter moved by noise."""
    over = {
        "stagger": dict(schedule="stagger"),
        "dense": dict(attention="dense"),
        "learned": dict(schedule="learned"),
        "pow2": dict(base="pow2", schedule=(0.75, 1.25)),
    }[kind]
    torch.manual_seed(0)
    m = build_model("tiny", vocab_size=vocab, **over)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
        if kind == "learned":
            for b, t in zip(m.blocks, THETAS):
                b.attn.theta.fill_(t)
    return m.eval()


def _ids(vocab: int = 64) -> torch.Tensor:
    return torch.randint(0, vocab, (2, 64), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("kind", ["stagger", "dense", "learned", "pow2"])
def test_save_load_gives_identical_logits_with_no_data_around(kind, tmp_path, monkeypatch):
    m = _model(kind)
    ids = _ids()
    want = m(ids)[0]
    save_pretrained(m, tmp_path / "model")
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)  # no runs/, no data cache, no store: the folder is all there is
    back = from_pretrained(tmp_path / "model")
    assert not back.training
    assert torch.equal(back(ids)[0], want)  # exact, not close
    assert back.cfg == m.cfg
    assert back.lm_head.weight is back.embed.weight  # still tied
    assert list(empty.iterdir()) == []


def test_learned_alpha_round_trips():
    m = _model("learned")
    # α = α_min + span·sigmoid(θ) by hand in float64 (0.5 + sigmoid(θ), the lab's defaults)
    by_hand = [0.5 + 1 / (1 + math.exp(-t)) for t in THETAS]
    assert m.alphas() == pytest.approx(by_hand, abs=1e-6)
    assert m.alphas() != pytest.approx(m.cfg.layer_alphas(), abs=1e-3)  # not the init


def test_learned_alpha_survives_the_folder(tmp_path):
    m = _model("learned")
    back = from_pretrained(save_pretrained(m, tmp_path / "m"))
    assert back.alphas() == m.alphas()
    assert [float(b.attn.theta.detach()) for b in back.blocks] == pytest.approx(THETAS, abs=1e-7)
    doc = json.loads((tmp_path / "m" / "config.json").read_text())
    assert doc[FORMAT_KEY] == 1 and doc["alphas"] == pytest.approx(m.alphas())


def test_public_api_has_save_and_from_pretrained(tmp_path):
    m = _model("stagger")
    fiblab.save_pretrained(m, tmp_path / "m")
    ids = _ids()
    assert torch.equal(fiblab.from_pretrained(tmp_path / "m")(ids)[0], m(ids)[0])


def _tokenizer(vocab: int) -> BPETokenizer:
    texts = ["In the beginning God created the heaven and the earth.\n"] * 50
    return BPETokenizer.train(texts, vocab_size=vocab)


@pytest.mark.parametrize("as_path", [False, True])
def test_tokenizer_comes_back(tmp_path, as_path):
    tok = _tokenizer(300)
    src = tok.save(tmp_path / "tok.json") if as_path else tok
    save_pretrained(_model("stagger", vocab=512), tmp_path / "m", tokenizer=src)
    back = load_tokenizer(tmp_path / "m")
    assert back.sha256() == tok.sha256()
    text = "In the beginning"
    assert back.encode(text) == tok.encode(text) and back.decode(back.encode(text)) == text


def test_a_tokenizer_larger_than_the_vocab_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"tokenizer has \d+ ids but the model's vocab_size is 64"):
        save_pretrained(_model("stagger"), tmp_path / "m", tokenizer=_tokenizer(300))


def test_saved_without_a_tokenizer_says_so(tmp_path):
    save_pretrained(_model("stagger"), tmp_path / "m")
    with pytest.raises(ValueError, match=r"tokenizer.json is missing.*without a tokenizer"):
        load_tokenizer(tmp_path / "m")


def test_card_says_what_the_model_is(tmp_path):
    m = _model("learned")
    card = ModelCard(
        name="tiny-run", data="bible", steps=12, total_steps=20, perplexity={"bible": 123.456789}
    )
    save_pretrained(m, tmp_path / "m", card=card)
    text = (tmp_path / "m" / "README.md").read_text()
    # by hand: per layer q,o 32·32, k,v 32·16, ffn 3·32·86 (hidden 85 rounded to even), two
    # norms of 32, one θ; then the tied embedding 64·32 once and the final norm
    layer = 2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 86 + 2 * 32 + 1
    assert "| parameters | 24,866 " in text and 2 * layer + 64 * 32 + 32 == 24_866
    assert "| per-layer α | 0.8318 1.2858 |" in text  # 0.5 + sigmoid(-0.7), 0.5 + sigmoid(1.3)
    assert "# tiny-run" in text and "| data | bible |" in text and "12 of 20" in text
    assert "bible 123.457" in text and "learned" in text
    assert "fiblab.from_pretrained" in text
    assert read_card(tmp_path / "m") == card


def test_card_without_perplexity(tmp_path):
    save_pretrained(_model("dense"), tmp_path / "m")
    text = (tmp_path / "m" / "README.md").read_text()
    assert "| held-out perplexity | not recorded |" in text and "dense" in text
    assert "| per-layer α | – |" in text


# -- bad folders -------------------------------------------------------------------------------
@pytest.fixture
def saved(tmp_path):
    save_pretrained(_model("stagger"), tmp_path / "m")
    return tmp_path / "m"


def _edit_config(d, fn):
    p = d / "config.json"
    doc = json.loads(p.read_text())
    fn(doc)
    p.write_text(json.dumps(doc))


def test_a_missing_folder_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"nowhere.*does not exist"):
        from_pretrained(tmp_path / "nowhere")


def test_a_folder_without_config_is_named(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(ValueError, match=r"x/config.json is missing.*save_pretrained"):
        from_pretrained(tmp_path / "x")


def test_missing_weights_are_named(saved):
    (saved / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"model.safetensors is missing"):
        from_pretrained(saved)


def test_another_format_version_is_refused(saved):
    _edit_config(saved, lambda d: d.update({FORMAT_KEY: 2}))
    with pytest.raises(ValueError, match=r"config.json is format version 2.*reads version 1"):
        from_pretrained(saved)


def test_a_foreign_config_is_refused(saved):
    (saved / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match=r"no 'fiblab_format' entry.*Hugging Face"):
        from_pretrained(saved)


@pytest.mark.parametrize(
    "edit", [{"d_model": 64}, {"n_layers": 3}, {"vocab_size": 65}], ids=["width", "depth", "vocab"]
)
def test_a_config_that_does_not_fit_the_weights_is_refused(saved, edit):
    _edit_config(saved, lambda d: d["model"].update(edit))
    with pytest.raises(ValueError, match=r"model.safetensors does not fit .*config.json"):
        from_pretrained(saved)


def test_a_damaged_weights_file_is_refused(saved):
    w = saved / "model.safetensors"
    w.write_bytes(w.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"model.safetensors does not fit .*damaged"):
        from_pretrained(saved)


def test_an_invalid_config_field_names_the_file(saved):
    _edit_config(saved, lambda d: d["model"].update({"colour": "red"}))
    with pytest.raises(ValueError, match=r"config.json has fields \['colour'\]"):
        from_pretrained(saved)


def test_saving_over_a_run_folder_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"model": {}, "steps": 3}))
    with pytest.raises(ValueError, match=r"holds another config.json"):
        save_pretrained(_model("stagger"), run)
    assert json.loads((run / "config.json").read_text()) == {"model": {}, "steps": 3}


def test_saving_again_replaces_the_save_and_its_stale_tokenizer(tmp_path):
    save_pretrained(_model("stagger", vocab=512), tmp_path / "m", tokenizer=_tokenizer(300))
    m = _model("dense", vocab=512)
    save_pretrained(m, tmp_path / "m")
    assert not (tmp_path / "m" / "tokenizer.json").exists()
    ids = _ids(512)
    assert torch.equal(from_pretrained(tmp_path / "m")(ids)[0], m(ids)[0])


def test_saving_into_a_folder_of_other_files_is_refused_and_leaves_them(tmp_path):
    """A folder with files but no earlier save (a user's notes, their own tokenizer.json) would
    lose its README.md and tokenizer.json to the save's: refused, byte for byte kept."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "README.md").write_text("my notes\n")
    (mine / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match=r"holds files but no earlier save \(README.md, tok"):
        save_pretrained(_model("stagger", vocab=512), mine, tokenizer=_tokenizer(300))
    assert sorted(p.name for p in mine.iterdir()) == ["README.md", "tokenizer.json"]
    assert (mine / "README.md").read_text() == "my notes\n"
    assert (mine / "tokenizer.json").read_text() == "{}"
    save_pretrained(_model("stagger"), tmp_path / "empty")  # a new folder …
    (tmp_path / "made").mkdir()
    save_pretrained(_model("stagger"), tmp_path / "made")  # … and an empty one are fine
