"""A run's variant: everything that makes two runs' numbers comparable, with the seed kept apart.

Two runs of one variant differ only in their seed (and in settings that change no number, such
as the micro-batch split, the checkpoint cadence or the run's name), so their results may be
averaged as seeds; runs of different variants may not.  The variant holds

- the model: attention, base, schedule (and a learned schedule's start), W, K, rounding, size
  (d_model, n_layers, heads, kv heads, vocab), seq_len and every other model field recorded;
- the data: the source spec, the prepared data's hash, the tokenizer's vocabulary, the held-out
  size;
- the training: steps, tokens per step, the optimizer recipe (lr, warm-up, decay, betas, eps,
  weight decay, clip) and the precision it ran in.

It is read from a run's stored config (`variant_of`): a ``TrainConfig.to_dict()`` (model fields
under ``"model"``; the store's copy also carries ``"provenance"``, what only the training process
knew: the prepared data's hash and the precision, see `provenance`) or a flat dict (``base``,
``schedule``, ``W`` / ``window``, ``K`` / ``rungs``, ``seq_len``, …).  A field the config lacks
(runs of older versions) is ``None``: unknown, and equal to the unknown of another such run.  A
field that has no effect on the configuration is ``None`` too (W, K, schedule … of a dense model;
K of a non-Fibonacci base; the start of a schedule that is not learned).

>>> a = variant_of(cfg_12_steps); b = variant_of(cfg_1500_steps)   # doctest: +SKIP
>>> differs(a, b), describe(a, differs(a, b))                      # doctest: +SKIP
(('steps',), 'steps=12')
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

__all__ = [
    "Variant",
    "FIELDS",
    "SCHEME_FIELDS",
    "variant_of",
    "seed_of",
    "flat",
    "ordered",
    "differs",
    "varying",
    "describe",
    "data_hash",
    "provenance",
]

# model fields read into named Variant fields (the rest go to `model_other`)
_MODEL_NAMED = (
    "attention",
    "base",
    "schedule",
    "learned_init",
    "window",
    "rungs",
    "rounding",
    "d_model",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "vocab_size",
    "seq_len",
)
# model fields without effect on a dense model
_SPARSE_ONLY = (
    "base",
    "schedule",
    "learned_init",
    "window",
    "rungs",
    "rounding",
    "coprime_stride",
    "path",
    "rung_policy",
    "train_seq_len",
    "alpha_min",
    "alpha_span",
)
# model fields a flat config may carry besides the named ones
_MODEL_EXTRA = ("ffn_ratio", "rope_theta", "norm_eps")
_RECIPE = ("lr", "min_lr_frac", "warmup", "betas", "eps", "weight_decay", "grad_clip")


@dataclass(frozen=True)
class Variant:
    """What a run is, less its seed: equal variants mean comparable runs. ``None``: unknown (or
    without effect). Lists of the config are tuples here; see the module docstring."""

    # which distances are attended
    attention: str | None = None
    base: Any = None  # "fib" | "pow2" | tuple of distances
    schedule: Any = None  # "fixed" | "stagger" | "coprime" | "learned" | tuple of α
    learned_init: Any = None  # the start of a learned schedule
    window: int | None = None  # W
    rungs: int | None = None  # K
    rounding: str | None = None
    # size and length
    d_model: int | None = None
    n_layers: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    vocab_size: int | None = None
    seq_len: int | None = None
    # every other model field recorded: sorted (name, value) pairs
    model_other: tuple = ()
    # data
    data: str | None = None  # the source spec
    data_hash: str | None = None  # the prepared data's hash (lab.data cache key)
    tokenizer_vocab: int | None = None
    val_tokens: int | None = None
    # training
    steps: int | None = None
    tokens_per_step: int | None = None
    lr: float | None = None
    min_lr_frac: float | None = None
    warmup: int | None = None
    betas: tuple | None = None
    eps: float | None = None
    weight_decay: float | None = None
    grad_clip: float | None = None
    precision: str | None = None

    @property
    def id(self) -> str:
        """A stable short hash of every field: equal ids, equal variants."""
        text = json.dumps(flat(self), sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


#: Field names in display order (`model_other` flattened into its own names: see `flat`).
FIELDS = tuple(f.name for f in fields(Variant) if f.name != "model_other")
#: The fields that say which distances a layer attends: a table's row label (``fib/stagger``,
#: its W) names most of them, so only a difference inside one row label is spelled out.
SCHEME_FIELDS = ("attention", *_SPARSE_ONLY)
# names shown in labels
_SHORT = {"window": "W", "rungs": "K"}


def _plain(v):
    """JSON lists as tuples (hashable, as the config dataclasses hold them)."""
    if isinstance(v, list):
        return tuple(_plain(x) for x in v)
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def _int(v):
    return None if v is None else int(v)


def variant_of(config: Mapping) -> Variant:
    """The variant of a run's stored config (a ``TrainConfig.to_dict()``, nested, or a flat dict
    of model fields; see the module docstring)."""
    if not isinstance(config, Mapping):
        raise ValueError(f"a run config must be a dict, got {type(config).__name__}")
    nested = isinstance(config.get("model"), Mapping)
    top = {k: _plain(v) for k, v in config.items() if k != "model"}
    model = {k: _plain(v) for k, v in config["model"].items()} if nested else dict(top)
    if not nested:  # a flat dict: the short names too, and only model-looking extra fields
        for short, name in (("W", "window"), ("K", "rungs")):
            if model.get(name) is None and short in model:
                model[name] = model[short]
        other = {k: model[k] for k in (*_SPARSE_ONLY, *_MODEL_EXTRA) if k in model}
    else:
        other = dict(model)
    m = {k: model.get(k) for k in _MODEL_NAMED}
    if m["seq_len"] is None:
        m["seq_len"] = top.get("seq_len")
    for k in _MODEL_NAMED:
        other.pop(k, None)
    if m["attention"] == "dense":  # nothing of the rung rule has an effect
        m.update({k: None for k in _SPARSE_ONLY if k in m})
        for k in _SPARSE_ONLY:
            other.pop(k, None)
    else:
        learned = m["schedule"] == "learned"
        if not learned:
            m["learned_init"] = None
        if m["base"] is not None and m["base"] != "fib":
            m["rungs"] = None  # K applies to the Fibonacci base only
        if "coprime" not in (m["schedule"], m["learned_init"]):
            other.pop("coprime_stride", None)
    prov = config.get("provenance")
    prov = prov if isinstance(prov, Mapping) else {}
    vocab = top.get("vocab_size")
    if vocab is None and "vocab_size" in top:
        vocab = m["vocab_size"]  # None in a TrainConfig: the tokenizer has the model's size
    return Variant(
        **{k: m[k] for k in ("attention", "base", "schedule", "learned_init", "rounding")},
        **{k: _int(m[k]) for k in _MODEL_NAMED[4:] if k != "rounding"},
        model_other=tuple(sorted(other.items())),
        data=top.get("data"),
        data_hash=prov.get("data_hash"),
        tokenizer_vocab=_int(vocab) if nested else None,
        val_tokens=_int(top.get("val_tokens")),
        steps=_int(top.get("steps")),
        tokens_per_step=_int(top.get("tokens_per_step")),
        precision=prov.get("precision"),
        **{k: top.get(k) for k in _RECIPE},
    )


def seed_of(config: Mapping, default: int | None = None) -> int | None:
    """The run's seed (the config's ``seed``, else ``default``; ``None`` when neither)."""
    if not isinstance(config, Mapping):
        raise ValueError(f"a run config must be a dict, got {type(config).__name__}")
    seed = config.get("seed")
    if seed is None or (isinstance(seed, float) and math.isnan(seed)):
        seed = default
    if seed is None or (isinstance(seed, float) and math.isnan(seed)):
        return None
    return int(seed)


def flat(v: Variant) -> dict[str, Any]:
    """Every field of ``v`` by name, `model_other` spread into its own names."""
    out = {f: getattr(v, f) for f in FIELDS}
    out.update(dict(v.model_other))
    return out


def ordered(names) -> list[str]:
    """``names`` of variant fields in display order (`FIELDS`; other model fields after)."""
    rank = {n: i for i, n in enumerate(FIELDS)}
    return sorted(names, key=lambda n: (rank.get(n, len(rank)), n))


def differs(a: Variant, b: Variant) -> tuple[str, ...]:
    """The names of the fields in which ``a`` and ``b`` differ (display order)."""
    fa, fb = flat(a), flat(b)
    return tuple(ordered(n for n in set(fa) | set(fb) if fa.get(n) != fb.get(n)))


def varying(variants: Sequence[Variant], among: Sequence[str] | None = None) -> tuple[str, ...]:
    """The fields (of ``among``, default all) whose values are not all equal over ``variants``."""
    flats = [flat(v) for v in variants]
    names = set().union(*flats) if flats else set()
    if among is not None:
        names &= set(among)
    return tuple(ordered(n for n in names if len({repr(f.get(n)) for f in flats}) > 1))


def _show(name: str, value) -> str:
    if value is None:
        return "?"
    if isinstance(value, tuple):
        return "(" + ",".join(_show(name, x) for x in value) + ")"
    if isinstance(value, float):
        return repr(value)
    if name == "data_hash":
        return str(value)[:12]
    return str(value)


def describe(v: Variant, names: Sequence[str]) -> str:
    """``"steps=12, seq_len=64"``: the values of ``v`` in the fields ``names`` (``?``: unknown;
    W and K by their short names)."""
    f = flat(v)
    return ", ".join(f"{_SHORT.get(n, n)}={_show(n, f.get(n))}" for n in names)


# ------------------------------------------------------------------------------------------------
# what training records beside the config
# ------------------------------------------------------------------------------------------------


def data_hash(data) -> str | None:
    """The hash of prepared data (`lab.data.prepared.PreparedData`: its cache key, which covers the
    source's fingerprint, the vocabulary, the held-out size and the tokenizer; a `Mixture`: a
    hash of its domains' keys and weights); ``None`` for data that has no such key."""
    domains = getattr(data, "domains", None)
    if isinstance(domains, Mapping):
        parts = {n: data_hash(d) for n, d in domains.items()}
        if any(p is None for p in parts.values()):
            return None
        weights = getattr(data, "weights", None)
        text = json.dumps({"domains": parts, "weights": weights}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()
    meta = getattr(data, "meta", None)
    key = meta.get("key") if isinstance(meta, Mapping) else None
    return None if key is None else str(key)


def provenance(data, precision: str) -> dict:
    """What only the training process knows, stored beside the config (key ``"provenance"``)
    so that `variant_of` can tell runs on other data or in another precision apart."""
    return {"data_hash": data_hash(data), "precision": precision}
