"""Any Hugging Face tokenizer file as the lab's tokenizer: WordPiece, BPE and Unigram files made
here with the `tokenizers` library, whose end-of-text token is not "<|endoftext|>"; the
separator found from the file or a tokenizer_config.json beside it; the cache hash; .bin ids
checked against the tokenizer; the model's vocab_size taken from it (`make_config`).

Oracles: the raw `tokenizers` encode of each document plus the separator id, written by hand,
and hashlib over the tokenizer's JSON.
"""

import hashlib
import json

import numpy as np
import pytest
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from lab.data.prepared import prepare
from lab.data.tokenizer import EOT, BPETokenizer, find_eot, write_tokens
from lab.training.trainconfig import config_from_file, make_config

WORDS = "river stone cloud lantern meadow quiet amber falcon willow harbor".split()


def docs(n=40, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(8, 30)))) + "." for _ in range(n)]


def wordpiece(path):
    """A BERT-style WordPiece file: [SEP] is its separator, and its post-processor would add
    [CLS] … [SEP] around every encode (the lab must not let it)."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    tok.train_from_iterator(
        docs(), trainers.WordPieceTrainer(vocab_size=120, special_tokens=specials)
    )
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
    )
    tok.save(str(path))
    return path


def bpe(path, specials=("<s>", "</s>", "<unk>")):
    """A Llama-2-like byte-level BPE with <s> / </s>."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(docs(), trainer)
    tok.save(str(path))
    return path


def unigram(path):
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=60, special_tokens=["<pad>", "<unk>", "<eos>"], unk_token="<unk>"
    )
    tok.train_from_iterator(docs(), trainer)
    tok.save(str(path))
    return path


@pytest.mark.parametrize(
    "make, eot",
    [(wordpiece, "[SEP]"), (bpe, "</s>"), (unigram, "<eos>")],
    ids=["wordpiece", "bpe", "unigram"],
)
def test_any_tokenizer_file_tokenises_documents_plus_its_separator(tmp_path, make, eot):
    path = make(tmp_path / "tokenizer.json")
    raw = Tokenizer.from_file(str(path))
    tok = BPETokenizer.load(path)
    assert (tok.eot, tok.eot_id) == (eot, raw.token_to_id(eot))
    assert tok.vocab_size == raw.get_vocab_size()
    text = docs(12, seed=1)
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in text))
    data = prepare(
        str(tmp_path / "c.jsonl"), cache_dir=tmp_path / "c", tokenizer=path, val_tokens=0
    )
    want = [i for d in text for i in raw.encode(d, add_special_tokens=False).ids + [tok.eot_id]]
    assert np.asarray(data.train).tolist() == want
    assert data.vocab_size == raw.get_vocab_size() and data.meta["eot_id"] == tok.eot_id
    if make is wordpiece:  # the post-processor's [CLS] never appears
        assert raw.token_to_id("[CLS]") not in want


def test_a_tokenizer_config_beside_names_the_separator_and_save_keeps_it(tmp_path):
    src = tmp_path / "hub"
    src.mkdir()
    path = bpe(src / "tokenizer.json", specials=("<|doc|>", "<unk>"))
    with pytest.raises(
        ValueError, match=r"tokenizer.json.*no end-of-text token.*eos_token.*tokenizer_config.json"
    ):
        BPETokenizer.load(path)
    (src / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "<|doc|>"}}))
    tok = BPETokenizer.load(path)
    assert (tok.eot, tok.eot_id) == ("<|doc|>", 0)
    copy = tok.save(tmp_path / "run" / "tokenizer.json")  # e.g. a run folder
    assert json.loads((copy.parent / "tokenizer_config.json").read_text()) == {
        "eos_token": "<|doc|>"
    }
    again = BPETokenizer.load(copy)
    assert again.eot == "<|doc|>" and again.sha256() == tok.sha256()
    # a config already at the destination that names another separator is corrected, its
    # other keys kept
    (tmp_path / "run" / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": "<unk>", "model_max_length": 64})
    )
    tok.save(copy)
    assert json.loads((copy.parent / "tokenizer_config.json").read_text()) == {
        "eos_token": "<|doc|>",
        "model_max_length": 64,
    }
    (src / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</nope>"}))
    with pytest.raises(ValueError, match="'</nope>' is not in the tokenizer's vocabulary"):
        BPETokenizer.load(path)


def test_the_hash_covers_the_separator_and_is_unchanged_for_endoftext(tmp_path):
    ours = BPETokenizer.train(docs(), 300)
    assert ours.eot == EOT and ours.eot_id == 0
    assert ours.sha256() == hashlib.sha256(ours.tok.to_str().encode()).hexdigest()  # as before
    path = bpe(tmp_path / "t.json")
    a, b = BPETokenizer.load(path), BPETokenizer.load(path, eot="<s>")
    assert a.tok.to_str() == b.tok.to_str() and a.sha256() != b.sha256()
    assert not (tmp_path / "tokenizer_config.json").exists()  # a found separator needs none
    a.save(tmp_path / "again.json")
    assert not (tmp_path / "tokenizer_config.json").exists()
    assert find_eot(a.tok) == "</s>"


def test_bin_ids_outside_the_tokenizer_are_refused(tmp_path):
    path = bpe(tmp_path / "t.json")  # 300 entries
    ok = write_tokens(tmp_path / "ok.bin", np.arange(299), 300)
    bad = write_tokens(tmp_path / "bad.bin", np.arange(305), 1000)
    kw = dict(cache_dir=tmp_path / "c", tokenizer=path, val_tokens=10)
    assert prepare(str(ok), **kw).meta["max_id"] == 298
    with pytest.raises(
        ValueError, match="bad.bin.*holds id 304, outside the tokenizer's 300 entries"
    ):
        prepare(str(bad), **kw)


def test_bad_tokenizer_files_name_the_path(tmp_path):
    with pytest.raises(ValueError, match="nope.json.*does not exist"):
        BPETokenizer.load(tmp_path / "nope.json")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(ValueError, match="x.json.*is not a tokenizers JSON"):
        BPETokenizer.load(tmp_path / "x.json")
    with pytest.raises(ValueError, match="nope.json.*does not exist"):
        make_config("tiny", {"tokenizer": str(tmp_path / "nope.json")})  # before any work


def test_the_model_vocab_becomes_the_tokenizers_size(tmp_path):
    path = bpe(tmp_path / "t.json")
    assert make_config("tiny").model.vocab_size == 512
    cfg = make_config("tiny", {"tokenizer": str(path)})
    assert cfg.tokenizer == str(path) and cfg.model.vocab_size == 300
    assert (
        make_config("tiny", {"tokenizer": str(path), "model.vocab_size": 320}).model.vocab_size
        == 320
    )
    with pytest.raises(ValueError, match="model.vocab_size 200 is smaller than the 300 entries"):
        make_config("tiny", {"tokenizer": str(path), "model.vocab_size": 200})
    # a run's config.json keeps its vocab; a new tokenizer on top brings its own size
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    assert config_from_file(str(tmp_path / "config.json")).model.vocab_size == 300
    wp = wordpiece(tmp_path / "wp.json")
    size = Tokenizer.from_file(str(wp)).get_vocab_size()
    other = config_from_file(str(tmp_path / "config.json"), {"tokenizer": str(wp)})
    assert other.model.vocab_size == size != 300
