"""A training run's data: `load_data(cfg)` turns ``cfg.data`` and ``cfg.tokenizer`` into prepared
tokens (one `PreparedData`, or a `Mixture` of domains) and checks them against the model.

``cfg.data`` is one `lab.data.corpus` source spec or a mixture ``name=spec@weight,name=spec@weight``
(`parse_mixture`; each domain keeps its own held-out split). The tokenizer is

- ``cfg.tokenizer`` when set (any tokenizer.json): every text source or domain is tokenised
  with it, and a .bin source or domain is read as its ids (checked to lie below its size);
- else a byte-level BPE trained on the text (of all text domains, by weight), at the model's
  vocab_size. A .bin domain beside text domains cannot do without the tokenizer its ids came
  from: that is refused in one line saying so.

Either way the prepared data's cache key covers the tokenizer (`lab.data.prepared`), and `train`
copies the tokenizer used into the run folder.
"""

from __future__ import annotations

import os

from lab.data.corpus import parse_source


def parse_mixture(spec: str) -> dict[str, tuple[str, float]] | None:
    """{name: (source spec, weight)} of ``name=spec@weight,…``; None for a single source spec
    (one without "=")."""
    if "=" not in spec:
        return None
    domains: dict[str, tuple[str, float]] = {}
    for part in spec.split(","):
        name, _, rest = part.partition("=")
        source, _, weight = rest.rpartition("@")
        name, source = name.strip(), source.strip()
        if not (name and source and weight):
            raise ValueError(f"mixture part {part!r}: write name=source@weight")
        try:
            w = float(weight)
        except ValueError:
            raise ValueError(
                f"mixture part {part!r}: weight {weight!r} is not a number; write name=source@0.25"
            ) from None
        if name in domains:
            raise ValueError(f"mixture domain {name!r} is named twice; give each domain once")
        domains[name] = (source, w)
    return domains


def load_data(cfg, progress: bool = False, log=None, resumed: str | None = None):
    """The prepared corpus of ``cfg`` (a `lab.training.trainconfig.TrainConfig`): see the module doc.
    ``progress``: tqdm bars while tokenising; ``log``: where to say which tokenizer is used;
    ``resumed``: the folder of a run being resumed, whose tokenizer.json must be the one used
    (a given tokenizer is checked before any tokenising)."""
    from lab.data.mixture import Mixture
    from lab.data.prepared import prepare
    from lab.data.tokenizer import resolve_tokenizer

    vocab = cfg.vocab_size or cfg.model.vocab_size
    cache = os.path.join(cfg.run_dir, "data")
    tok = resolve_tokenizer(cfg.tokenizer) if cfg.tokenizer else None
    if tok is not None and log is not None:
        log(
            f"tokenizer {cfg.tokenizer}: {tok.describe()}; model vocab_size "
            f"{cfg.model.vocab_size:,}"
            + (
                f" ({cfg.model.vocab_size - tok.vocab_size:,} rows never used)"
                if cfg.model.vocab_size > tok.vocab_size
                else ""
            )
        )
    if resumed is not None:
        check_resume_tokenizer(resumed, tok)
    domains = parse_mixture(cfg.data)
    if domains is not None:
        if tok is None:
            _check_untokenised(domains)
        data = Mixture.prepare(
            domains,
            vocab_size=vocab,
            cache_dir=cache,
            val_tokens=cfg.val_tokens,
            tokenizer=tok,
            progress=progress,
        )
    else:
        data = prepare(
            cfg.data,
            vocab_size=vocab,
            cache_dir=cache,
            val_tokens=cfg.val_tokens,
            tokenizer=tok,
            progress=progress,
        )
    T = cfg.model.seq_len
    parts = data.domains.items() if hasattr(data, "domains") else [(cfg.data, data)]
    for name, part in parts:
        for split in ("train", "val"):
            n = len(part.tokens(split))
            if n <= T + 1:
                raise ValueError(
                    f"the {split} split of {name!r} has {n} tokens, not more than "
                    f"seq_len + 1 = {T + 1}: use more text, a shorter "
                    f"model.seq_len, or a different val_tokens"
                )
    if data.vocab_size > cfg.model.vocab_size:
        raise ValueError(
            f"the tokenizer has {data.vocab_size} ids but the model's vocab_size is "
            f"{cfg.model.vocab_size}: raise model.vocab_size"
        )
    if resumed is not None:
        check_resume_tokenizer(resumed, getattr(data, "tokenizer", None))
    return data


def check_resume_tokenizer(run_dir: str, tok) -> None:
    """A resumed run must see the token ids it was trained on: refuse when the run folder's
    tokenizer.json is not ``tok`` (a `BPETokenizer`; None: nothing to compare)."""
    from lab.data.tokenizer import BPETokenizer

    path = os.path.join(run_dir, "tokenizer.json")
    if tok is None or not os.path.isfile(path):
        return
    if BPETokenizer.load(path).sha256() != tok.sha256():
        raise ValueError(
            f"{run_dir} was trained with another tokenizer ({path}) than this one: resume "
            f"with the same --data and --tokenizer, or with --config {run_dir}/config.json"
        )


def _check_untokenised(domains: dict[str, tuple[str, float]]) -> None:
    """Without a tokenizer, .bin domains may not sit beside text domains: their ids mean
    something only with the tokenizer they were made with."""
    kinds = {n: parse_source(s).kind for n, (s, _) in domains.items()}
    bins = [n for n, k in kinds.items() if k == "tokens"]
    if bins and len(bins) < len(kinds):
        raise ValueError(
            f"mixture domains {bins} are token files (.bin) and the others text: pass "
            f"--tokenizer path/tokenizer.json, the tokenizer those ids came from (it also "
            f"tokenises the text domains); without .bin domains fiblab trains a BPE on the text"
        )
