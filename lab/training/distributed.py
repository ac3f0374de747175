"""One training process or N under torchrun: the process group and this rank's device.

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; without them the loop is a single process.  gloo on
CPU, NCCL on GPUs.  Each rank takes every N-th micro-batch of the global step (`lab.training.train`),
so N processes see exactly the samples one process would."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class DistInfo:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed() -> DistInfo:
    """torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; without them this is a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available()
    if world <= 1:
        return DistInfo(device=torch.device("cuda" if cuda else "cpu"))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    return DistInfo(rank=dist.get_rank(), world=dist.get_world_size(), device=device)
