"""The sections of `benchmarks/gpu_check.py` (its docstring documents the run), one concept a
module: `run` (time budget, JSON record), `impls` (the Triton and dense paths under test),
`flex` (flex_attention with a hand-built block mask), `check` (every path against the float64
oracle), `attn` (launch tuning and the attention timing table), `model_step` (paper-60m
training steps), `probe` (the retrieval probe's blur gather and step), `ray_sweep` (a tiny
Ray sweep on the GPU), `tables` (the summary)."""
