"""The model's configuration, torch-free: `ModelConfig` (every field of the paper's model and
its attention rule, with the per-layer α and column plans it implies), the named `PRESETS` and
`config_for`.  Apart from the model code so that configs, presets and the CLI's choices load
without torch (`fiblab --help`), and so that the config layer (`lab.lm.typedconfig`) and the
training config build on it without importing the model."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Union

from lab.ladder import offsets, schedules
from lab.ladder.offsets import Ladder
from lab.ladder.plan import ColumnPlan, layer_sets, plan_for
from lab.util.checks import positive_int

RUNG_POLICIES = ("recompute", "freeze")
ATTENTIONS = ("sparse", "dense")
PATHS = ("auto", "shift", "mask", "interp", "blur")


@dataclass(frozen=True)
class ModelConfig:
    # transformer
    d_model: int = 512
    n_layers: int = 16
    n_heads: int = 8
    n_kv_heads: int = 2
    vocab_size: int = 32768
    seq_len: int = 1024
    ffn_ratio: float = 8 / 3
    rope_theta: float = 1e4
    norm_eps: float = 1e-6
    # attention: "sparse" (window + scaled rungs) or "dense" (causal baseline)
    attention: str = "sparse"
    base: Union[str, tuple] = "fib"  # "fib", "pow2" or a tuple of distances
    rungs: int = 15  # K, Fibonacci base only
    window: int = 8  # W: distances 0..W are always attended
    schedule: Union[str, tuple[float, ...]] = "fixed"  # fixed|stagger|coprime|learned|α list
    learned_init: Union[str, tuple[float, ...]] = "fixed"  # start of a learned schedule
    coprime_stride: int | None = None  # S; default = largest s ≤ L/2 coprime with L
    rounding: str = "round"  # integer sets: round (half-to-even) | floor | ceil
    path: str = "auto"  # auto | shift | mask | interp | blur (probes)
    rung_policy: str = "recompute"  # at a longer seq_len: recompute rungs or freeze
    train_seq_len: int | None = None  # length the rungs are frozen at (None: seq_len)
    alpha_min: float = offsets.ALPHA_MIN
    alpha_span: float = offsets.ALPHA_SPAN

    def __post_init__(self):
        for name in ("d_model", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"):
            positive_int(getattr(self, name), name)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}"
            )
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"d_model={self.d_model} must split into n_heads={self.n_heads} "
                f"heads of even size (RoPE rotates pairs)"
            )
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention={self.attention!r} must be 'sparse' or 'dense'")
        if self.rung_policy not in RUNG_POLICIES:
            raise ValueError(f"rung_policy={self.rung_policy!r} must be one of {RUNG_POLICIES}")
        if self.rounding not in offsets.ROUNDINGS:
            raise ValueError(f"rounding={self.rounding!r} must be one of {offsets.ROUNDINGS}")
        if self.path not in PATHS:
            raise ValueError(f"path={self.path!r} must be auto, shift, mask, interp or blur")
        if self.path == "blur" and not (self.learned and self.base == "fib"):
            raise ValueError(
                "path='blur' (the retrieval probe's annealed Gaussian gather) needs "
                "schedule='learned' and base='fib'"
            )
        if self.learned and self.path in ("shift", "mask"):
            raise ValueError(
                f"a learned schedule needs path 'interp' (or 'auto'); path="
                f"{self.path!r} has integer offsets and no gradient to alpha"
            )
        if self.train_seq_len is not None and self.train_seq_len > self.seq_len:
            raise ValueError(f"train_seq_len={self.train_seq_len} exceeds seq_len={self.seq_len}")
        offsets.check_window(self.window)
        offsets.resolve_base(self.base, self.rungs, max(self.rung_reach, 2))  # validates base/K
        self.layer_alphas()  # validates schedule

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ffn_hidden(self) -> int:
        h = int(self.d_model * self.ffn_ratio)
        return h + (h % 2)  # round up to even: 512 -> 1366

    @property
    def learned(self) -> bool:
        return self.attention == "sparse" and self.schedule == "learned"

    @property
    def rung_reach(self) -> int:
        """Length the rung set is computed for (frozen policy: the training length)."""
        if self.rung_policy == "freeze":
            return self.train_seq_len or self.seq_len
        return self.seq_len

    def layer_alphas(self) -> list[float]:
        """Per-layer α of the schedule (for a learned one its start, exactly; a fresh model holds
        `start_alphas`)."""
        base = self.schedule if isinstance(self.schedule, str) else tuple(self.schedule)
        return schedules.layer_alphas(
            base,
            self.n_layers,
            stride=self.coprime_stride,
            init=self.learned_init,
            alpha_min=self.alpha_min,
            alpha_span=self.alpha_span,
        )

    @functools.cached_property
    def ladder(self) -> Ladder:
        """The attention rule's settings as one record (window, base, rungs, rounding, reach);
        built once per config (the config is frozen), as every layer's forward reads it."""
        return Ladder(self.window, self.base, self.rungs, self.rounding, self.rung_reach)

    @property
    def interpolated(self) -> bool:
        """Whether the sparse layers read interpolated columns (a learned α, or path='interp')."""
        return self.attention == "sparse" and (self.learned or self.path == "interp")

    def plan(self, alpha: float, seq_len: int | None = None) -> ColumnPlan:
        """The `ColumnPlan` of a layer of scale α at `seq_len` (default the config's), under the
        config's window, base, rounding, rung reach and rule: what the forward reads."""
        T = self.seq_len if seq_len is None else seq_len
        return plan_for(
            alpha,
            T,
            self.ladder,
            interpolate=self.interpolated,
        )

    def layer_plans(self, alphas: Sequence[float] | None = None) -> list[ColumnPlan] | None:
        """Each layer's `ColumnPlan` at seq_len; None for dense attention.  ``alphas``: per-layer
        α (e.g. a trained model's ``model.alphas()``); default the schedule's, for a learned one
        as a fresh model's float32 θ holds it."""
        if self.attention == "dense":
            return None
        alphas = self.start_alphas() if alphas is None else list(alphas)
        if len(alphas) != self.n_layers:
            raise ValueError(
                f"{len(alphas)} alphas given for n_layers={self.n_layers}: give one per layer"
            )
        return [self.plan(a) for a in alphas]

    def start_alphas(self) -> list[float]:
        """Per-layer α of a fresh model: the schedule's, for a learned one as its float32 θ
        holds it (so a plan or set built here is the one the model reads at step 0)."""
        alphas = self.layer_alphas()
        return [self.stored_alpha(a) for a in alphas] if self.learned else list(alphas)

    def stored_alpha(self, alpha: float) -> float:
        """A learned layer's α as the model holds it: α_min + span·sigmoid(θ), θ in float32."""
        import torch  # the model's own float32 arithmetic; only a learned schedule needs it

        theta = torch.tensor(offsets.theta_from_alpha(alpha, self.alpha_min, self.alpha_span))
        return float(offsets.alpha_from_theta(theta, self.alpha_min, self.alpha_span))

    def attended_sets(self) -> list[list[int]]:
        """Per-layer integer attended distances at seq_len (what the shift / mask paths read;
        for a learned schedule, the sets of a fresh model's α, as `layer_plans` reads it)."""
        if self.attention == "dense":
            return [list(range(self.seq_len))] * self.n_layers
        return layer_sets(self.start_alphas(), self.seq_len, self.ladder)

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, dict] = {
    # the paper's model (SPEC §1): 60,850,688 parameters, 44,073,472 non-embedding
    "paper-60m": dict(),
    # the retrieval-probe model: depth 2/4/8 via n_layers
    "probe-small": dict(
        d_model=256, n_layers=4, n_heads=4, n_kv_heads=2, vocab_size=512, seq_len=512
    ),
    # CPU demo scale
    "cpu-small": dict(
        d_model=128, n_layers=4, n_heads=4, n_kv_heads=2, vocab_size=2048, seq_len=256
    ),
    # unit tests
    "tiny": dict(
        d_model=32,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        vocab_size=64,
        seq_len=64,
        window=2,
        rungs=8,
    ),
}


def config_for(preset: str | ModelConfig = "paper-60m", **overrides) -> ModelConfig:
    if isinstance(preset, ModelConfig):
        return replace(preset, **overrides)
    if preset not in PRESETS:
        raise ValueError(
            f"preset={preset!r} is unknown: use one of {sorted(PRESETS)} (model presets; "
            f"training presets such as cpu-stagger are for `fiblab train`)"
        )
    unknown = set(overrides) - set(ModelConfig.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown model config fields {sorted(unknown)}")
    return ModelConfig(**{**PRESETS[preset], **overrides})
