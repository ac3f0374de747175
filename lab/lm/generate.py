"""Sampling text from a FibLM: `generate(model, ids, max_new_tokens, …)` → ids with the new
tokens appended.

KV-cache-free: each step re-runs the model on the last seq_len tokens (the window is cropped to
the model's context, so positions restart at 0 once the text is longer than it) and samples the
next token from the last position's logits.  At lab scale that is cheap enough: the cpu-small
model (d=128, 4 layers, T=256, stagger; fp32, batch 1, top-k 50) generated 64 tokens at ≈ 55
tokens/s after a 16-token prompt and ≈ 25–35 tokens/s with the window full (256 tokens), on the
shared 2-core machine with 1 torch thread (2 threads were several times slower there while other
jobs held the cores: `fiblab sample --threads 1` on a busy machine).

    out = generate(model, ids, 64, temperature=0.8, top_k=50, seed=0)   # ids (B, T) -> (B, T+64)
    out = generate(model, ids, 64, temperature=0)                       # greedy (argmax)
"""

from __future__ import annotations

import math

import torch

from lab.util.checks import positive_int


def _check(model, ids, max_new_tokens, temperature, top_k, eot_id) -> None:
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype.is_floating_point:
        got = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(
            f"ids must be a 2-D (batch, time) tensor of integer token ids; got {got} "
            f"(one prompt: torch.tensor([ids]))"
        )
    if ids.shape[1] < 1:
        raise ValueError("ids has no tokens: give a prompt of at least one token (e.g. the EOT)")
    V = model.cfg.vocab_size
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= V):
        raise ValueError(
            f"token ids span [{int(ids.min())}, {int(ids.max())}], outside [0, vocab_size={V}): "
            f"encode the prompt with the model's tokenizer"
        )
    if (
        isinstance(max_new_tokens, bool)
        or not isinstance(max_new_tokens, int)
        or max_new_tokens < 0
    ):
        raise ValueError(f"max_new_tokens={max_new_tokens!r} must be an integer >= 0")
    if (
        not isinstance(temperature, (int, float))
        or not math.isfinite(temperature)
        or temperature < 0
    ):
        raise ValueError(
            f"temperature={temperature!r} must be a finite number >= 0 (0: greedy, 1: the "
            f"model's distribution)"
        )
    if top_k is not None:
        positive_int(top_k, "top_k", "or None for no cut")
    if eot_id is not None and not 0 <= eot_id < V:
        raise ValueError(f"eot_id={eot_id!r} is outside [0, vocab_size={V})")


def next_token_probs(logits: torch.Tensor, temperature: float, top_k: int | None) -> torch.Tensor:
    """logits (B, V) -> probabilities (B, V) at `temperature` (> 0), the top_k largest kept."""
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.softmax(logits, dim=-1)


@torch.no_grad()
def generate(
    model,
    ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    stop_at_eot: bool = False,
    eot_id: int = 0,
) -> torch.Tensor:
    """ids (B, T) -> (B, T + n): n = max_new_tokens sampled tokens appended (fewer only with
    ``stop_at_eot``, which ends once every row has produced ``eot_id``; a row that ended earlier
    is filled with eot_id).  ``temperature`` 0 is greedy (argmax, no randomness); otherwise
    tokens are drawn from softmax(logits / temperature) over the ``top_k`` most likely.  Draws
    use ``generator``, else a fresh one seeded with ``seed`` (same seed, same tokens), else
    torch's global RNG.  The model is run in eval mode and put back as it was."""
    _check(model, ids, max_new_tokens, temperature, top_k, eot_id if stop_at_eot else None)
    device = next(model.parameters()).device
    ids = ids.to(device=device, dtype=torch.long)
    if generator is None and seed is not None:
        generator = torch.Generator(device=device)
        generator.manual_seed(int(seed))
    T_max = model.cfg.seq_len
    was_training = model.training
    model.eval()
    done = torch.zeros(ids.shape[0], dtype=torch.bool, device=device)  # (B,)
    try:
        for _ in range(max_new_tokens):
            logits, _ = model(ids[:, -T_max:])  # (B, t, V)
            last = logits[:, -1, :]  # (B, V)
            if temperature == 0:
                nxt = last.argmax(dim=-1, keepdim=True)  # (B, 1)
            else:
                probs = next_token_probs(last, float(temperature), top_k)
                nxt = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
            if stop_at_eot:
                nxt = nxt.masked_fill(done[:, None], eot_id)
                done |= nxt[:, 0] == eot_id
            ids = torch.cat([ids, nxt], dim=1)
            if stop_at_eot and bool(done.all()):
                break
    finally:
        model.train(was_training)
    return ids
