"""The training panel's form and texts (`fiblab.ui.train`): its presets, the settings a run fills
it with, the two checks a launch makes before starting anything — the run name is free, and the
run is not weeks long on this machine — and the status and stats lines of a snapshot.
"""

from __future__ import annotations

import html
import math
import os
import time

import ipywidgets as W

from fiblab.jobs import detached
from fiblab.jobs import launch as LA
from fiblab.jobs import train_estimate as TE
from fiblab.jobs.train_eta import format_duration
from lab.lm.typedconfig import format_value, read_config
from lab.training.checkpoint import list_checkpoints
from lab.training.phases import TRAINING
from lab.training.trainconfig import TRAIN_PRESETS, TrainConfig

__all__ = [
    "preset_options",
    "form_values",
    "enable",
    "name_taken",
    "long_run_warning",
    "status_html",
    "training_clock",
    "stats_html",
]

LIVE = detached.LIVE
STATE_COLOURS = {
    "done": "#2e7d32",
    "failed": "#b00020",
    "stopped": "#ef6c00",
    "stopping": "#ef6c00",
}


def preset_options() -> list[str]:
    """CPU-sized presets first, then the paper's matrix."""
    small = [p for p in TRAIN_PRESETS if p.startswith("cpu-") or p == "tiny"]
    return small + sorted(p for p in TRAIN_PRESETS if p not in small)


def form_values(h: LA.RunHandle) -> dict:
    """The launch settings of a run, as the form shows them: preset, name, steps (0: the
    preset's), data, overrides (one key=value a line), nproc and the Ray address ('' for a run
    here) — from the handle's spec (what
    `fiblab.jobs.launch.launch` was given), else what its launch.json and launch-config.json say."""
    spec = h.spec or {}
    try:
        data = read_config(os.path.join(h.run_dir, LA.CONFIG_NAME), TrainConfig).data
    except ValueError:
        data = ""
    over = spec.get("overrides") or {}
    return {
        "preset": spec.get("preset") or h.preset,
        "name": spec.get("name") or h.name,
        "steps": int(spec["steps"]) if spec.get("steps") else (0 if spec else h.steps),
        "data": spec.get("data") or data,
        "overrides": "\n".join(
            f"{k}={v if isinstance(v, str) else format_value(v)}" for k, v in over.items()
        ),
        "nproc": int(spec.get("nproc") or 0),
        "ray": spec.get("ray") or "",
    }


def enable(button: W.Button, on: bool, style: str = "") -> None:
    """Enable or disable ``button``; its colour (``style``) only while it can be pressed."""
    button.disabled = not on
    button.button_style = style if on else ""


def name_taken(cfg, runs: str) -> tuple[str, bool] | None:
    """Why a new run may not take ``cfg.name`` under the runs folder ``runs`` (it has
    checkpoints), saying what works instead, and whether the panel should show that run (it can
    stop or resume it); None when the name is free."""
    run_dir = os.path.join(runs, cfg.name)
    if not list_checkpoints(run_dir):
        return None
    try:
        h = LA.attach(cfg.name, runs)
    except ValueError:
        return (
            f"run {cfg.name!r} already has checkpoints in {run_dir} (trained outside this "
            f"panel): type another run name, or delete that folder to train it from step 0",
            False,
        )
    s = LA.snapshot(h)
    where = f"step {s['step']} of {s['steps']}"
    if s["state"] == "done":
        return (
            f"run {cfg.name!r} has finished ({where}): type another run name to train a new "
            f"one, or delete {run_dir} to train it again from step 0",
            False,
        )
    if s["state"] in LIVE:
        return (
            f"run {cfg.name!r} is already running ({where}; shown below now): stop it first, "
            f"or type another run name",
            True,
        )
    return (
        f"run {cfg.name!r} {s['state']} at {where} (shown below now): press resume to continue "
        f"it, or type another run name to start a new run",
        True,
    )


def long_run_warning(cfg, store: str, gpus: int) -> str | None:
    """On a machine without GPUs, a run estimated to train for over an hour
    (`fiblab.jobs.train_estimate`): how long, on what basis, and what to do; else None."""
    if gpus or not TE.may_be_long(cfg):
        return None
    speed = TE.machine_speed(store, TE.train_flops_per_token(cfg.model))
    slower, why = TE.shared_slowdown(speed)  # beside the other lab jobs live now
    secs = TE.run_seconds(cfg, speed) * slower
    if secs <= TE.WARN_S:
        return None
    tokens = cfg.steps * cfg.tokens_per_step
    return (
        f"{cfg.name} would train for about {format_duration(secs)} on this machine (no GPU is "
        f"visible): {cfg.steps:,} steps × {cfg.tokens_per_step:,} tokens = {tokens:,} tokens, "
        f"at the speed {speed.basis}, scaled to this model's size"
        + (f" and {slower:.1f}× for {why}" if why else "")
        + " (a rough estimate; evaluations not counted). Press “launch anyway” to start it, "
        "or choose a cpu-* preset or fewer steps."
    )


def training_clock(first: dict, key, s: dict) -> dict:
    """``s`` with a "training" phase's start moved back to the first start seen for ``key`` (a
    run's process) in ``first``, which it updates: the process rewrites the phase's start after
    each mid-run evaluation, and "training (1m36s so far)" then read "(12s so far)"."""
    if s.get("phase") != TRAINING or not math.isfinite(s.get("phase_since", math.nan)):
        return s
    since = min(first.get(key, math.inf), float(s["phase_since"]))
    first[key] = since
    return {**s, "phase_since": since}


def status_html(s: dict, now: float | None = None) -> str:
    """'<name>: running · step 67/300 · training' — the state, the step and what happens now
    (a live run's phase, how long it has lasted once over 10 s; an exited run's message)."""
    st = s["state"]
    if st == "stopping":
        doing = "stops after the current step, keeping a checkpoint of it"
    elif st in LIVE:
        since = (time.time() if now is None else now) - s.get("phase_since", math.inf)
        doing = s["phase"] + (f" ({format_duration(since)} so far)" if since >= 10 else "")
    else:
        doing = s["message"]
    return (
        f"<b>{html.escape(s['name'])}</b>: <span class='fib-run-state' "
        f"style='color:{STATE_COLOURS.get(st, '#1565c0')}'>{st}</span> · step "
        f"{s['step']}/{s['steps']}"
        + (f" · <span class='fib-run-phase'>{html.escape(doing)}</span>" if doing else "")
    )


def stats_html(s: dict) -> str:
    """Loss, held-out perplexity, tokens/s and — only while it trains — the ETA."""
    st = s["state"]
    if not math.isfinite(s["loss"]):
        return "no training step logged yet" if st in LIVE else ""
    parts = [f"loss {s['loss']:.4f}"]
    if math.isfinite(s["ppl"]):
        parts.append(f"held-out ppl {s['ppl']:.2f}")
    if math.isfinite(s["tokens_per_s"]):
        parts.append(f"{s['tokens_per_s']:,.0f} tokens/s")
    if st == "running":
        parts.append(f"<span class='fib-run-eta'>{html.escape(s['eta'].text())}</span>")
    return " · ".join(parts)
