"""A training run's configuration: `TrainConfig`, the named presets, and building one from a
preset (`make_config`) or from a run's config.json (`config_from_file`).

The recipe's defaults are the paper's (see `lab.training.train`); overrides are typed by `lab.lm.typedconfig`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field, replace

from lab.lm.modelconfig import PRESETS, ModelConfig, config_for
from lab.lm.typedconfig import apply_overrides, read_config, typed_overrides
from lab.util.checks import folder_name, nonneg_int, positive_int


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    steps: int = 13_000
    tokens_per_step: int = 32_768
    micro_batch: int = 8
    lr: float = 3e-4
    min_lr_frac: float = 0.1
    warmup: int = 300
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 42
    data: str = "bible"  # a lab.data source spec
    tokenizer: str | None = None  # a tokenizer.json (None: a BPE trained on the text)
    vocab_size: int | None = None  # tokenizer size (default: the model's vocab)
    val_tokens: int | None = None  # held-out tokens per domain (None: min(5 %, 500K))
    eval_every: int = 500  # light eval cadence (0: only the final full eval)
    eval_light_tokens: int = 262_144
    eval_batch: int = 8
    alpha_every: int = 50  # learned-α logging cadence
    ckpt_every: int = 500
    keep_ckpts: int = 3
    log_every: int = 10
    run_dir: str = "runs"
    name: str = ""
    preset: str = ""  # the training preset this config was built from (make_config)
    precision: str = (
        "auto"  # auto | fp32 | bf16 (lab.machine.precision; auto: bf16 on CUDA, fp32 on CPU)
    )

    def __post_init__(self):
        """Every field checked when the config is made (a preset, an override, a config file),
        so a bad value is refused before any process starts: `steps=-3` used to launch a run
        that failed at once and was listed as "failed · step 0 / -3"."""
        for name, hint in (
            ("steps", "optimizer steps"),
            ("tokens_per_step", "tokens per optimizer step"),
            ("micro_batch", "sequences per forward pass"),
            ("eval_batch", "sequences per evaluation batch"),
            ("eval_light_tokens", "held-out tokens of a light evaluation"),
            ("alpha_every", "steps between learned-α logs"),
            ("ckpt_every", "steps between checkpoints"),
            ("keep_ckpts", "checkpoints kept"),
            ("log_every", "steps between logged losses"),
        ):
            positive_int(getattr(self, name), name, hint)
        nonneg_int(self.warmup, "warmup", "warm-up steps")
        nonneg_int(self.eval_every, "eval_every", "steps between light evaluations; 0: none")
        nonneg_int(self.seed, "seed")
        if self.name:  # "" until make_config names it
            folder_name(self.name, "run", "cpu-stagger-s1")
        for name in ("val_tokens", "vocab_size"):
            if getattr(self, name) is not None:
                positive_int(getattr(self, name), name, "or None for the default")
        _real(self.lr, "lr", self.lr > 0, "a learning rate > 0, e.g. 3e-4")
        _real(self.min_lr_frac, "min_lr_frac", 0 <= self.min_lr_frac <= 1, "a fraction in [0, 1]")
        _real(self.eps, "eps", self.eps > 0, "a number > 0, e.g. 1e-8")
        _real(self.weight_decay, "weight_decay", self.weight_decay >= 0, "a number >= 0")
        _real(self.grad_clip, "grad_clip", self.grad_clip > 0, "a gradient-norm bound > 0")
        if len(self.betas) != 2 or not all(_is_real(b) and 0 <= b < 1 for b in self.betas):
            raise ValueError(f"betas={self.betas!r} must be two numbers in [0, 1), e.g. 0.9,0.95")
        from lab.machine.precision import PRECISION_CHOICES

        if self.precision not in PRECISION_CHOICES:
            choices = ", ".join(PRECISION_CHOICES)
            raise ValueError(f"precision={self.precision!r} must be one of {choices}")

    @property
    def accum(self) -> int:
        """Micro-batches per optimizer step summed over all ranks."""
        per = self.micro_batch * self.model.seq_len
        if self.tokens_per_step % per:
            raise ValueError(
                f"tokens_per_step={self.tokens_per_step} is not a multiple of "
                f"micro_batch × seq_len = {per}: change one of them"
            )
        return self.tokens_per_step // per

    def to_dict(self) -> dict:
        d = asdict(self)
        d["model"] = self.model.to_dict()
        return d


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def _real(value, name: str, ok: bool, what: str) -> None:
    """ValueError naming ``name=value`` and what it must be, unless it is a finite number and
    ``ok``."""
    if not (_is_real(value) and ok):
        raise ValueError(f"{name}={value!r} must be {what}")


def _matrix_presets() -> dict[str, dict]:
    out = {"dense": dict(model=dict(attention="dense"))}
    for w in (6, 8, 10, 12):
        for sched in ("fixed", "learned", "stagger", "coprime"):
            over = dict(schedule=sched, window=w)
            out[f"fib-{sched}-w{w}"] = dict(
                model=over, **({"micro_batch": 4} if sched == "learned" else {})
            )
        out[f"pow2-stagger-w{w}"] = dict(model=dict(base="pow2", schedule="stagger", window=w))
    out["pow2-fixed-w8"] = dict(model=dict(base="pow2", schedule="fixed", window=8))
    return out


# small presets: cpu-small model (d=128, 4 layers, T=256, vocab 2048), minutes on 2 cores
_CPU = dict(
    steps=300,
    tokens_per_step=4096,
    micro_batch=16,
    lr=1e-3,
    warmup=30,
    eval_every=100,
    eval_light_tokens=16_384,
    val_tokens=50_000,
    alpha_every=10,
    ckpt_every=100,
    log_every=10,
)
TRAIN_PRESETS: dict[str, dict] = {
    **{k: {"preset": "paper-60m", **v} for k, v in _matrix_presets().items()},
    **{
        f"cpu-{s}": {
            "preset": "cpu-small",
            **_CPU,
            "model": ({"attention": "dense"} if s == "dense" else {"schedule": s}),
        }
        for s in ("dense", "fixed", "stagger", "coprime", "learned")
    },
    "tiny": {
        "preset": "tiny",
        "steps": 12,
        "tokens_per_step": 512,
        "micro_batch": 4,
        "lr": 3e-3,
        "warmup": 3,
        "eval_every": 6,
        "eval_light_tokens": 1024,
        "val_tokens": 2048,
        "alpha_every": 2,
        "ckpt_every": 4,
        "log_every": 1,
        "model": {"schedule": "learned", "vocab_size": 512},
    },
}


def make_config(preset: str, overrides=None) -> TrainConfig:
    """A TrainConfig from a preset name and overrides ({"steps": 10, "model.window": 12} or
    "key=value" strings; values are typed by `lab.lm.typedconfig`).

    The seed suffix "-s43" on a preset name selects another seed (fib-stagger-w12-s43).
    """
    seed = None
    name = preset
    if preset not in TRAIN_PRESETS and "-s" in preset:
        base, _, s = preset.rpartition("-s")
        if base in TRAIN_PRESETS and s.isdigit():
            preset, seed = base, int(s)
    if preset not in TRAIN_PRESETS:
        other = (
            f" ({preset!r} is a model preset; a training preset names one with its recipe)"
            if preset in PRESETS
            else ""
        )
        raise ValueError(
            f"training preset {preset!r} is unknown{other}: use one of "
            f"{sorted(TRAIN_PRESETS)} (optionally with -s<seed>)"
        )
    spec = dict(TRAIN_PRESETS[preset])
    model_over = dict(spec.pop("model", {}))
    model_preset = spec.pop("preset")
    typed = typed_overrides(TrainConfig, overrides)  # every key and value checked first
    cfg = TrainConfig(model=config_for(model_preset, **model_over), **spec)
    cfg = with_tokenizer_vocab(apply_overrides(cfg, typed), typed)
    if seed is not None and "seed" not in typed:
        cfg.seed = seed
    if not cfg.name:
        cfg.name = name if seed is None or name.endswith(f"-s{seed}") else f"{name}-s{seed}"
    if not cfg.preset:
        cfg.preset = preset  # the store's preset column
    _ = cfg.accum  # validates
    return cfg


def config_from_file(path: str, overrides=None) -> TrainConfig:
    """A run's config.json (as `train` writes it) with overrides on top: re-run or vary a run
    (``fiblab train --config runs/NAME/config.json --override …``)."""
    typed = typed_overrides(TrainConfig, overrides)
    cfg = apply_overrides(read_config(path, TrainConfig), typed)
    if "tokenizer" in typed:  # a new tokenizer: a new vocabulary (the file's config had its own)
        cfg = with_tokenizer_vocab(cfg, typed)
    _ = cfg.accum  # validates
    return cfg


def with_tokenizer_vocab(cfg: TrainConfig, typed: dict) -> TrainConfig:
    """With ``cfg.tokenizer`` set, the model's vocab_size becomes the tokenizer's size, unless
    the overrides ``typed`` set model.vocab_size themselves (it must then hold every id: a
    larger one leaves rows unused). Reads the tokenizer file, so a bad one fails here, before
    any work."""
    if not cfg.tokenizer:
        return cfg
    from lab.data.tokenizer import BPETokenizer

    size = BPETokenizer.load(cfg.tokenizer).vocab_size
    if "model.vocab_size" in typed or "model" in typed:
        if cfg.model.vocab_size < size:
            raise ValueError(
                f"model.vocab_size {cfg.model.vocab_size} is smaller than the {size} entries of "
                f"tokenizer {cfg.tokenizer!r}: drop the override (the model then takes the "
                f"tokenizer's size) or set model.vocab_size >= {size}"
            )
        return cfg
    return replace(cfg, model=replace(cfg.model, vocab_size=size))
