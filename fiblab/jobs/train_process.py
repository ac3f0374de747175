"""How a launched training process starts: its command line and how many processes it uses.

Pure pieces of `fiblab.jobs.launch`: ``python -m fiblab.cli train …``, or
``python -m torch.distributed.run --standalone --nproc_per_node=N -m fiblab.cli train …`` over
several GPUs.
"""

from __future__ import annotations

import sys

from lab.lm.typedconfig import format_value, split_overrides
from lab.util import paths
from lab.util.checks import positive_int

DEFAULT_STORE = paths.store_path(paths.work_dir())
DEFAULT_RUNS = paths.runs_dir(paths.work_dir())

__all__ = ["gpu_count", "auto_nproc", "train_command"]


def gpu_count() -> int:
    """CUDA devices visible to this process (0 without CUDA)."""
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a broken CUDA is no GPU
        return 0


def auto_nproc(accum: int, gpus: int) -> int:
    """Processes for ``nproc=None``: the most GPUs (≤ ``gpus``) that ``accum`` micro-batches per
    step split evenly over; 1 without GPUs."""
    return max(n for n in range(1, max(1, gpus) + 1) if accum % n == 0)


def train_command(
    preset: str | None = None,
    *,
    config: str | None = None,
    name: str | None = None,
    steps: int | None = None,
    data: str | None = None,
    overrides=None,
    store: str = DEFAULT_STORE,
    runs_dir: str | None = DEFAULT_RUNS,
    resume: bool = False,
    nproc: int = 1,
    python: str | None = None,
    ray: str | None = None,
) -> list[str]:
    """The argv that trains ``preset``, or the config file ``config`` (a run's config.json, as
    `launch` writes it: then nothing else is needed), under torchrun when ``nproc`` > 1, or as
    a Ray task on the cluster at ``ray`` (`fiblab.cluster.ray_cluster` addresses; one process here).
    Typed override values are written as `lab.lm.typedconfig` reads them back (betas=0.9,0.95).
    Pure: starts nothing."""
    positive_int(nproc, "nproc", "processes, one per GPU")
    if ray and nproc > 1:
        raise ValueError(
            f"nproc={nproc} and ray={ray!r}: give one (a run on Ray is one task, on one GPU "
            f"of the cluster)"
        )
    if (preset is None) == (config is None):
        raise ValueError("train_command needs a preset or a config file (one of the two)")
    py = python or sys.executable
    head = (
        [py, "-m", "fiblab.cli"]
        if nproc == 1
        else [
            py,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
            "-m",
            "fiblab.cli",
        ]
    )
    what = ["--config", config] if config is not None else ["--preset", preset]
    cmd = head + ["train", *what, "--quiet", "--store", store or ""]
    if name:
        cmd += ["--name", name]
    if steps is not None:
        cmd += ["--steps", str(int(steps))]
    if data:
        cmd += ["--data", data]
    over = {
        **({"run_dir": runs_dir} if runs_dir is not None else {}),
        **{k: v for k, v in split_overrides(overrides).items() if k != "run_dir"},
    }
    if over:
        cmd += ["--override"] + [f"{k}={_text(v)}" for k, v in over.items()]
    if resume:
        cmd.append("--resume")
    if ray:
        cmd += ["--ray", ray]
    return cmd


def _text(value) -> str:
    return value if isinstance(value, str) else format_value(value)
