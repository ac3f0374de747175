"""The paper's decoder-only language model with sparse Fibonacci attention.

Pre-norm blocks: x ← x + Attn(RMSNorm(x)); x ← x + SwiGLU(RMSNorm(x)); final RMSNorm; lm_head tied
to the embedding.  RoPE (rotate-half) is applied to q and k at their true positions before any
sparse gather; GQA reads KV head h // (n_heads / n_kv_heads).  No biases, no dropout.  Init:
N(0, d^-0.5) for the embedding and every Linear, σ/√(2L) for the residual projections.

    build_model("paper-60m", schedule="stagger", window=12)    # 60,850,688 parameters
    logits, loss = model(ids, targets)                          # ids (B, T) -> logits (B, T, V)
    model.alphas()                                              # per-layer α
    long = model.with_seq_len(4096, rung_policy="freeze")       # same weights, longer context
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from lab.ladder import offsets
from lab.ladder.plan import ColumnPlan
from lab.lm.modelconfig import ModelConfig, config_for
from lab.sparse.attention import sparse_attention


# --------------------------------------------------------------------------------------------
# layers
# --------------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):  # (..., dim)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(seq_len: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (seq_len, head_dim), fp32, duplicated halves (rotate-half convention)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)  # (T, D/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, D)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, h, T, D) rotated at positions 0..T−1: x·cos + rotate_half(x)·sin."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, alpha: float):
        super().__init__()
        self.cfg = cfg
        d, hd = cfg.d_model, cfg.head_dim
        self.q_proj = nn.Linear(d, cfg.n_heads * hd, bias=False)
        self.k_proj = nn.Linear(d, cfg.n_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(d, cfg.n_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * hd, d, bias=False)
        self.o_proj.residual = True
        self.start_alpha = float(alpha)  # the α of a fixed layer; a learned one starts here
        self.blur_width = 40.0  # path="blur" only; annealed by the probe runner
        if cfg.learned:
            theta = offsets.theta_from_alpha(alpha, cfg.alpha_min, cfg.alpha_span)
            self.theta = nn.Parameter(torch.tensor(theta))  # 0-d: the learned α, as θ (`alpha`)
        else:
            self.theta = None

    @property
    def alpha(self):
        """This layer's α: a float, or a 0-d tensor on θ's graph when learned — bounded by the
        sigmoid, never clamped (only the start is, in `schedules.layer_alphas`)."""
        if self.theta is None:
            return self.start_alpha
        return offsets.alpha_from_theta(self.theta, self.cfg.alpha_min, self.cfg.alpha_span)

    def plan(self, seq_len: int | None = None) -> ColumnPlan:
        """The columns this layer reads at `seq_len` (default the config's), at its current α."""
        a = self.alpha
        return self.cfg.plan(float(a.detach()) if isinstance(a, torch.Tensor) else a, seq_len)

    def forward(self, x, cos, sin):  # x (B, T, d)
        cfg = self.cfg
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, cfg.n_heads, cfg.head_dim).transpose(1, 2)  # (B,H,T,D)
        k = self.k_proj(x).view(B, T, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)  # (B,KV,T,D)
        v = self.v_proj(x).view(B, T, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        path = "dense" if cfg.attention == "dense" else cfg.path
        if path == "blur":
            from lab.sparse.blur import blur_attention

            y = blur_attention(
                q, k, v, alpha=self.alpha, window=cfg.window, width=self.blur_width, rungs=cfg.rungs
            )
            return self.o_proj(y.transpose(1, 2).reshape(B, T, cfg.n_heads * cfg.head_dim))
        y = sparse_attention(
            q,
            k,
            v,
            alpha=self.alpha,
            ladder=cfg.ladder,
            path=path,
        )  # (B,H,T,D)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, cfg.n_heads * cfg.head_dim))


class SwiGLU(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)
        self.down.residual = True

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, alpha: float):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg, alpha)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.ffn = SwiGLU(cfg.d_model, cfg.ffn_hidden)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.ffn(self.ffn_norm(x))


class FibLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, a) for a in cfg.layer_alphas())
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.embed.weight  # tied
        cos, sin = rope_tables(cfg.seq_len, cfg.head_dim, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self):
        std = self.cfg.d_model**-0.5
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                s = std / math.sqrt(2 * self.cfg.n_layers) if getattr(m, "residual", False) else std
                nn.init.normal_(m.weight, 0.0, s)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor | None = None):
        """ids (B, T) int64 -> logits (B, T, V), loss (mean token cross-entropy) or None."""
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
            got = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise ValueError(f"ids must be a 2-D (batch, time) tensor of token ids; got {got}")
        T = ids.shape[1]
        if T > self.cfg.seq_len:
            raise ValueError(
                f"input length {T} exceeds the model's seq_len={self.cfg.seq_len}: "
                f"rebuild it longer with model.with_seq_len({T})"
            )
        x = self.embed(ids)  # (B, T, d)
        cos, sin = self.rope_cos[:T].to(x.dtype), self.rope_sin[:T].to(x.dtype)
        for block in self.blocks:
            x = block(x, cos, sin)
        logits = self.lm_head(self.norm(x))  # (B, T, V)
        loss = None
        if targets is not None:
            if targets.shape != ids.shape:
                raise ValueError(
                    f"targets shape {tuple(targets.shape)} must equal ids shape {tuple(ids.shape)}"
                )
            loss = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1)
            )
        return logits, loss

    def num_params(self, non_embedding: bool = False) -> int:
        """Unique parameters (the tied embedding counted once)."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.embed.weight.numel() if non_embedding else n

    def alphas(self) -> list[float]:
        """Every layer's current α (dense layers report nan)."""
        if self.cfg.attention == "dense":
            return [math.nan] * self.cfg.n_layers
        return [
            float(b.attn.alpha.detach()) if b.attn.theta is not None else b.attn.alpha
            for b in self.blocks
        ]

    def plans(self, seq_len: int | None = None) -> list[ColumnPlan] | None:
        """Every layer's `ColumnPlan` at its current α (None for a dense model)."""
        if self.cfg.attention == "dense":
            return None
        return [b.attn.plan(seq_len) for b in self.blocks]

    def set_blur_width(self, width: float) -> None:
        """Set the Gaussian width of every blur-gather layer (path="blur")."""
        for b in self.blocks:
            b.attn.blur_width = float(width)

    def with_seq_len(self, seq_len: int, rung_policy: str | None = None) -> FibLM:
        """A copy rebuilt at another length with the same weights (no length-dependent
        parameters).  rung_policy: "recompute" (the paper: rungs up to seq_len−1, so α ≳ 1.04
        layers gain never-trained rungs) or "freeze" (rungs stay those of the training length)."""
        train = self.cfg.train_seq_len or self.cfg.seq_len
        cfg = replace(
            self.cfg,
            seq_len=seq_len,
            train_seq_len=min(train, seq_len),
            rung_policy=rung_policy or self.cfg.rung_policy,
        )
        model = FibLM(cfg).to(self.embed.weight.device)
        model.load_state_dict(copy.deepcopy(self.state_dict()))
        return model

    def generate(self, ids, max_new_tokens: int, **kw) -> torch.Tensor:
        """ids (B, T) -> (B, T + max_new_tokens); temperature, top_k, seed: `lab.lm.generate`."""
        from lab.lm.generate import generate

        return generate(self, ids, max_new_tokens, **kw)


def build_model(preset: str | ModelConfig = "paper-60m", **overrides) -> FibLM:
    """Build a model from a preset name (see PRESETS) with any config field overridden."""
    return FibLM(config_for(preset, **overrides))
