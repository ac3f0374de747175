"""Probes on the lab: coverage and receptive field (`coverage`, `receptive_field`), the RULER / LEGO
battery (`battery`, `battery_run`), and the retrieval probes — small models trained on synthetic
copy tasks while α is watched:

A *cell* is (task, mechanism, depth, init, seed).  Mechanisms on the `probe-small` model
(d=256, 4 heads, 2 KV heads, W=8, K=15):

    dense          causal attention
    fib-fixed      Fibonacci rungs at α=1 (integer shift path)
    pow2           reach-matched power-of-2 rungs at α=1
    fib-stagger    the fixed linear stagger 0.5 → 1.5 over depth (unclamped)
    learned        learned α through the LM's interpolated gather
    blur           learned α through the annealed Gaussian blur gather (the paper's Table 2;
                   width 40 → 0.5 over the first 80 % of steps)

Mechanisms are `lab.ladder.schemes` schemes (the registry gives their model overrides; "stagger" or
"fib/stagger" are accepted for fib-stagger and recorded under the canonical name).
Learned mechanisms start uniform (α=1) or staggered (the stagger clamped to [0.55, 1.45]).
Defaults are the paper's marked-task settings: T=512, vocab 512, batch 2, 2,500 steps, AdamW
lr 1e-3 (torch defaults otherwise), no schedule, no clipping.  The `quick` scale (400 steps) is a
fast look, not a reproduction; `tiny` (T=48, distances 5 and 13, d=64, 150 steps) takes ≈ 7 s a
cell with start-up on 2 quiet cores, up to a minute when they are busy.

Tasks: ``marked`` (the paper's Table 2), ``shift`` (single-distance shift copy, one trained
distance per cell, evaluated there and at control distances) and ``kv`` (key–value retrieval with
distractors, distances drawn per batch, forced-choice accuracy per evaluation distance).

The pieces: `probes.settings` (mechanisms, `ProbeSettings`, `SCALES`, `Cell`), `probes.runner`
(`run_cell`: one cell trained, its α every `log_every` steps, loss curve, accuracy per
distance, seconds) and `probes.grid` (`grid`, and `run_grid`, which appends one JSON line per
finished cell and skips cells already in the file, so an interrupted grid resumes where it
stopped).
"""
