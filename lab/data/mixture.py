"""Mixtures: named domains, each a `PreparedData` with its own held-out split, sampled by weight.

`Mixture.prepare` tokenises every domain with one tokenizer (given, or a BPE trained on all
text domains by weight and cached under cache_dir/tokenizers/). A batch first draws each row's
domain with the weights, then its start in that domain, from the same `lab.data.sampling` generator
(a pure function of seed, step, micro-batch and rank). `paper_mixture` is the paper's four
domains over the user's own copies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lab.data.corpus import Source, parse_source
from lab.data.prepared import (
    FORMAT,
    TOKENIZER_TRAIN_CHARS,
    PreparedData,
    capped_documents,
    prepare,
    settings_hash,
)
from lab.data.sampling import Batches, batch_rng, check_window, windows_at
from lab.data.tokenizer import DEFAULT_VOCAB, BPETokenizer, check_train_vocab, resolve_tokenizer
from lab.util.checks import nonneg_int, positive_int
from lab.util.progress import reading

PAPER_MIXTURE_WEIGHTS = {"fineweb_edu": 0.35, "wikipedia": 0.22, "tinystories": 0.20, "math": 0.23}


@dataclass
class Mixture(Batches):
    """Named domains, each a PreparedData with its own val split, sampled with token weights
    (each sequence's domain is drawn with probability weight / sum of weights)."""

    domains: dict[str, PreparedData]
    weights: dict[str, float]
    tokenizer: BPETokenizer | None = None
    probs: np.ndarray = field(init=False)

    def __post_init__(self):
        if not self.domains:
            raise ValueError("a mixture needs at least one domain")
        if set(self.domains) != set(self.weights):
            raise ValueError(
                f"domains {sorted(self.domains)} and weights {sorted(self.weights)} "
                f"must name the same domains"
            )
        w = np.array([_check_weight(n, self.weights[n]) for n in self.names], dtype=np.float64)
        if w.sum() <= 0:
            raise ValueError(f"mixture weights {self.weights} sum to 0; give a positive weight")
        self.probs = w / w.sum()
        vocab = {d.vocab_size for d in self.domains.values()}
        if len(vocab) > 1:
            raise ValueError(
                f"mixture domains have different vocab sizes {sorted(vocab)}; "
                f"prepare them with one tokenizer"
            )

    @property
    def names(self) -> list[str]:
        return list(self.domains)

    @property
    def vocab_size(self) -> int:
        return next(iter(self.domains.values())).vocab_size

    @classmethod
    def prepare(
        cls,
        domains: Mapping[str, tuple[str | Path | Source, float]],
        vocab_size: int | None = None,
        cache_dir: str | Path = "runs/data",
        val_tokens: int | None = None,
        seed: int = 0,
        tokenizer: str | Path | BPETokenizer | None = None,
        tokenizer_train_chars: int = TOKENIZER_TRAIN_CHARS,
        progress: bool = False,
    ) -> Mixture:
        """Prepare every domain {name: (source spec, weight)} with one tokenizer: `tokenizer`
        if given, else a BPE trained on all text domains (each contributing up to
        tokenizer_train_chars × its normalised weight) and cached under cache_dir/tokenizers/.
        Token-file domains need `tokenizer` (the one they were made with) or `vocab_size`;
        they can be mixed with text domains only when `tokenizer` is given. `progress`: tqdm
        bars while the BPE reads and while each domain is tokenised."""
        if not domains:
            raise ValueError("a mixture needs at least one domain: {name: (source, weight)}")
        specs, weights = {}, {}
        for name, item in domains.items():
            try:
                spec, w = item
            except (TypeError, ValueError):
                raise ValueError(f"domain {name!r}: give (source, weight), got {item!r}") from None
            weights[name] = _check_weight(name, w)
            specs[name] = parse_source(spec)
        total = sum(weights.values())
        if total <= 0:
            raise ValueError(f"mixture weights {weights} sum to 0; give a positive weight")
        seed = nonneg_int(seed, "seed")
        tok = resolve_tokenizer(tokenizer)
        kinds = {n: s.kind == "tokens" for n, s in specs.items()}
        if any(kinds.values()) and not all(kinds.values()) and tok is None:
            bins = [n for n, k in kinds.items() if k]
            raise ValueError(
                f"domains {bins} are token files and the others text: pass "
                f"tokenizer= (fiblab train --tokenizer): the tokenizer.json the token files "
                f"were made with, which also tokenises the text domains"
            )
        if tok is None and not any(kinds.values()):
            vocab_size = check_train_vocab(DEFAULT_VOCAB if vocab_size is None else vocab_size)
            budget = positive_int(tokenizer_train_chars, "tokenizer_train_chars")
            fp = {
                "format": FORMAT,
                "vocab_size": vocab_size,
                "chars": budget,
                "domains": {n: [specs[n].fingerprint(), weights[n]] for n in specs},
            }
            tok_file = (
                Path(cache_dir) / "tokenizers" / f"mix-v{vocab_size}-{settings_hash(fp)[:16]}.json"
            )
            if tok_file.is_file():
                tok = BPETokenizer.load(tok_file)
            else:

                def texts():
                    for n, s in specs.items():
                        share = int(budget * weights[n] / total)
                        if share > 0:
                            yield from capped_documents(s.documents(), share, s)

                tok = BPETokenizer.train(
                    reading(texts(), "BPE for the mixture: reading text", progress), vocab_size
                )
                tok_file.parent.mkdir(parents=True, exist_ok=True)
                tok.save(tok_file)
        prepared = {
            n: prepare(specs[n], vocab_size, cache_dir, val_tokens, seed, tok, progress=progress)
            for n in specs
        }
        return cls(prepared, weights, tok)

    def draw(
        self,
        split: str,
        batch_size: int,
        seq_len: int,
        seed: int,
        step: int,
        micro: int = 0,
        rank: int = 0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(domain index per row, window start per row) from rng([seed, step, micro, rank]):
        domains first (with the weights), then each start uniform in [0, n_domain - T - 1)."""
        batch_size = positive_int(batch_size, "batch_size")
        highs = []
        for name, p in zip(self.names, self.probs):
            n = len(self.domains[name].tokens(split))
            if p > 0:
                check_window(n, seq_len, f"{split} split of domain {name!r}")
            highs.append(max(n - seq_len - 1, 1))
        rng = batch_rng(seed, step, micro, rank)
        dom = rng.choice(len(self.names), size=batch_size, p=self.probs)
        starts = rng.integers(0, np.asarray(highs, dtype=np.int64)[dom])
        return dom, starts

    def windows(self, split: str, drawn, seq_len: int) -> np.ndarray:
        dom, starts = drawn  # (B,) domain index, (B,) window start
        buf = np.empty((len(dom), seq_len + 1), dtype=np.int64)
        for k, name in enumerate(self.names):
            rows = np.flatnonzero(dom == k)
            if len(rows):
                buf[rows] = windows_at(self.domains[name].tokens(split), starts[rows], seq_len)
        return buf

    def eval_windows(
        self,
        domain: str,
        seq_len: int,
        split: str = "val",
        batch_size: int = 8,
        limit: int | None = None,
        device=None,
    ):
        if domain not in self.domains:
            raise ValueError(f"domain {domain!r} is not in the mixture {self.names}")
        return self.domains[domain].eval_windows(split, seq_len, batch_size, limit, device)


def paper_mixture(paths: Mapping[str, str | Path], **kwargs) -> Mixture:
    """The paper's four-domain mixture (PAPER_MIXTURE_WEIGHTS) over the user's own copies:
    paths = {"fineweb_edu": ..., "wikipedia": ..., "tinystories": ..., "math": ...} (any
    source spec). kwargs go to Mixture.prepare (the paper: vocab_size=32768, val_tokens=500000)."""
    missing = sorted(set(PAPER_MIXTURE_WEIGHTS) - set(paths))
    extra = sorted(set(paths) - set(PAPER_MIXTURE_WEIGHTS))
    if missing or extra:
        raise ValueError(
            f"paper mixture paths: missing {missing}, unknown {extra}; give exactly "
            f"{sorted(PAPER_MIXTURE_WEIGHTS)}"
        )
    return Mixture.prepare({n: (paths[n], w) for n, w in PAPER_MIXTURE_WEIGHTS.items()}, **kwargs)


def _check_weight(name: str, w) -> float:
    try:
        w = float(w)
    except (TypeError, ValueError):
        raise ValueError(f"domain {name!r}: weight {w!r} is not a number") from None
    if not math.isfinite(w) or w < 0:
        raise ValueError(f"domain {name!r}: weight {w} must be finite and >= 0")
    return w
