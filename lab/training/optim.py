"""The optimizer's side of the paper's recipe: AdamW's parameter groups and the learning-rate
schedule (linear warm-up, cosine decay to a floor).  Pure functions of the config and the
model, so a test can check every step's LR by hand; the α schedules are `lab.ladder.schedules`."""

from __future__ import annotations

import math

import torch

from lab.training.trainconfig import TrainConfig


def lr_at(step: int, cfg: TrainConfig) -> float:
    """LR for optimizer step s = 1..steps: linear warm-up, then cosine to min_lr_frac·peak."""
    if step < cfg.warmup:
        return cfg.lr * step / cfg.warmup
    p = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    lo = cfg.min_lr_frac
    return cfg.lr * (lo + (1 - lo) * 0.5 * (1 + math.cos(math.pi * p)))


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on ≥2-D tensors only; norm gains and θ (0-d/1-d) are excluded."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    other = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": other, "weight_decay": 0.0}]
